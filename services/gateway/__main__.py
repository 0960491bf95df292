"""`python -m services.gateway`: wiring only."""

from __future__ import annotations

from recserve_kit.config import load_settings
from recserve_kit.server import Service, init_process, run
from recserve_kit.telemetry import Telemetry
from services.gateway.config import GatewaySettings
from services.gateway.server import create_server


async def main() -> tuple[Service, Telemetry]:
    settings = load_settings(GatewaySettings)
    telemetry = init_process("gateway", settings)
    return await create_server(settings), telemetry


if __name__ == "__main__":
    run(main)
