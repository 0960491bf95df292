"""Segments of new users (no history, known attributes), shared by the build
that writes their lists (pipelines/onboarding_model.py) and the gateway that serves
them: ``<artifact>/cold_start.json``."""

from __future__ import annotations

import numpy as np

# The age bands MovieLens-1M uses; a segment is served at its middle age.
AGE_BANDS = (0, 18, 25, 35, 45, 50, 56, 120)
GENDERS = ("F", "M")
FILE = "cold_start.json"


def band(age: float) -> int:
    """The index of the age band holding ``age``."""
    index = int(np.searchsorted(AGE_BANDS, age, side="right")) - 1
    return max(0, min(len(AGE_BANDS) - 2, index))


def band_age(index: int) -> float:
    return (AGE_BANDS[index] + AGE_BANDS[index + 1]) / 2


def key(gender: str, age: float, occupation: str) -> str:
    return f"{gender}|{band(age)}|{occupation}"
