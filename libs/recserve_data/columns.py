"""One column at a time: from what the file holds to a typed column, each
value that does not fit reported by row, column and value.

Ids follow the one id policy the services enforce at their edge
(``recserve_kit.validation.check_id``): a dataset cannot hold an id that a
request could not name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from recserve_data.manifest import Column, ColumnType
from recserve_data.report import Report, Status
from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id

TRUE = {"true", "1", "yes"}
FALSE = {"false", "0", "no"}
DIGITS = re.compile(r"^-?\d{1,15}$")  # longer is no time in seconds (and would overflow)
OFFSET = re.compile(r"(?:Z|[+-]\d\d(?::?\d\d)?)$")
DAY = 86_400


@dataclass
class Cells:
    """Where a column's problems go: its report, file and name."""

    report: Report
    file: str
    column: str

    def fail(
        self, mask: np.ndarray, values: pd.Series, problem: str, check: str = "values"
    ) -> None:
        """One finding for the rows in ``mask``, showing their ``values``."""
        self.report.flag(check, Status.FAIL, (self.file, self.column), problem, mask, values)


def _missing_one(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, str):
        return not value.strip()
    return value is pd.NA or value is pd.NaT


def _all_strings(series: pd.Series) -> bool:
    return series.dtype == object and pd.api.types.infer_dtype(series, skipna=True) in (
        "string",
        "empty",
    )


def missing(series: pd.Series) -> np.ndarray:
    if _all_strings(series):
        # Blank or not, decided once per distinct value (ids repeat a lot).
        codes, uniques = pd.factorize(series)
        blank = np.array([not u.strip() for u in uniques] + [True], bool)
        return blank[codes]
    if series.dtype == object:
        return np.fromiter((_missing_one(v) for v in series), bool, len(series))
    return series.isna().to_numpy()


def strings(series: pd.Series) -> np.ndarray:
    """Where a value is a string."""
    if _all_strings(series):
        return series.notna().to_numpy(dtype=bool)
    return np.fromiter((isinstance(v, str) for v in series), bool, len(series))


def require(series: pd.Series, cells: Cells, nullable: bool) -> np.ndarray:
    """The missing values, reported unless the column may leave them out."""
    absent = missing(series)
    if not nullable:
        cells.fail(absent, series, "is empty; this column must have a value")
    return absent


def to_ids(series: pd.Series, cells: Cells) -> pd.Series:
    """Strings within the id policy (None where a value is not)."""
    absent = require(series, cells, nullable=False)
    if pd.api.types.is_integer_dtype(series.dtype):  # Parquet integers: their decimal strings
        return pd.Series(
            [None if gone else str(v) for v, gone in zip(series, absent, strict=True)],
            index=series.index,
            dtype=object,
        )
    text = strings(series)
    cells.fail(~text & ~absent, series, "is not a string; ids are strings")
    ids = series.where(text & ~absent, None).astype(object)
    bad: dict[str, str] = {}
    for value in pd.unique(ids.dropna()):
        try:
            check_id(value, cells.column)
        except InvalidArgument as refused:
            bad[value] = refused.message.removeprefix(f"{cells.column}: ")
    for reason in sorted(set(bad.values())):
        offending = [v for v, r in bad.items() if r == reason]
        cells.fail(ids.isin(offending).to_numpy(), ids, f"outside the id policy: {reason}", "ids")
    return ids.where(~ids.isin(list(bad)), None)


def to_strings(series: pd.Series, cells: Cells, nullable: bool, kind: str) -> pd.Series:
    absent = require(series, cells, nullable)
    text = strings(series)
    cells.fail(~text & ~absent, series, f"is not a string ({kind})")
    return series.where(text & ~absent, None).astype(object)


def to_categorical(series: pd.Series, cells: Cells, spec: Column) -> pd.Series:
    values = to_strings(series, cells, spec.nullable, "categorical")
    if spec.values is not None:
        unknown = values.notna() & ~values.isin(spec.values)
        cells.fail(unknown.to_numpy(), values, f"is not one of the declared values {spec.values}")
    return values


def _as_list(value: Any, separator: str) -> list[Any] | None:
    """A cell's values: a CSV string split, a Parquet list as is, a null
    none; None for anything else."""
    if isinstance(value, str):
        return value.split(separator) if value else []
    if isinstance(value, list | tuple | np.ndarray):
        return list(value)
    return [] if _missing_one(value) else None


def to_tags(series: pd.Series, cells: Cells, spec: Column | None, separator: str) -> pd.Series:
    """Lists of strings (in a CSV, separated values; empty is no tags)."""
    lists = [_as_list(v, separator) for v in series]
    wrong = np.array([v is None for v in lists], bool)
    cells.fail(wrong, series, "is not a list of strings")
    empty = np.array(
        [v is not None and any(not isinstance(t, str) or not t.strip() for t in v) for v in lists]
    )
    cells.fail(empty, series, "holds an empty or non-string value")
    allowed = set(spec.values) if spec is not None and spec.values is not None else None
    if allowed is not None:
        outside = np.array([v is not None and not set(v) <= allowed for v in lists], bool)
        cells.fail(outside, series, f"holds a value not among the declared {sorted(allowed)}")
    typed = [[str(t) for t in v] if v is not None else [] for v in lists]
    return pd.Series(typed, index=series.index, dtype=object)


