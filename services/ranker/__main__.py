"""`python -m services.ranker`: wiring only."""

from __future__ import annotations

from recserve_kit.config import load_settings
from recserve_kit.server import Service, init_process, run
from recserve_kit.telemetry import Telemetry
from services.ranker.config import RankerSettings
from services.ranker.server import create_server


async def main() -> tuple[Service, Telemetry]:
    settings = load_settings(RankerSettings)
    telemetry = init_process("ranker", settings)
    return await create_server(settings), telemetry


if __name__ == "__main__":
    run(main)
