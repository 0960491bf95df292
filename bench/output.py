"""What every bench command shares: the console, the machine line, the JSON record."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from recserve_cli import console as cli_console

console = cli_console()


def machine() -> str:
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return f"{platform.machine()}, {cpus} cores, Python {platform.python_version()}"


def write(out: Path | None, payload: dict[str, object]) -> None:
    payload = {
        "machine": machine(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv),
        **payload,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2))
    console.print_json(json.dumps(payload))
