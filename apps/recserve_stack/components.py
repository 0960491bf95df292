"""The components of the local stack and how each is started and probed."""

from __future__ import annotations

import dataclasses
import functools
import os

from recserve_kit.transport import Tls
from recserve_stack import auth, envoy, pki, triton
from recserve_stack.probes import grpc_serving, http_ok
from recserve_stack.runner import Component
from recserve_stack.settings import ROOT, STANDBY_GATEWAY, STANDBY_MARK, StackSettings

SERVICES = ("features", "retriever", "ranker", "gateway")
HOSTED = SERVICES[:3]  # the modules a request-path process hosts (one_process)
# What a further request-path process follows of the first's writers.
FOLLOWS = {"RECSERVE_RETRIEVER_FOLLOW": "true", "RECSERVE_FEATURES_PUBLISH": "false"}


def service_environment(settings: StackSettings) -> dict[str, str]:
    """RECSERVE_<SERVICE>_* variables for every service, from the stack settings."""
    host = settings.host
    env: dict[str, str] = {}
    for name in SERVICES:
        prefix = f"RECSERVE_{name.upper()}_"
        env[prefix + "HOST"] = host
        env[prefix + "PORT"] = str(getattr(settings, f"{name}_port"))
        env[prefix + "METRICS_PORT"] = str(settings.metrics_port(name))
        env[prefix + "DATA_DIR"] = str(settings.data_dir)
        if settings.tls:
            env[prefix + "TLS_DIR"] = str(settings.tls_dir)
            env[prefix + "ADMIN_JWKS"] = str(settings.data_dir / "auth" / "jwks.json")
        if settings.unix_sockets:
            env[prefix + "SOCKET"] = str(settings.socket(name))
    # Triton listens on TCP only (it appends a port to any address).
    env["RECSERVE_RANKER_TRITON_URL"] = f"{host}:{settings.triton_grpc_port}"
    metrics = f"http://{host}:{settings.triton_metrics_port}/metrics"
    env["RECSERVE_RANKER_TRITON_METRICS_URL"] = metrics
    env["RECSERVE_RANKER_FEATURES_ADDR"] = internal_address(settings, "features")
    env["RECSERVE_GATEWAY_FEATURES_ADDR"] = internal_address(settings, "features")
    env["RECSERVE_GATEWAY_RETRIEVER_ADDR"] = internal_address(settings, "retriever")
    env["RECSERVE_GATEWAY_RANKER_ADDR"] = internal_address(settings, "ranker")
    # The item tower, for items upserted without a vector.
    env["RECSERVE_RETRIEVER_RANKER_ADDR"] = internal_address(settings, "ranker")
    # The user tower, for users' vectors computed again after their events.
    env["RECSERVE_FEATURES_RANKER_ADDR"] = internal_address(settings, "ranker")
    return env


def internal_address(settings: StackSettings, name: str) -> str:
    """Where the stack's own processes call ``name``: its socket, or its port."""
    if settings.unix_sockets:
        return f"unix:{settings.socket(name)}"
    return f"{settings.host}:{getattr(settings, f'{name}_port')}"


def ensure_socket_dir(settings: StackSettings) -> None:
    """The sockets' directory, this user's alone (services refuse any other)."""
    if settings.unix_sockets:
        settings.socket_dir.mkdir(parents=True, exist_ok=True)
        settings.socket_dir.chmod(0o700)


AFTER = {"ranker": ("triton", "features"), "gateway": ("features", "retriever", "ranker")}


def after(settings: StackSettings, service: str) -> tuple[str, ...]:
    """What must be ready before a process of ``service`` starts: with
    ``one_process``, every other gateway and ranker waits for the one that
    hosts the backends (which waits for Triton)."""
    return ("gateway",) if settings.one_process else AFTER.get(service, ())


def operator_tls(settings: StackSettings) -> Tls | None:
    """The certificate the runner, tools and tests call internal ports with."""
    return Tls.load(settings.tls_dir, "operator") if settings.tls else None


def service_component(settings: StackSettings, name: str, env: dict[str, str]) -> Component:
    address = f"{settings.host}:{getattr(settings, f'{name}_port')}"
    return Component(
        name=name,
        argv=[str(settings.python), "-u", "-m", f"services.{name}"],
        ready=functools.partial(grpc_serving, address, tls=operator_tls(settings)),
        env=env,
        cwd=ROOT,
        address=address,
        after=after(settings, name),
    )


