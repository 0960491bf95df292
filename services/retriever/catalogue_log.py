"""The catalogue's changes, kept as they are acknowledged: every upsert and
delete the retriever applied, appended and fsynced to
``<data_dir>/events/catalogue`` before the call returns, so that the next
build's dataset (``pipelines snapshot``) has the products that arrived after
the export, their attribute changes and the soft deletes. Written after the
index took the change (a change the index refused is never recorded); a
client's retry after a crash in between records it then. One writer per
process (recserve_kit.jsonl_log): replicas never share a file."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from recserve_kit.jsonl_log import JsonlLog
from recserve_model.catalogue import changes_dir
from services.retriever.generations import Write


def change_records(write: Write, at: float) -> list[dict[str, Any]]:
    """One record per item the write changed."""
    if write.kind == "upsert":
        return [
            {
                "change_id": uuid.uuid4().hex,
                "at": at,
                "op": "upsert",
                "item_id": item.item_id,
                "title": item.title,
                "categories": list(item.categories),
                "year": item.year,
                "active": item.active,
                "attributes": item.attributes,
            }
            for item in write.items
        ]
    return [
        {"change_id": uuid.uuid4().hex, "at": at, "op": write.kind, "item_id": item_id}
        for item_id in write.ids
    ]


class CatalogueLog:
    def __init__(self, data_dir: Path) -> None:
        self.log = JsonlLog(changes_dir(data_dir), background=False)

    def record(self, write: Write) -> None:
        """On disk when it returns."""
        self.log.write(change_records(write, round(time.time(), 3)))
