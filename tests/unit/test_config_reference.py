"""docs/configuration.md is what scripts/config_reference.py makes from the
settings classes, and every setting says what it does."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
READERS = ["libs", "services", "apps", "pipelines"]
ENVIRON_READ = re.compile(r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Z][A-Z0-9_]*)["']""")


def reference() -> ModuleType:
    path = ROOT / "scripts" / "config_reference.py"
    spec = importlib.util.spec_from_file_location("config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_has_a_description() -> None:
    assert reference().missing_descriptions() == []


def test_the_configuration_page_is_current() -> None:
    script = reference()
    assert script.main(["--check"]) == 0, "run: python scripts/config_reference.py"


def test_every_variable_read_outside_the_settings_is_on_the_page() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    read = {
        name
        for folder in READERS
        for path in (ROOT / folder).rglob("*.py")
        for name in ENVIRON_READ.findall(path.read_text())
    }
    assert read, "no environment reads found: the pattern is out of date"
    assert sorted(name for name in read if f"`{name}`" not in page) == []


def test_a_stale_page_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = reference()
    page = tmp_path / "configuration.md"
    page.write_text("# Configuration reference\n")
    monkeypatch.setattr(script, "OUT", page)
    assert script.main(["--check"]) == 1
    assert script.main([]) == 0 and script.main(["--check"]) == 0
