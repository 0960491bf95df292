"""Where re-scoring runs live under ``<data_dir>/rescoring/``.

staging/<run_id>/   a run being computed or validated (resumable)
    run.json  scores/bucket=B/part-0.parquet  top_n/bucket=B/part-0.parquet
    _done/B.json  report.json  scores.png  popular.json
runs/<run_id>/      published runs (moved here from staging, immutable)
PUBLISHED.json      the live run, its Feast slot and the publish history
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from recserve_model import published


def root(data_dir: Path) -> Path:
    return data_dir / "rescoring"


def staging(data_dir: Path, run_id: str) -> Path:
    return root(data_dir) / "staging" / run_id


def published_run(data_dir: Path, run_id: str) -> Path:
    return published.run_dir(data_dir, run_id)


def pointer(data_dir: Path) -> Path:
    return published.pointer_path(data_dir)


def bucket_file(
    run_dir: Path, dataset: str, bucket: int, attempt: int = 0, temporary: bool = False
) -> Path:
    folder = run_dir / dataset / f"bucket={bucket:05d}"
    # Readers (Spark, pyarrow) skip names starting with a dot.
    return folder / (f".part-0.parquet.{attempt}.tmp" if temporary else "part-0.parquet")


def write_json(path: Path, value: Any) -> None:
    """Readers see the old file or the new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
