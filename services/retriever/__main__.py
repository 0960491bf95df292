"""`python -m services.retriever`: wiring only. `... index` loads the
collection ahead of the service (services/retriever/index_command.py)."""

from __future__ import annotations

import sys

from recserve_kit.config import load_settings
from recserve_kit.server import Service, init_process, run
from recserve_kit.telemetry import Telemetry
from services.retriever.config import RetrieverSettings
from services.retriever.server import create_server


async def main() -> tuple[Service, Telemetry]:
    settings = load_settings(RetrieverSettings)
    telemetry = init_process("retriever", settings)
    return await create_server(settings), telemetry


if __name__ == "__main__":
    if sys.argv[1:2] == ["index"]:
        from services.retriever.index_command import main as index

        index(sys.argv[2:])
    else:
        run(main)
