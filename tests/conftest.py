import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The tests build models beside running stacks, as a retrain cycle does, and
# as there (apps/recserve_stack/retrain.py) OpenMP's threads wait asleep:
# spinning ones doubled a build's time and CPU on 2 shared cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=parallel_rank)
        return
    # Integration and e2e tests start real processes; run them after units.
    # delivery/ starts a stack of its own: after e2e/'s has stopped.
    order = {"unit": 0, "integration": 1, "e2e": 2, "delivery": 3}
    items.sort(
        key=lambda item: next((v for k, v in order.items() if f"/{k}/" in str(item.fspath)), 4)
    )


# Under pytest-xdist (make test: -n 2 --dist loadfile), files go to whichever
# worker is free, in this order: the longest first (marked ``long``: a few
# minutes each), the many short unit tests last to fill in, so that the
# workers finish together. A package's files stay together, so each worker
# starts e2e/'s shared stack once.
PARALLEL_ORDER = ("delivery", "e2e", "clients", "integration", "kubernetes", "compose", "unit")


def parallel_rank(item: pytest.Item) -> tuple[int, int]:
    path = str(item.fspath)
    package = next((n for n, k in enumerate(PARALLEL_ORDER) if f"/{k}/" in path), 0)
    return (0 if item.get_closest_marker("long") else 1, package)


@pytest.fixture(scope="session")
def built():
    """The pipeline's output in ./data (make test builds it first; reused
    here), served: the tests' stacks serve what this code builds."""
    from filelock import FileLock

    from pipelines.build import build

    # pytest-xdist's workers each ask; one publishes at a time.
    (ROOT / "data").mkdir(exist_ok=True)
    with FileLock(ROOT / "data" / ".tests-build.lock"):
        return build(ROOT / "data", promote=True)
