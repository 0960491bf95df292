"""Feast imported after our packages skips typeguard's instrumentation of
its classes (typeguard's own behaviour under ``python -O``), and imports
torch only when its tensor conversions ask for it: 2 s and 1 s less of
every start of a process with Feast."""

import subprocess
import sys

INSTRUMENTED = "'typeguard' in {}.__code__.co_names"


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_typeguards_decorator_returns_its_target_once_recserve_feast_is_imported(tmp_path):
    # typeguard rewrites a function from its source file: the probe is one.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import typeguard\n@typeguard.typechecked\ndef f(x: int) -> int:\n    return x\n"
        f"print({INSTRUMENTED.format('f')}, f(1))\n"
    )
    assert run(f"import runpy; runpy.run_path({str(probe)!r})") == "True 1"
    after = f"import recserve_feast, runpy; runpy.run_path({str(probe)!r})"
    assert run(after) == "False 1"


def test_the_services_import_feast_uninstrumented():
    check = INSTRUMENTED.format("view.FeatureView.__init__")
    assert run(f"import services, feast.feature_view as view\nprint({check})") == "False"


PUBLIC = (
    "import types, feast.torch_wrapper as w\n"
    "print(sorted(n for n, v in vars(w).items()"
    " if not n.startswith('_') and not isinstance(v, types.ModuleType)))"
)


def test_the_services_start_without_torch_and_feast_still_gets_it_when_asked():
    code = (
        "import services.features.server, sys\n"
        "print('torch' in sys.modules)\n"
        "from feast.torch_wrapper import get_torch\n"
        "print(get_torch().__name__)"
    )
    assert run(code).split() == ["False", "torch"]


def test_the_stand_in_keeps_every_name_of_feasts_torch_wrapper():
    feasts = run(PUBLIC)
    assert "get_torch" in feasts, "Feast's own module, read without recserve_feast"
    assert run("import recserve_feast\n" + PUBLIC) == feasts
