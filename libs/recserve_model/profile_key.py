"""A user's profile key: a digest of everything the user tower reads of a
user (age, gender, occupation, interaction count, mean rating, recent
items, declared attributes). A vector computed for one profile (the
build's for every user, the features service's after an event) is served
only while the user's profile still has the key it was computed for, so a
stale vector is never used: it simply stops matching.

The same digest from the build's feature tables and from the online
store's values: numbers in the forms both hold (the mean rating as a
float32, as Feast stores it)."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence

from recserve_model.encoding import HISTORY_LEN


def profile_key(
    age: int,
    gender: str,
    occupation: str,
    rating_count: int,
    mean_rating: float,
    recent_item_ids: Sequence[str],
    attributes: Mapping[str, str],
) -> str:
    digest = hashlib.blake2b(digest_size=12)
    digest.update(struct.pack("<qqf", int(age), int(rating_count), float(mean_rating)))
    text = [gender, occupation, *list(recent_item_ids)[:HISTORY_LEN]]
    digest.update("\x1f".join(text).encode())
    digest.update(b"\x1e" + json.dumps(dict(sorted(attributes.items()))).encode())
    return digest.hexdigest()
