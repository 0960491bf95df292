"""The models' input contract: how users and items become tensors.

Training (pipelines/), the ranker service and batch scoring all encode
through this one module, so serving can never drift from training. The
vocabularies and constants it needs travel inside the model artifact
(``encoding.json``).
"""
