"""What one exported graph takes of a feed: a model's versions differ in
their inputs (rankers from before a feature was added take fewer inputs,
and fewer source-feature columns), and each is fed what it declares. The
python backend in Triton does the same (infra/triton/onnx_model.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


def graph_feed(inputs: Iterable[Any], feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feed``'s entries that ``inputs`` (an ONNX Runtime session's
    ``get_inputs()``: name and shape each) declare, each cut to its declared
    last dimension where that is fixed."""
    out = {}
    for spec in inputs:
        if spec.name not in feed:
            continue
        value = feed[spec.name]
        width = spec.shape[-1] if len(spec.shape) > 1 else None
        out[spec.name] = value[..., :width] if isinstance(width, int) else value
    return out
