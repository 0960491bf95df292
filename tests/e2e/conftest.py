import os
import subprocess
import sys

import grpc
import pytest

from recserve.recommend.v1 import recommend_pb2_grpc
from tests.helpers import data_dir_with_artifacts
from tests.stack import running_stack

RESCORE_RUN = "e2e-night"
# make compose-test: the same suite against the Compose stack on :8080.
COMPOSE = os.environ.get("RECSERVE_E2E_STACK") == "compose"
# RECSERVE_E2E_ONE_PROCESS=true: the same suite against the request path in
# one process (the local runner's default on a small host). Tests that hang
# one backend alone are skipped there: a hosted module shares the gateway's
# process, and cannot hang without it.
ONE_PROCESS = os.environ.get("RECSERVE_E2E_ONE_PROCESS") == "true"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if COMPOSE and "local_stack_only" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="starts a local stack of its own"))
        if ONE_PROCESS and "backends_apart" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="hangs one backend alone"))


@pytest.fixture(scope="package")
def compose_data(tmp_path_factory):
    """The Compose stack's data volume, copied after the nightly run."""
    from tests.compose_stack import copy_data, nightly_run

    nightly_run(RESCORE_RUN)
    return copy_data(tmp_path_factory.mktemp("compose") / "data")


if COMPOSE:

    @pytest.fixture(scope="package")
    def built(compose_data):
        """The artifact the Compose stack built and serves (not ./data's)."""
        from pipelines.build import BuildResult
        from recserve_model import artifacts

        directory = artifacts.current(compose_data)
        return BuildResult(directory.name, directory, True, {}, {})


@pytest.fixture(scope="package")
def stack(built, tmp_path_factory, request):
    """The whole stack, started by the same runner as `make run`, with a
    nightly re-scoring run published first (users' precomputed lists); or
    with RECSERVE_E2E_STACK=compose the running Compose stack, after the same
    nightly run in its container."""
    if COMPOSE:
        from tests.compose_stack import ComposeStack

        yield ComposeStack(request.getfixturevalue("compose_data"))
        return
    data_dir = data_dir_with_artifacts(
        tmp_path_factory.mktemp("e2e") / "data", built.directory.parents[1]
    )
    (data_dir / "raw").symlink_to(built.directory.parents[1] / "raw", target_is_directory=True)
    command = [sys.executable, "-m", "pipelines", "rescore", "run", "--master", "local[2]"]
    command += ["--data-dir", str(data_dir), "--run-id", RESCORE_RUN]
    # The nightly run publishes beside the starting stack, as it does beside
    # a serving one: the features service takes the live run when its
    # pointer moves. Spark's start is most of the run's 20 s.
    rescore = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Each backend its own process, as Compose runs them, on any host (the
        # suite hangs one backend at a time), or all in one with ONE_PROCESS.
        with running_stack(
            data_dir, RECSERVE_STACK_ONE_PROCESS=str(ONE_PROCESS).lower()
        ) as running:
            output, _ = rescore.communicate(timeout=600)
            assert rescore.returncode == 0, output
            yield running
    finally:
        if rescore.poll() is None:
            rescore.kill()
            rescore.wait()


@pytest.fixture(scope="module")
def channel(stack):
    """A channel to Envoy, the stack's public door."""
    channel = grpc.insecure_channel(stack.envoy_address)
    yield channel
    channel.close()


@pytest.fixture(scope="module")
def stub(channel):
    """The public RecommendService, through Envoy."""
    return recommend_pb2_grpc.RecommendServiceStub(channel)
