"""Files that read in one sitting: no non-test Python file over 400 lines,
no function over 60 (docs/architecture.md says how to split one)."""

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def sources() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if not name.startswith(("tests/", "third_party/", "gen/")) and (ROOT / name).exists()
    ]


def test_no_file_or_function_is_too_long_to_read_in_one_sitting():
    too_long = []
    for path in sources():
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}")
    assert not too_long, too_long
