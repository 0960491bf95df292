"""A stack of the clients' own (the e2e package's is stopped by now), and
what the client tests ask of it: a client to its Envoy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:
    import recserve_client  # noqa: F401
except ImportError as error:  # the wheel, not the source tree, is what is tested
    raise ImportError("recserve_client is not installed: `make clients` installs it") from error

from tests.helpers import data_dir_for_versions, poll_until
from tests.stack import RunningStack, running_stack

ENVOY = "bin/envoy"  # in Envoy's command line: its pid, to kill it


@pytest.fixture(scope="package")
def stack(built, tmp_path_factory) -> Iterator[RunningStack]:
    # Its own Triton repository: the explorer's rollout test publishes a version.
    data_dir = data_dir_for_versions(
        tmp_path_factory.mktemp("clients") / "data", built.directory.parents[1]
    )
    # Each service its own process (the e2e suite runs the one-process
    # default on small hosts): the clients' tests freeze one backend at a time.
    with running_stack(data_dir, RECSERVE_STACK_ONE_PROCESS="false") as running:
        yield running


@pytest.fixture
def client(stack):
    from recserve_client import RecserveClient

    with RecserveClient(stack.envoy_address) as made:
        yield made


def full_answer(client, user_id: str = "42", **fields):
    """A Recommend through the client, asked again until it is not degraded
    (the stack may be starting or recovering)."""

    def attempt():
        answer = client.recommend(user_id, **fields)
        return None if answer.degraded else answer

    return poll_until(attempt, 60, 0.2, "a full (not degraded) answer")