async def request_path_serving(address: str, tls: Tls | None) -> bool:
    """A request-path process (``one_process``) serves, and so does each
    module it hosts: its gateway reports them as dependency/<module>."""
    for service in ("", *(f"dependency/{module}" for module in HOSTED)):
        if not await grpc_serving(address, service, tls=tls):
            return False
    return True


def one_process_component(settings: StackSettings, env: dict[str, str]) -> Component:
    """The gateway's process hosting the three backends (``one_process``):
    named "gateway", ready when it and each module it hosts serve."""
    address = f"{settings.host}:{settings.gateway_port}"
    return Component(
        name="gateway",
        argv=[str(settings.python), "-u", "-m", "services.one_process"],
        ready=functools.partial(request_path_serving, address, operator_tls(settings)),
        env=env,
        cwd=ROOT,
        address=address,
        # Started beside Triton, not after it: its imports take as long as
        # Triton's loading, and its ranker is ready once Triton is.
    )


def request_path(settings: StackSettings, env: dict[str, str]) -> list[Component]:
    """The service processes: one each, or the one process that hosts all."""
    if settings.one_process:
        return [one_process_component(settings, env)]
    return [service_component(settings, name, env) for name in SERVICES]


def replica_process(
    settings: StackSettings,
    service: str,
    name: str,
    port: int,
    metrics_port: int,
    env: dict[str, str],
) -> Component:
    """One more process of ``service``: the same settings, its own gRPC and
    metrics ports (0: none) and socket."""
    address = f"{settings.host}:{port}"
    prefix = f"RECSERVE_{service.upper()}_"
    socket = {f"{prefix}SOCKET": str(settings.socket(name))} if settings.unix_sockets else {}
    return Component(
        name=name,
        argv=[str(settings.python), "-u", "-m", f"services.{service}"],
        ready=functools.partial(grpc_serving, address, tls=operator_tls(settings)),
        env={
            **env,
            f"{prefix}PORT": str(port),
            f"{prefix}METRICS_PORT": str(metrics_port),
            **socket,
        },
        cwd=ROOT,
        address=address,
        after=after(settings, service),
    )


def gateway_process(
    settings: StackSettings, name: str, port: int, replica: int, env: dict[str, str]
) -> Component:
    metrics_port = settings.metrics_port("gateway", replica)
    return replica_process(settings, "gateway", name, port, metrics_port, env)


def request_path_follower(
    settings: StackSettings, name: str, port: int, replica: int, env: dict[str, str]
) -> Component:
    """One more process of the whole request path (``one_process``): its
    gateway on ``port``, its modules on ports of their own that only it
    calls, each following the first process's writers: the retriever
    rebuilds the writer's index and replays its change feed, the features
    read what the first publishes, the ranker follows the rollout. Calls
    that write (events, items, operator actions) go to the first's."""
    prefixes = [f"RECSERVE_{module.upper()}_" for module in HOSTED]
    own = {k: v for k, v in env.items() if k not in {p + "SOCKET" for p in prefixes}}
    own.update({p + suffix: "0" for p in prefixes for suffix in ("PORT", "METRICS_PORT")})
    component = gateway_process(settings, name, port, replica, {**own, **FOLLOWS})
    # Started at once: it imports beside the first's start, then waits for
    # the first's modules to serve before it builds its own (one_process).
    return dataclasses.replace(
        component,
        argv=[str(settings.python), "-u", "-m", "services.one_process"],
        ready=functools.partial(request_path_serving, component.address, operator_tls(settings)),
        after=(),
    )


def ranker_replicas(settings: StackSettings, env: dict[str, str]) -> list[Component]:
    """The extra rankers ("ranker-2", ...), no metrics port (the first's is the stack's)."""
    return [
        replica_process(settings, "ranker", f"ranker-{n}", port, 0, env)
        for n, port in enumerate(settings.ranker_extra_ports, start=2)
    ]


