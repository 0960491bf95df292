from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    # Integration and e2e tests start real processes; run them after units.
    # delivery/ starts a stack of its own: after e2e/'s has stopped.
    order = {"unit": 0, "integration": 1, "e2e": 2, "delivery": 3}
    items.sort(
        key=lambda item: next((v for k, v in order.items() if f"/{k}/" in str(item.fspath)), 4)
    )


@pytest.fixture(scope="session")
def built():
    """The pipeline's output in ./data (make test builds it first; reused
    here), served: the tests' stacks serve what this code builds."""
    from pipelines.build import build

    return build(ROOT / "data", promote=True)
