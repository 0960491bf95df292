"""How to start the tritonserver binary that ships in the nvidia-pytriton wheel.

Facts from ../shared/DESIGN.md: the python backend needs a backend directory
holding libtriton_python.so and the stub built for the running Python; the
stub must bind this interpreter's libpython (LD_LIBRARY_PATH) and finds
numpy/onnxruntime through the Triton environment's python3 first on PATH.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import sysconfig
from pathlib import Path
from urllib.parse import urlsplit

from recserve_kit.transport import (
    TRITON_CONTROL_HEADER,
    TRITON_CONTROL_SECRET,
    TRITON_KEEPALIVE_FLAGS,
    Tls,
)
from recserve_stack.probes import grpc_serving, http_ok
from recserve_stack.settings import StackSettings


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise FileNotFoundError(f"no Triton environment at {venv}: run `make setup`")
    return found[0]


def backend_directory(settings: StackSettings) -> Path:
    """A --backend-directory with python/ assembled from the wheel's parts."""
    wheel = site_packages(settings.triton_venv) / "pytriton" / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    parts = {
        "libtriton_python.so": wheel / "backends" / "python" / "libtriton_python.so",
        "triton_python_backend_utils.py": wheel
        / "backends"
        / "python"
        / "triton_python_backend_utils.py",
        "triton_python_backend_stub": wheel
        / "python_backend_stubs"
        / version
        / "triton_python_backend_stub",
    }
    target = settings.data_dir / "triton" / "backends" / "python"
    target.mkdir(parents=True, exist_ok=True)
    for name, source in parts.items():
        if not source.exists():
            raise FileNotFoundError(f"Triton wheel is missing {source}")
        link = target / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source)
    return target.parent


# Where the python backend keeps each model instance's tensor region. Triton
# removes its own on a clean stop; one that is killed leaves them (1 MiB or
# more each, in memory) until the host reboots.
SHARED_MEMORY_DIR = Path("/dev/shm")


def shared_memory_prefix(settings: StackSettings) -> str:
    """This stack's Triton's region names: its port and data directory, so
    clearing them never touches another stack's."""
    place = hashlib.sha256(str(settings.data_dir.resolve()).encode()).hexdigest()[:8]
    return f"recserve-triton-{settings.triton_grpc_port}-{place}-"


def shared_memory(settings: StackSettings, directory: Path = SHARED_MEMORY_DIR) -> list[Path]:
    """This stack's Triton's regions there now."""
    return sorted(directory.glob(shared_memory_prefix(settings) + "*"))


def remove_shared_memory(settings: StackSettings, directory: Path = SHARED_MEMORY_DIR) -> int:
    """Removes the regions a killed Triton of this stack left behind; run
    while none of its Triton runs (before a start, after a kill). Returns
    how many it removed."""
    removed = 0
    for region in shared_memory(settings, directory):
        with contextlib.suppress(FileNotFoundError):
            region.unlink()
            removed += 1
    return removed


def command(settings: StackSettings, models: list[str]) -> list[str]:
    wheel = site_packages(settings.triton_venv) / "pytriton" / "tritonserver"
    settings.repository.mkdir(parents=True, exist_ok=True)
    argv = [
        str(wheel / "bin" / "tritonserver"),
        f"--model-repository={settings.repository}",
        f"--backend-directory={backend_directory(settings)}",
        f"--backend-config=python,shm-region-prefix-name={shared_memory_prefix(settings)}",
        "--model-control-mode=explicit",
        "--strict-readiness=true",
        f"--grpc-address={settings.host}",
        f"--http-address={settings.host}",
        f"--metrics-address={settings.host}",
        f"--grpc-port={settings.triton_grpc_port}",
        *TRITON_KEEPALIVE_FLAGS,
        f"--http-port={settings.triton_http_port}",
        f"--metrics-port={settings.triton_metrics_port}",
        "--log-verbose=0",
    ]
    if settings.tls:
        argv += security_flags(settings.tls_dir)
    traces = otlp_http_traces_url()
    if traces:
        # Only requests that carry a trace context (from the ranker) are traced.
        argv += [
            "--trace-config=mode=opentelemetry",
            "--trace-config=rate=0",
            "--trace-config=level=TIMESTAMPS",
            f"--trace-config=opentelemetry,url={traces}",
            "--trace-config=opentelemetry,resource=service.name=triton",
        ]
    if settings.triton_config_name:
        argv.append(f"--model-config-name={settings.triton_config_name}")
    argv += [f"--load-model={name}" for name in models]
    return argv


# Model control (load/unload, the repository index) and the settings that
# could be abused (shared memory, trace, log) need the ranker's secret header.
CONTROL_PROTOCOLS = "model-repository,shared-memory,trace,logging"


def security_flags(tls_dir: Path) -> list[str]:
    """Mutual TLS on gRPC (only the stack's certificates get in) and the
    control APIs behind the secret header, so no other local process can use them. No HTTP:
    tritonserver has no TLS there, and readiness is asked over gRPC."""
    secret = (tls_dir / TRITON_CONTROL_SECRET).read_text().strip()
    restriction = f"{TRITON_CONTROL_HEADER}={secret}"
    return [
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={tls_dir / 'triton.pem'}",
        f"--grpc-server-key={tls_dir / 'triton.key'}",
        f"--grpc-root-cert={tls_dir / 'ca.pem'}",
        f"--grpc-restricted-protocol={CONTROL_PROTOCOLS}:{restriction}",
        "--allow-http=false",
    ]


def otlp_http_traces_url() -> str:
    """Triton exports OTLP over HTTP: the collector's 4318 beside the gRPC 4317.

    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT wins when it is an HTTP traces URL;
    otherwise the OTLP endpoint's host with port + 1 (the collector's default
    pair) and /v1/traces.
    """
    explicit = os.environ.get("RECSERVE_STACK_TRITON_OTLP_HTTP_URL", "")
    if explicit:
        return explicit
    raw = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if not raw:
        return ""
    parsed = urlsplit(raw if "://" in raw else f"http://{raw}")
    port = (parsed.port or 4317) + 1
    return f"http://{parsed.hostname or '127.0.0.1'}:{port}/v1/traces"


def environment(settings: StackSettings) -> dict[str, str]:
    site = site_packages(settings.triton_venv)
    libdir = sysconfig.get_config_var("LIBDIR")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [libdir, str(site / "nvidia_pytriton.libs"), env.get("LD_LIBRARY_PATH", "")]
    ).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(settings.triton_venv / "bin"), env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    # glibc gives each of Triton's busy threads its own malloc arena, and each
    # keeps its high-water mark: 30-40 MB more resident after a burst of large
    # requests (measured, docs/benchmarks.md). Two arenas suit a CPU server.
    env.setdefault("MALLOC_ARENA_MAX", "2")
    return env


def available_models(settings: StackSettings) -> list[str]:
    """The wanted models that the repository actually holds."""
    return [m for m in settings.triton_models if (settings.repository / m).is_dir()]


async def ready(settings: StackSettings, tls: Tls | None) -> bool:
    """gRPC health and the metrics endpoint both answer: tritonserver opens
    gRPC, then HTTP, then metrics, so gRPC alone let a scrape be refused."""
    grpc_url = f"{settings.host}:{settings.triton_grpc_port}"
    metrics_url = f"http://{settings.host}:{settings.triton_metrics_port}/metrics"
    return await grpc_serving(grpc_url, tls=tls) and await http_ok(metrics_url)
