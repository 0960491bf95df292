"""Reading and writing a dataset's tables, Parquet or CSV, as they are:
CSV cells stay strings (the empty string is a missing value), Parquet
columns keep their types. Typing and checking is ``columns``' work."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from recserve_data.manifest import MANIFEST, ColumnType, CsvOptions, Manifest, Table


class TableError(ValueError):
    """A table file that is missing or cannot be parsed."""


def read_table(directory: Path, table: Table, csv: CsvOptions) -> pd.DataFrame:
    path = directory / table.file
    if not path.is_file():
        raise TableError("no such file")
    if path.suffix == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except (OSError, pa.ArrowException) as error:
            raise TableError(f"not a readable Parquet file ({error})") from None
    else:
        try:
            frame = pd.read_csv(
                path,
                sep=csv.delimiter,
                dtype=str,
                keep_default_na=False,
                encoding=csv.encoding,
                skip_blank_lines=True,
            )
        except UnicodeDecodeError as error:
            raise TableError(f"not valid {csv.encoding} text ({error.reason})") from None
        except (pd.errors.ParserError, pd.errors.EmptyDataError, LookupError) as error:
            raise TableError(f"not a readable CSV file ({str(error).strip()})") from None
    return frame.reset_index(drop=True)


def _csv_cell(value: object, separator: str) -> object:
    if isinstance(value, list | tuple | np.ndarray):
        return separator.join(str(v) for v in value)
    return value


def write_table(frame: pd.DataFrame, directory: Path, table: Table, csv: CsvOptions) -> None:
    """A frame of typed columns as the manifest's table: lists become
    separated values in a CSV, missing values empty cells."""
    path = directory / table.file
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
        return
    listed = {
        name
        for name, column in table.columns.items()
        if column.type in (ColumnType.TAGS, ColumnType.VECTOR)
    } | {"categories"}
    out = frame.copy()
    for name in listed & set(out.columns):
        out[name] = out[name].map(lambda v: _csv_cell(v, csv.list_separator))
    out.to_csv(path, index=False, sep=csv.delimiter, encoding=csv.encoding)


def fingerprint(directory: Path, manifest: Manifest) -> str:
    """sha256 over the manifest and every table file: the data, byte for byte."""
    digest = hashlib.sha256()
    for name in [MANIFEST, *(t.file for t in manifest.tables().values())]:
        digest.update(name.encode() + b"\0")
        with (directory / name).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
