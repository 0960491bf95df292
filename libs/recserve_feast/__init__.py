"""The Feast feature repository: the schema the features service serves and
the pipelines publish into (entities, feature views, push sources, stores).

Imported before Feast (``services`` and ``pipelines`` import it first):
Feast decorates its classes with typeguard's ``@typechecked``, which parses,
rewrites and recompiles their source at every import, 2.2 of the 4.6 s
``import feast`` took here, paid by every process that starts with Feast
(the features service, the one process, each build). typeguard makes the
decorator a no-op under ``python -O``, its checks "not meant to be run in
production"; our processes keep their asserts (no ``-O``), so they take the
decorator as ``-O`` would. Feast's own checks of the feature definitions
are what it loses: ours are one fixed repository (``repo.py``), tested.

For the same reason ``feast.torch_wrapper``, which imports torch when Feast
is imported (1.0 of the 2.1 s the features service took to import), is
replaced by the same two names importing torch at its first use: only
Feast's tensor conversions (``to_torch``) use it, which recserve never
calls; training imports torch itself.
"""

import importlib
import importlib.util
import sys
import types
from typing import Any


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """typeguard's ``typechecked`` under ``python -O``: the target as it is."""
    return (lambda t: t) if target is None else target


try:
    import typeguard
except ImportError:  # a service image without Feast
    pass
else:
    typeguard.typechecked = _unchecked


def _torch_on_first_use() -> types.ModuleType:
    """``feast.torch_wrapper``'s names, torch imported when first asked for."""

    def get_torch() -> types.ModuleType:
        # Optional, as in Feast: no service image has torch.
        return importlib.import_module("torch")

    module = types.ModuleType("feast.torch_wrapper", "Feast's torch wrapper, torch on first use.")
    available = importlib.util.find_spec("torch") is not None
    vars(module).update(TORCH_AVAILABLE=available, get_torch=get_torch)
    return module


if "feast.torch_wrapper" not in sys.modules and importlib.util.find_spec("feast") is not None:
    sys.modules["feast.torch_wrapper"] = _torch_on_first_use()
