"""Offline pipeline: dataset, training, ONNX export, Triton repository, publish."""

import recserve_feast  # noqa: F401  (before Feast: see its docstring)
