"""Offline pipeline: dataset, training, ONNX export, Triton repository, publish."""