def gateway_replicas(settings: StackSettings, env: dict[str, str]) -> list[Component]:
    """The extra gateways (with ``one_process``, each a request-path process
    of its own), the canary build's gateway and the standby, when set."""
    extra = request_path_follower if settings.one_process else gateway_process
    replicas = [
        extra(settings, name, port, replica, env)
        for replica, (name, port) in enumerate(
            zip(settings.gateway_names[1:], settings.gateway_extra_ports, strict=True), start=1
        )
    ]
    replica = len(settings.gateway_extra_ports)
    if settings.gateway_canary_port:
        replica += 1
        canary_env = {**env, **settings.gateway_canary_env}
        replicas.append(
            gateway_process(
                settings, "gateway-canary", settings.gateway_canary_port, replica, canary_env
            )
        )
    if settings.gateway_standby_port:
        replica += 1
        # Marked, so tools that kill "the gateway" pick one that serves.
        standby_env = {**env, STANDBY_MARK: "standby"}
        replicas.append(
            gateway_process(
                settings, STANDBY_GATEWAY, settings.gateway_standby_port, replica, standby_env
            )
        )
    return replicas


def stack_components(settings: StackSettings) -> list[Component]:
    auth.ensure_keys(settings.data_dir / "auth")
    if settings.tls:
        pki.ensure_pki(settings.tls_dir)
    ensure_socket_dir(settings)
    env = {**os.environ, **service_environment(settings), "PYTHONUNBUFFERED": "1"}
    if "OTEL_TRACES_SAMPLER" not in os.environ:
        # Exporting every span cost the gateway a fifth of its CPU under load
        # (py-spy); a sampled share measures the latency budget as well.
        env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        env["OTEL_TRACES_SAMPLER_ARG"] = str(settings.trace_sample_ratio)
    envoy_admin = f"http://{settings.host}:{settings.envoy_admin_port}"
    replicas = gateway_replicas(settings, env)
    components = [
        Component(
            name="triton",
            argv=triton.command(settings, triton.available_models(settings)),
            ready=functools.partial(triton.ready, settings, operator_tls(settings)),
            env=triton.environment(settings),
            address=f"{settings.host}:{settings.triton_grpc_port}",
            # Triton 2.51's SIGTERM handler takes a mutex its main loop holds
            # while it waits; a signal landing then hangs it for good (seen:
            # both threads in SignalHandler, gdb). It keeps nothing (the
            # repository is read-only to it), and its own stop waited 3 s on
            # its python-backend stubs: killed once nothing calls it, its
            # shared memory cleared after.
            stop_signal="KILL",
            leftovers=functools.partial(triton.remove_shared_memory, settings),
        ),
        *request_path(settings, env),
        *ranker_replicas(settings, env),
        *replicas,
        Component(
            name="envoy",
            argv=[
                envoy.envoy_binary(),
                "-c",
                str(envoy.write_config(settings)),
                "--log-level",
                "warn",
                # Several Envoys may share a machine (tests); no hot restart.
                "--disable-hot-restart",
                *(["--concurrency", str(settings.envoy_workers)] if settings.envoy_workers else []),
            ],
            ready=functools.partial(http_ok, f"{envoy_admin}/ready"),
            address=f"{settings.host}:{settings.envoy_port}",
            after=("gateway", *(c.name for c in replicas)),
        ),
    ]
    if settings.retrain_at:
        components.append(retrain_component(settings))
    return components


async def running() -> bool:
    """Ready as soon as it runs: the schedule serves no port."""
    return True


def retrain_component(settings: StackSettings) -> Component:
    """The nightly cycle (``retrain_schedule``), once the stack serves."""
    return Component(
        name="retrain",
        argv=[
            str(settings.python),
            "-u",
            "-m",
            "recserve_stack",
            "retrain",
            "--every-day-at",
            settings.retrain_at,
            "--guardrail-baseline-rate",
            str(settings.retrain_baseline_rate),
            "--guardrail-min-drop",
            str(settings.retrain_min_drop),
        ],
        ready=running,
        env={
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "RECSERVE_STACK_DATA_DIR": str(settings.data_dir),
            "RECSERVE_STACK_HOST": settings.host,
            "RECSERVE_STACK_ENVOY_PORT": str(settings.envoy_port),
        },
        cwd=ROOT,
        address=f"every day at {settings.retrain_at} UTC",
        after=("envoy",),
    )
