"""One validation policy for ids at the edge of every service.

User and item ids are printable ASCII (letters, digits, ``-_.:@/``), 1 to
128 characters. Anything else is INVALID_ARGUMENT naming the field, never a
lookup: Unicode digits such as "²" or "٤٢" pass ``str.isdigit`` and would
crash ``int()`` or alias a real id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from recserve_kit.errors import InvalidArgument

MAX_ID_LEN = 128
ID_PATTERN = re.compile(r"[A-Za-z0-9._:@/-]{1,128}")
ALLOWED = "letters, digits and -_.:@/"


def check_id(value: str, field: str) -> str:
    if not value:
        raise InvalidArgument(field, "is empty")
    if len(value) > MAX_ID_LEN:
        raise InvalidArgument(field, f"longer than {MAX_ID_LEN} characters")
    if ID_PATTERN.fullmatch(value) is None:
        raise InvalidArgument(field, f"may hold only ASCII {ALLOWED}")
    return value


# Many ids at once, each followed by a newline (which no id may hold): one
# match for all of them instead of one call for each.
ID_LIST_PATTERN = re.compile(r"(?:[A-Za-z0-9._:@/-]{1,128}\n)*")


def check_ids(values: Sequence[str], field: str, indexed: bool = True) -> None:
    """Every one of ``values`` a valid id; the error names the first that
    is not (``field[n]``, or ``field`` alone where not ``indexed``)."""
    if not values:
        return
    joined = "\n".join(values) + "\n"
    # (The count: a value holding a newline would pass as two ids.)
    if joined.count("\n") == len(values) and ID_LIST_PATTERN.fullmatch(joined):
        return
    for n, value in enumerate(values):
        check_id(value, f"{field}[{n}]" if indexed else field)


def is_decimal(value: str) -> bool:
    """ASCII decimal digits only (``str.isdigit`` also accepts "²" and "٤")."""
    return value.isascii() and value.isdigit()
