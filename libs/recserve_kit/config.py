"""Settings read from environment variables with a per-service prefix.

Each service subclasses ``ServiceSettings`` with its own ``env_prefix``;
``load_settings`` validates at start and stops the process with a message that
names the offending variable, instead of failing later on first use.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from recserve_kit.transport import LOOPBACK_HOSTS, Tls

DEFAULT_DATA_DIR = Path("data")


class ServiceSettings(BaseSettings):
    """Settings every service has. Subclasses set ``env_prefix``."""

    model_config = SettingsConfigDict(env_prefix="RECSERVE_", extra="ignore", frozen=True)

    host: str = Field("127.0.0.1", description="Address the gRPC server binds.")
    port: int = Field(50050, ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus /metrics port; 0: off.")
    metrics_host: str = Field(
        "127.0.0.1", description="Address /metrics binds (0.0.0.0 in a container network)."
    )
    data_dir: Path = Field(
        DEFAULT_DATA_DIR, description="Where artifacts, stores and trace files live."
    )
    log_level: str = Field(
        "INFO",
        pattern="^(DEBUG|INFO|WARNING|ERROR)$",
        description="Least severe log level written: DEBUG, INFO, WARNING or ERROR.",
    )
    shutdown_grace_s: float = Field(
        5.0, gt=0, le=120, description="In-flight calls get this long to finish on SIGTERM."
    )
    shutdown_drain_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="NOT_SERVING is reported this long before new calls are refused, "
        "so health-checking load balancers (Envoy checks every 1 s) stop routing first.",
    )

    tls_dir: Path | None = Field(
        None,
        description="The stack's certificates (ca.pem, <service>.pem and .key, made at "
        "setup): the port and every channel use mutual TLS. Unset: plaintext, loopback only.",
    )
    socket: Path | None = Field(
        None,
        description="Also listen on this Unix socket (local credentials, no TLS) for callers "
        "on the same host; its directory must be this user's alone (mode 700).",
    )
    admin_jwks: Path | None = Field(
        None,
        description="The admin key set (JWKS): admin RPCs verify the caller's bearer token "
        "against it. Required with tls_dir; unset on plaintext loopback (tests) they are open.",
    )

    @model_validator(mode="after")
    def secure_off_loopback(self) -> ServiceSettings:
        # Plaintext is for in-process tests and debugging on one machine: any
        # other address must authenticate its callers.
        if self.tls_dir is None and self.host not in LOOPBACK_HOSTS:
            raise ValueError(
                f"host {self.host}: plaintext is allowed on loopback only; "
                f"set {env_name(type(self), 'tls_dir')}"
            )
        if self.tls_dir is not None and self.admin_jwks is None:
            raise ValueError(
                f"{env_name(type(self), 'admin_jwks')} is required with "
                f"{env_name(type(self), 'tls_dir')} (admin RPCs verify tokens)"
            )
        return self

    def tls(self, identity: str) -> Tls | None:
        """This component's certificate, or None for plaintext."""
        return None if self.tls_dir is None else Tls.load(self.tls_dir, identity)

    @field_validator("data_dir")
    @classmethod
    def absolute_data_dir(cls, value: Path) -> Path:
        # Feast resolves store paths against its repo dir: relative ones break.
        return value.resolve()


class ConfigError(SystemExit):
    """Raised (as a process exit) when settings do not validate."""


S = TypeVar("S", bound=BaseSettings)


def env_name(settings_cls: type[BaseSettings], field: str) -> str:
    prefix = settings_cls.model_config.get("env_prefix", "") or ""
    return f"{prefix}{field}".upper()


def load_settings(settings_cls: type[S]) -> S:
    """Read and validate settings, or exit with one line per bad variable."""
    try:
        return settings_cls()
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            if not error["loc"]:  # a rule across fields names them itself
                lines.append(f"  {error['msg']}")
                continue
            given = error.get("input")
            lines.append(
                f"  {env_name(settings_cls, str(error['loc'][0]))}={given!r}: {error['msg']}"
            )
        message = "invalid configuration:\n" + "\n".join(lines)
        print(message, file=sys.stderr)
        raise ConfigError(2) from None
