"""`python -m services.features`: wiring only."""

from __future__ import annotations

from recserve_kit.config import load_settings
from recserve_kit.server import Service, init_process, run
from recserve_kit.telemetry import Telemetry
from services.features.config import FeaturesSettings
from services.features.server import create_server


async def main() -> tuple[Service, Telemetry]:
    settings = load_settings(FeaturesSettings)
    telemetry = init_process("features", settings)
    return await create_server(settings), telemetry


if __name__ == "__main__":
    run(main)