def to_numeric(series: pd.Series, cells: Cells, spec: Column) -> pd.Series:
    absent = require(series, cells, spec.nullable)
    numbers = pd.to_numeric(series.where(~absent, None), errors="coerce").astype(float)
    bad = numbers.isna().to_numpy() & ~absent
    cells.fail(bad, series, "is not a number")
    finite = np.isfinite(numbers.to_numpy())
    cells.fail(~finite & ~bad & ~absent, series, "is not a finite number")
    ok = finite & ~absent
    if spec.integer:
        cells.fail(ok & (numbers.to_numpy() % 1 != 0), series, "is not a whole number")
    if spec.min is not None:
        cells.fail(ok & (numbers.to_numpy() < spec.min), series, f"is below the minimum {spec.min}")
    if spec.max is not None:
        cells.fail(ok & (numbers.to_numpy() > spec.max), series, f"is above the maximum {spec.max}")
    kept = numbers.where(ok)
    return kept.round().astype("Int64") if spec.integer else kept


def to_boolean(series: pd.Series, cells: Cells, nullable: bool) -> pd.Series:
    absent = require(series, cells, nullable)
    if pd.api.types.is_bool_dtype(series.dtype):
        return series.astype("boolean")

    def parse(value: Any) -> bool | None:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        text = str(value).strip().lower()
        return True if text in TRUE else False if text in FALSE else None

    parsed = pd.Series([parse(v) for v in series], index=series.index, dtype="boolean")
    cells.fail(parsed.isna().to_numpy() & ~absent, series, "is not a boolean (true or false)")
    return parsed


def _vector(value: Any, separator: str, dim: int) -> tuple[np.ndarray | None, str]:
    items = _as_list(value, separator)
    try:
        vector = None if items is None else np.asarray(items, dtype=np.float32)
    except (TypeError, ValueError):
        vector = None
    if vector is None or vector.ndim != 1 or not np.isfinite(vector).all():
        return None, "holds a value that is not a finite number"
    if vector.shape != (dim,):
        return None, f"does not hold {dim} values"
    return vector, ""


def to_vector(series: pd.Series, cells: Cells, spec: Column, separator: str) -> pd.Series:
    absent = require(series, cells, spec.nullable)
    out: list[np.ndarray | None] = []
    problems: list[str] = []
    for n, value in enumerate(series):
        vector, problem = (None, "") if absent[n] else _vector(value, separator, spec.dim or 0)
        out.append(vector)
        problems.append(problem)
    found = np.array(problems, dtype=object)
    for problem in sorted(set(problems) - {""}):
        cells.fail(found == problem, series, problem)
    return pd.Series(out, index=series.index, dtype=object)


def _epoch_seconds(datetimes: pd.Series) -> np.ndarray:
    utc = datetimes.dt.tz_convert("UTC")
    seconds = (utc - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)
    return seconds.astype(float).to_numpy()


def _seconds_from_strings(series: pd.Series, absent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds, and where a string is neither whole seconds nor ISO 8601
    with an offset (NaN in the seconds)."""
    text = series.where(~absent, "").astype(str).str.strip()
    digits = text.str.fullmatch(DIGITS).to_numpy()
    seconds = np.full(len(series), np.nan)
    seconds[digits] = text[digits].astype(np.int64).to_numpy()
    other = ~digits & ~absent
    if other.any():
        zoned = text[other].str.contains(OFFSET).to_numpy()
        parsed = pd.to_datetime(text[other], format="ISO8601", utc=True, errors="coerce")
        values = _epoch_seconds(parsed)
        values[parsed.isna().to_numpy() | ~zoned] = np.nan
        seconds[other] = values
    return seconds, other & np.isnan(seconds)


def to_timestamp(
    series: pd.Series, cells: Cells, nullable: bool, now: float, check: str = "timestamps"
) -> pd.Series:
    """Whole seconds since 1970 (UTC): integers, ISO 8601 strings with an
    offset, or Parquet timestamps with a time zone (fractions are dropped)."""
    absent = require(series, cells, nullable)
    unparsed = np.zeros(len(series), bool)
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        seconds = _epoch_seconds(series)
        seconds[absent] = np.nan
    elif pd.api.types.is_datetime64_dtype(series.dtype):
        cells.fail(~absent, series, "has no time zone; say which (UTC is +00:00)", check)
        seconds = np.full(len(series), np.nan)
    elif pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series):
        seconds = series.astype(float).to_numpy()
        fraction = ~absent & (seconds % 1 != 0)
        cells.fail(fraction, series, "is not whole seconds", check)
        seconds[fraction] = np.nan
    else:
        seconds, unparsed = _seconds_from_strings(series, absent)
        cells.fail(unparsed, series, "is neither whole seconds nor ISO 8601 with an offset", check)
    valid = ~np.isnan(seconds)
    cells.fail(valid & (seconds < 0), series, "is before 1970", check)
    future = valid & (seconds > now + DAY)
    hint = " (milliseconds instead of seconds?)" if future.any() else ""
    cells.fail(future, series, f"is in the future{hint}", check)
    kept = np.where(valid & (seconds >= 0) & (seconds <= now + DAY), seconds, np.nan)
    return pd.Series(kept, index=series.index).astype("Int64")


def coerce(series: pd.Series, cells: Cells, spec: Column, separator: str, now: float) -> pd.Series:
    """A declared column, typed."""
    kind = spec.type
    if kind is ColumnType.CATEGORICAL:
        return to_categorical(series, cells, spec)
    if kind is ColumnType.TAGS:
        require(series, cells, spec.nullable)
        return to_tags(series, cells, spec, separator)
    if kind is ColumnType.NUMERIC:
        return to_numeric(series, cells, spec)
    if kind is ColumnType.BOOLEAN:
        return to_boolean(series, cells, spec.nullable)
    if kind is ColumnType.TEXT:
        return to_strings(series, cells, spec.nullable, "text")
    if kind is ColumnType.VECTOR:
        return to_vector(series, cells, spec, separator)
    return to_timestamp(series, cells, spec.nullable, now, check="values")
