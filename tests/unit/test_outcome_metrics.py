"""The live outcome counters: a list shown is counted under its model
version, arm and surface, an event of it under the same labels, an event of
no remembered list apart; surfaces past the cap share one label."""

from prometheus_client import REGISTRY

from services.gateway import outcome_metrics
from services.gateway.outcome_metrics import OutcomeMetrics


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_an_event_counts_under_the_list_it_came_from():
    metrics = OutcomeMetrics()
    labels = {"model_version": "unit-a", "arm": "candidate", "surface": "unit-home"}
    shown_before = sample("recserve_gateway_lists_shown_total", **labels)
    metrics.shown("rec-1", "unit-a", "candidate", "unit-home")
    metrics.shown("rec-2", "unit-a", "candidate", "unit-home")
    assert sample("recserve_gateway_lists_shown_total", **labels) == shown_before + 2
    clicks = {"event_type": "unit-click", **labels}
    lost = sample("recserve_gateway_unattributed_events_total", event_type="unit-click")
    metrics.events(
        [
            {"event_type": "unit-click", "recommendation_id": "rec-2"},
            {"event_type": "unit-click", "recommendation_id": "rec-unknown"},
            {"event_type": "unit-click", "recommendation_id": ""},
        ]
    )
    assert sample("recserve_gateway_list_events_total", **clicks) == 1
    assert sample("recserve_gateway_unattributed_events_total", event_type="unit-click") == lost + 2


def test_the_memory_and_the_surfaces_are_bounded():
    metrics = OutcomeMetrics(remember=2)
    for n in range(3):
        metrics.shown(f"old-{n}", "unit-b", "", "unit-feed")
    lost = sample("recserve_gateway_unattributed_events_total", event_type="unit-view")
    metrics.events([{"event_type": "unit-view", "recommendation_id": "old-0"}])  # forgotten
    assert sample("recserve_gateway_unattributed_events_total", event_type="unit-view") == lost + 1
    fallback = {"model_version": "none", "arm": "none", "surface": outcome_metrics.OTHER_SURFACE}
    before = sample("recserve_gateway_lists_shown_total", **fallback)
    for n in range(outcome_metrics.MAX_SURFACES + 5):
        metrics.shown(f"s-{n}", "", "", f"unit-surface-{n}")
    # One surface was taken already; every one past the cap is "other".
    assert sample("recserve_gateway_lists_shown_total", **fallback) == before + 6
