"""Rows of one feature view, read and written through Feast's own online
store interface (``OnlineStore.online_read`` and ``online_write_batch``):
the same rows in the same store (SQLite or Redis) that Feast's SDK reads
and writes, without its per-call registry lookups and its pandas and Arrow
conversions, which cost most of a live event's CPU (docs/benchmarks.md,
"Events a second"). Feast's own performance guidance for hot entities."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from feast import FeatureStore, FeatureView
from feast.protos.feast.types.EntityKey_pb2 import EntityKey
from feast.protos.feast.types.Value_pb2 import Value

from services.features.records import plain, proto_values


class OnlineView:
    """One feature view's rows by entity id. The view is resolved from the
    registry once, and again after ``forget`` (a newly published artifact)."""

    def __init__(self, store: FeatureStore, name: str, join_key: str) -> None:
        self.store = store
        self.name = name
        self.join_key = join_key
        self._view: FeatureView | None = None

    def forget(self) -> None:
        self._view = None

    @property
    def view(self) -> FeatureView:
        if self._view is None:
            self._view = self.store.get_feature_view(self.name)
        return self._view

    def keys(self, ids: Sequence[str]) -> list[EntityKey]:
        return [
            EntityKey(join_keys=[self.join_key], entity_values=[Value(string_val=i)]) for i in ids
        ]

    def read(self, ids: Sequence[str]) -> list[dict[str, object] | None]:
        """Each id's features as Python values; None where it has none (no
        row in SQLite, unset values in Redis)."""
        view = self.view
        names = [f.name for f in view.features]
        provider = self.store._get_provider()  # Feast's OnlineStore interface
        read = provider.online_read(self.store.config, view, self.keys(ids), names)
        out: list[dict[str, object] | None] = []
        for _, values in read:
            row = {name: plain(values.get(name)) for name in names} if values else {}
            out.append(row if any(v is not None for v in row.values()) else None)
        return out

    def write(self, rows: Mapping[str, Mapping[str, Any]], at: datetime) -> None:
        """Every id's features (Python values, each feature of the view) as
        of ``at``: newer than what the store holds, as Feast's push requires."""
        if not rows:
            return
        view = self.view
        ids = list(rows)
        columns = {
            f.name: proto_values([rows[i][f.name] for i in ids], f.dtype.to_value_type())
            for f in view.features
        }
        created: datetime | None = None
        data = [
            (key, {name: values[n] for name, values in columns.items()}, at, created)
            for n, key in enumerate(self.keys(ids))
        ]
        self.store._get_provider().online_write_batch(self.store.config, view, data, None)
