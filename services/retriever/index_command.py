"""`python -m services.retriever index`: load the current artifact's items
into the collection (a new generation) ahead of the service, as the service
does when it starts; a collection already current is left alone (a running
retriever holds its Edge shard's WAL lock, so opening it again must not be
tried)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from recserve_model import artifacts
from services.retriever.config import RetrieverSettings
from services.retriever.domain import Retriever
from services.retriever.server import generations_for


def load_index(data_dir: Path, qdrant_url: str = "") -> str:
    """What was done, in a line: loaded, or already current."""
    settings = RetrieverSettings(data_dir=data_dir, qdrant_url=qdrant_url)
    backend = qdrant_url or "Qdrant Edge"
    version = artifacts.current(settings.data_dir).name
    generations = generations_for(settings)
    if generations.state().get("artifact_version") == version:
        return f"{backend} collection {settings.collection}: already current ({version})"
    retriever = Retriever(settings, generations)
    retriever.open_current()
    try:
        asyncio.run(retriever.refresh_from_artifacts())
    finally:
        retriever.close()
    return f"{backend} collection {settings.collection}: loaded ({version})"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.retriever index", description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="the artifacts")
    parser.add_argument(
        "--qdrant-url", default="", help="a Qdrant server; empty: the Edge shard under data-dir"
    )
    args = parser.parse_args(argv)
    print(load_index(args.data_dir, args.qdrant_url), file=sys.stderr)
