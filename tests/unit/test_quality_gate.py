"""The build's quality gate: what it publishes beats every baseline."""

from pipelines.build import quality_gate


def test_the_build_refuses_to_publish_a_model_that_loses_to_a_baseline():
    """A new model's publish compares against the baselines."""
    good = {
        "popularity": {"recall@10": 0.07, "ndcg@10": 0.08},
        "item_knn": {"recall@10": 0.12, "ndcg@10": 0.13},
        "ease": {"recall@10": 0.13, "ndcg@10": 0.14},
        "ranked": {"recall@10": 0.16, "ndcg@10": 0.17},
        "ranked_int8": {"recall@10": 0.16, "ndcg@10": 0.17},
    }
    assert quality_gate(good) == []
    worse = {**good, "ranked_int8": {"recall@10": 0.125, "ndcg@10": 0.17}}
    assert quality_gate(worse) == ["ranked_int8 recall@10 0.1250 < ease 0.1300"]
    # An artifact evaluated before the baselines existed is held to popularity.
    old = {k: v for k, v in good.items() if k not in ("item_knn", "ease")}
    assert quality_gate(old) == []


def test_a_refusal_names_the_source_the_ranker_under_used():
    from pipelines.gate import under_used

    metrics = {
        "ranked": {"ndcg@10": 0.20},
        "two_tower": {"ndcg@10": 0.04},
        "item_neighbours": {"ndcg@10": 0.21},
    }
    assert under_used(metrics).endswith("the ranker under-used item-to-item)")
    metrics["item_neighbours"] = {"ndcg@10": 0.19}
    assert under_used(metrics).endswith("the served list 0.2000)")
    assert under_used({"ranked": {"ndcg@10": 0.2}}) == ""
