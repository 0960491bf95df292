"""The command-line tools print whole lines into a log: tables keep their
headers and a printed command stays on one line when stdout is a pipe."""

import subprocess
import sys

COMMAND = 'grpcurl -plaintext -d \'{"user_id":"42","k":10,"debug":true}\' ' + "x" * 120

SCRIPT = f"""
from rich.table import Table
from recserve_stack.rollout_cli import console
table = Table(title="wide")
for name in ("features ms", "embed ms", "retrieve ms", "rank ms", "share@p99", "degraded",
             "over budget %", "stage", "p99.9 ms", "requests"):
    table.add_column(name)
table.add_row(*["1"] * 10)
console.print(table)
console.print({COMMAND!r})
"""


def test_tables_and_commands_are_whole_in_a_log():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True
    ).stdout
    for header in ("features ms", "retrieve ms", "share@p99", "over budget %", "requests"):
        assert header in out, out
    assert COMMAND in out.splitlines(), out
