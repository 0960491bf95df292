"""One validation policy for ids at the edge of every service.

User and item ids are printable ASCII (letters, digits, ``-_.:@/``), 1 to
128 characters. Anything else is INVALID_ARGUMENT naming the field, never a
lookup: Unicode digits such as "²" or "٤٢" pass ``str.isdigit`` and would
crash ``int()`` or alias a real id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

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


def check_ids(values: Iterable[str], field: str) -> None:
    for n, value in enumerate(values):
        check_id(value, f"{field}[{n}]")


def is_decimal(value: str) -> bool:
    """ASCII decimal digits only (``str.isdigit`` also accepts "²" and "٤")."""
    return value.isascii() and value.isdigit()
