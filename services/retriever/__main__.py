"""`python -m services.retriever`: wiring only."""

from __future__ import annotations

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
    run(main)
