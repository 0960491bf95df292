"""The stack's services; each runs as ``python -m services.<name>``.

Set here, before anything imports grpc (its core reads the variable once,
at import): gRPC's own polling for client and listener sockets instead of
the EventEngine ones that grpcio 1.85 turns on by default, unless the
operator set GRPC_EXPERIMENTS. Side by side on the local stack that was 12%
less CPU per Recommend, every Python process lower (docs/benchmarks.md,
"gRPC's EventEngine off for client and listener sockets").
"""

import os

os.environ.setdefault("GRPC_EXPERIMENTS", "-event_engine_client,-event_engine_listener")

import recserve_feast  # noqa: F401  (before Feast: see its docstring)
