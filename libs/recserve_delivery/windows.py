"""What the rollout judge looks at: each version's figures since its step
began (``VersionWindow``), and the rollout's metrics (``RolloutMetrics``)."""

from __future__ import annotations

from typing import Any, ClassVar

from hdrh.histogram import HdrHistogram
from prometheus_client import Counter, Gauge, Histogram

from recserve_delivery.state import Figures


class RolloutMetrics:
    """One rollout's metrics, named ``<prefix>_rollout_*`` and
    ``<prefix>_version_*``: ``recserve_ranker`` for the model rollout,
    ``recserve_canary`` for the service canary. One instance per prefix and
    process (Prometheus refuses a name registered twice)."""

    _made: ClassVar[dict[str, RolloutMetrics]] = {}

    def __init__(self, prefix: str) -> None:
        self.share = Gauge(f"{prefix}_rollout_share_percent", "Users on the candidate version.")
        self.decisions = Counter(
            f"{prefix}_rollout_decisions_total", "The rollout judge's decisions.", ["action"]
        )
        self.candidate = Gauge(
            f"{prefix}_rollout_candidate",
            "The candidate's figures at the judge's last look (this step).",
            ["figure"],
        )
        self.status = Gauge(f"{prefix}_rollout_status", "1 for the rollout's status.", ["status"])
        self.version_seconds = Histogram(
            f"{prefix}_version_seconds",
            "Inference (or upstream) time by version during a rollout (recorded also when "
            "the caller gave up).",
            ["version"],
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5),
        )
        self.version_errors = Counter(
            f"{prefix}_version_errors_total",
            "Failed calls by version during a rollout: errors, non-finite scores.",
            ["version", "kind"],
        )

    @classmethod
    def named(cls, prefix: str) -> RolloutMetrics:
        if prefix not in cls._made:
            cls._made[prefix] = cls(prefix)
        return cls._made[prefix]


class VersionWindow:
    """One version's figures since the current step began."""

    def __init__(self) -> None:
        self.latency_us = HdrHistogram(1, 60_000_000, 3)
        self.requests = 0
        self.errors = 0

    def completed(self, seconds: float) -> None:
        self.requests += 1
        self.latency_us.record_value(max(1, min(int(seconds * 1e6), 60_000_000)))

    def failed(self, counted: bool = False) -> None:
        """``counted``: the call was already counted as completed (bad output)."""
        self.requests += 0 if counted else 1
        self.errors += 1

    def to_record(self) -> dict[str, Any]:
        """For the rollout's writer (recserve_delivery.replicas): JSON-safe."""
        encoded = self.latency_us.encode() if self.latency_us.get_total_count() else b""
        return {"requests": self.requests, "errors": self.errors, "latency": encoded.decode()}

    def add_record(self, record: dict[str, Any]) -> None:
        """Another replica's window for the same version and step, added."""
        self.requests += int(record.get("requests", 0))
        self.errors += int(record.get("errors", 0))
        if record.get("latency"):
            self.latency_us.decode_and_add(record["latency"].encode())

    def plus(self, records: list[dict[str, Any]]) -> VersionWindow:
        """This window with the others' added (a new window; this one unchanged)."""
        total = VersionWindow()
        total.add_record(self.to_record())
        for record in records:
            total.add_record(record)
        return total

    def percentile_ms(self, p: float) -> float:
        if not self.latency_us.get_total_count():
            return 0.0
        return float(self.latency_us.get_value_at_percentile(p)) / 1000.0

    def figures(self) -> Figures:
        return Figures(
            self.requests,
            self.errors,
            self.percentile_ms(50),
            self.percentile_ms(99),
            self.latency_us.get_total_count(),
        )
