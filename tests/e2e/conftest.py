import pytest

from tests.helpers import data_dir_with_artifacts
from tests.stack import running_stack


@pytest.fixture(scope="package")
def stack(built, tmp_path_factory):
    """The whole stack, started by the same runner as `make run`."""
    data_dir = data_dir_with_artifacts(
        tmp_path_factory.mktemp("e2e") / "data", built.directory.parents[1]
    )
    with running_stack(data_dir) as running:
        yield running
