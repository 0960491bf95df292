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
"""

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
