"""Each image's requirement file is current and covers what its code imports."""

import ast
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"services", "recserve_kit", "recserve_model", "recserve", "google", "pipelines"}
LOCAL |= {"recserve_stack", "bench", "tests"}
LOCAL |= {"recserve_delivery", "recserve_feast", "recserve_cli", "recserve_data"}
SHARED = ["libs/recserve_kit", "libs/recserve_model", "gen/python/recserve"]


SEARCH_ROOTS = [ROOT, ROOT / "libs", ROOT / "apps", ROOT / "gen" / "python"]


def module_file(name: str) -> Path | None:
    """The file of a first-party module, or None for a third-party one."""
    parts = name.split(".")
    for base in SEARCH_ROOTS:
        for depth in range(len(parts), 0, -1):
            stem = base.joinpath(*parts[:depth])
            for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                if candidate.is_file():
                    return candidate
    return None


def imported_modules(folders: list[Path]) -> set[str]:
    """Third-party top-level modules imported by the code in ``folders`` and
    by every first-party module it reaches: a library the image's code
    imports needs its own imports in the image too."""
    queue = [p for f in folders for p in ([f] if f.is_file() else f.rglob("*.py"))]
    seen: set[Path] = set()
    names: set[str] = set()
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in LOCAL:
                    found = module_file(module)
                    if found is not None:
                        queue.append(found)
                else:
                    names.add(top)
    return names - set(sys.stdlib_module_names) - LOCAL


def test_requirement_files_are_current():
    check = subprocess.run(
        [sys.executable, "scripts/service_requirements.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


IMAGE_CODE = {
    "pipelines": [
        "pipelines",
        "apps/recserve_stack",
        "libs/recserve_delivery",
        "libs/recserve_feast",
        "libs/recserve_cli",
        "libs/recserve_data",
    ],
    "features": ["services/features", "libs/recserve_feast"],
    "ranker": ["services/ranker", "libs/recserve_delivery"],
}


@pytest.mark.parametrize("image", ["gateway", "features", "retriever", "ranker", "pipelines"])
def test_every_import_is_in_the_image(image):
    pinned = {
        canonicalize_name(line.split("==")[0])
        for line in (ROOT / "requirements" / "services" / f"{image}.txt").read_text().splitlines()
        if "==" in line
    }
    owners = metadata.packages_distributions()
    code = IMAGE_CODE.get(image, [f"services/{image}"])
    folders = [ROOT / f for f in [*code, *SHARED]]
    missing = {
        module: owners.get(module)
        for module in imported_modules(folders)
        if not {canonicalize_name(d) for d in owners.get(module, [])} & pinned
    }
    assert not missing, f"{image} imports modules its image lacks: {missing}"
