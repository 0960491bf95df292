"""The dataset contract: a directory with a manifest (``dataset.yaml``) and
tables for items, interactions and, optionally, users (Parquet or CSV).

``validate`` checks a directory completely and reports every problem by
file, row, column and value; ``load`` returns its tables typed, and only
when nothing fails. docs/data.md describes the contract.
"""

from recserve_data.checks import Needs
from recserve_data.manifest import (
    MANIFEST,
    REQUIRED,
    Column,
    ColumnType,
    CsvOptions,
    EventType,
    Interactions,
    Manifest,
    ManifestError,
    Role,
    Table,
    read_manifest,
    write_manifest,
)
from recserve_data.report import CHECKS, Finding, InvalidDataset, Report, Status
from recserve_data.tables import write_table
from recserve_data.validate import Dataset, inspect, load, validate

__all__ = [
    "CHECKS",
    "MANIFEST",
    "REQUIRED",
    "Column",
    "ColumnType",
    "CsvOptions",
    "Dataset",
    "EventType",
    "Finding",
    "Interactions",
    "InvalidDataset",
    "Manifest",
    "ManifestError",
    "Needs",
    "Report",
    "Role",
    "Status",
    "Table",
    "inspect",
    "load",
    "read_manifest",
    "validate",
    "write_manifest",
    "write_table",
]
