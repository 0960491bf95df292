"""A rollout as the API shows it (RolloutStatus): used by the ranker's
servicer and by the gateway canary's CLI, which must not need the ranker's
Triton client (it runs in the init/batch image)."""

from __future__ import annotations

from recserve.ranker.v1 import ranker_pb2 as pb
from recserve_delivery.rollout import Rollout
from recserve_delivery.state import Decision


def decision(d: Decision) -> pb.RolloutDecision:
    return pb.RolloutDecision(
        at_unix_s=d.at,
        action=d.action,
        reason=d.reason,
        share_percent=d.share_percent,
        figures=d.figures,
    )


def status_message(rollout: Rollout) -> pb.RolloutStatus:
    """A rollout's state and the judge's latest look, as the API shows them."""
    s = rollout.state
    reply = pb.RolloutStatus(
        status=s.status,
        stable_version=s.stable,
        candidate_version=s.candidate,
        share_percent=s.share_percent,
        step=s.step,
        steps_percent=s.steps_percent,
        soak_s=s.soak_s,
        step_elapsed_s=rollout.clock() - s.step_started_at if s.active else 0.0,
        min_requests=s.min_requests,
        shadow_percent=s.shadow_percent,
        reason=s.reason,
        history=[decision(d) for d in s.history],
        experiment_until_unix_s=s.experiment_until,
        guardrail_decision_by_unix_s=s.guardrail_decision_by,
        ended_at_unix_s=s.ended_at,
        more_candidate_versions=s.more_candidates,
    )
    if rollout.last is not None and s.active:
        last = rollout.last
        reply.last_verdict.CopyFrom(
            pb.RolloutDecision(
                at_unix_s=rollout.clock(),
                action=last.action,
                reason=last.reason,
                share_percent=s.share_percent,
                figures=last.figures,
            )
        )
    return reply
