"""Starts the recommendation explorer: an example app backend that calls
recserve through the Python client and serves a page to look at answers.

    .venv/bin/python clients/explorer/serve.py [--target 127.0.0.1:8080]
        [--port 8090] [--data-dir data]

--data-dir: where the app finds users' history (the current artifact's
activity tables) and the model rollout in progress (its stable and
candidate lists are shown side by side); without it, neither.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recserve_explorer.app import create_app
from recserve_explorer.history import ArtifactHistory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default=os.environ.get("RECSERVE_TARGET", "127.0.0.1:8080"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    history = ArtifactHistory.from_data_dir(args.data_dir) if args.data_dir else None
    import uvicorn

    rollout = args.data_dir / "rollout" / "ranker.json" if args.data_dir else None
    app = create_app(args.target, history, rollout)
    print(f"recserve explorer on http://{args.host}:{args.port} (recserve at {args.target})")
    uvicorn.run(app, host=args.host, port=args.port, loop="asyncio", log_level="warning")


if __name__ == "__main__":
    main()
