"""What `rollout status` and `rollout wait` read from a rollout's status:
the guardrail's evidence so far and how long to wait for the end."""

from __future__ import annotations

import time

from recserve.ranker.v1 import ranker_pb2 as pb


def guardrail_evidence(status: pb.RolloutStatus) -> str:
    """The sequential test's evidence so far, from the judge's last look."""
    if not status.HasField("last_verdict"):
        return ""
    f = status.last_verdict.figures
    if "guardrail_worse_p" not in f:
        return ""
    return (
        f"conversion {f['candidate_conversion']:.2%} over {f['candidate_lists']:.0f} candidate "
        f"lists vs {f['stable_conversion']:.2%} over {f['stable_lists']:.0f} stable; "
        f"always-valid p of no drop {f['guardrail_worse_p']:.3g}, of a drop past the minimum "
        f"{f['guardrail_not_worse_p']:.3g}"
    )


def wait_limit_s(status: pb.RolloutStatus) -> float:
    """How long `wait` waits by default: past the guardrail's expected
    decision and every step's soak, twice over, and at least 600 s."""
    left = sum(status.soak_s for _ in status.steps_percent[status.step :])
    if status.guardrail_decision_by_unix_s:
        left += max(0.0, status.guardrail_decision_by_unix_s - time.time())
    return max(600.0, 2 * left)
