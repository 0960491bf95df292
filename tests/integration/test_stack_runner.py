"""The local stack runner with the real Envoy, Triton and service processes."""

import socket
import time

import grpc
import psutil
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.helpers import data_dir_with_artifacts, poll_until
from tests.stack import running_stack, start_stack, stop_stack, wait_ready


def list_services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=5)))
    return {s.name for s in reply.list_services_response.service}


@pytest.mark.parametrize(
    "one_process, components",
    [
        ("false", ("triton", "features", "retriever", "ranker", "gateway", "envoy")),
        # The gateway's process hosts the three backends (the default under 4 cores).
        ("true", ("triton", "gateway", "envoy")),
    ],
)
def test_stack_starts_serves_reflection_through_envoy_and_stops_clean(
    tmp_path, built, one_process, components
):
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    with running_stack(data_dir, RECSERVE_STACK_ONE_PROCESS=one_process) as stack:
        by_component: dict[str, list[str]] = {}
        for line in stack.lines:
            name, sep, rest = line.partition(" | ")
            if sep:
                by_component.setdefault(name.strip(), []).append(rest)
        assert set(by_component) >= set(components), sorted(by_component)
        for name in components:
            assert any(rest.startswith("ready") for rest in by_component[name]), name
        # Each component's own log lines arrive under its name (the features
        # module's under its host's).
        host = "features" if "features" in components else "gateway"
        features_address = f'"address": "{stack.address("features")}"'
        assert any(
            '"msg": "serving"' in rest and features_address in rest for rest in by_component[host]
        ), by_component[host][:20]
        assert any("Started GRPCInferenceService" in rest for rest in by_component["triton"])
        services = poll_until(
            lambda: list_services(stack.envoy_address), 30, 0.5, "reflection via Envoy"
        )
        assert "recserve.recommend.v1.RecommendService" in services
        children = stack.descendants()
        assert len(children) >= len(components)  # each component (and Triton's stubs)
    assert stack.process.returncode == 0
    assert "stack stopped" in stack.output()
    poll_until(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in children),
        20,
        0.1,
        "every component process to exit",
    )


def test_one_component_failing_stops_the_rest_and_names_it(tmp_path, built):
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = str(blocker.getsockname()[1])
    try:
        stack = start_stack(data_dir, RECSERVE_STACK_ENVOY_PORT=taken)
        seen: list[psutil.Process] = []

        def exited() -> bool:
            seen.extend(p for p in stack.descendants() if p not in seen)
            return stack.process.poll() is not None

        poll_until(exited, 240, 0.1, "the runner to give up")
    finally:
        blocker.close()
    assert stack.process.returncode == 1
    assert "envoy failed to start" in stack.output()
    assert "last lines of envoy" in stack.output()
    poll_until(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in seen),
        20,
        0.1,
        "every component process to exit",
    )


def test_runner_stops_cleanly_on_sigterm_before_ready(tmp_path, built):
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    stack = start_stack(data_dir)
    # The first wave (Triton, features, retriever) starts at once; the rest wait.
    poll_until(lambda: len(stack.descendants()) >= 3, 60, 0.05, "components to spawn")
    children = stack.descendants()
    code = stop_stack(stack)
    assert code in (0, 130)
    poll_until(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in children),
        20,
        0.1,
        "every component process to exit",
    )


def test_components_die_with_a_killed_runner(tmp_path, built):
    """SIGKILL gives the runner no chance to stop anything: the kernel's
    parent-death signal (setpriv --pdeathsig) must end every component."""
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    stack = start_stack(data_dir)
    try:
        wait_ready(stack)
        children = stack.descendants()
    finally:
        stack.process.kill()
        stack.process.wait()
    assert len(children) >= 6
    started = time.monotonic()

    def alive() -> list[str]:
        return [
            " ".join(p.cmdline()[:3])
            for p in children
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]

    # The services stop gracefully on SIGTERM; Triton is sent SIGKILL (its
    # SIGTERM handler can deadlock) and its python-backend stubs follow it.
    try:
        poll_until(lambda: not alive(), 90, 0.1, "every component process to exit")
    except AssertionError as late:
        raise AssertionError(f"{late}; still running: {alive()}") from None
    print(f"all components gone {time.monotonic() - started:.1f}s after the runner")


def test_wait_ready_helper_reports_early_exit(tmp_path):
    stack = start_stack(tmp_path, RECSERVE_STACK_GATEWAY_PORT="0x")
    try:
        wait_ready(stack, timeout_s=30)
    except AssertionError as failure:
        assert "stack exited early" in str(failure)
    else:
        raise AssertionError("a bad setting should stop the runner")
    finally:
        stop_stack(stack)
