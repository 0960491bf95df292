"""The layers hold (import-linter, the contracts in pyproject.toml), and the
contracts would catch an import that runs backwards."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=ROOT, capture_output=True, text=True, env=env
    )


def test_every_layer_contract_is_kept():
    result = lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_library_importing_a_service_breaks_a_contract(tmp_path):
    # A library of the same name found first on the path, importing a service.
    fake = tmp_path / "recserve_feast"
    fake.mkdir()
    (fake / "__init__.py").write_text("import services.gateway.domain\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "libs")])}
    result = lint(env)
    assert result.returncode == 1, result.stdout
    assert "Libraries import no service, pipeline, bench or runner BROKEN" in result.stdout
