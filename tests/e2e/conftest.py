import subprocess
import sys

import pytest

from tests.helpers import data_dir_with_artifacts
from tests.stack import running_stack

RESCORE_RUN = "e2e-night"


@pytest.fixture(scope="package")
def stack(built, tmp_path_factory):
    """The whole stack, started by the same runner as `make run`, with a
    nightly re-scoring run published first (users' precomputed lists)."""
    data_dir = data_dir_with_artifacts(
        tmp_path_factory.mktemp("e2e") / "data", built.directory.parents[1]
    )
    (data_dir / "raw").symlink_to(built.directory.parents[1] / "raw", target_is_directory=True)
    rescore = [sys.executable, "-m", "pipelines", "rescore", "run", "--master", "local[2]"]
    rescore += ["--data-dir", str(data_dir), "--run-id", RESCORE_RUN]
    subprocess.run(rescore, check=True, capture_output=True)
    with running_stack(data_dir) as running:
        yield running
