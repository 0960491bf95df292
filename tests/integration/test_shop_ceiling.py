"""`bench shop-ceiling` on a small generated shop: the list that knows how
the generator made the data, scored on the build's own split beside the
gate's baselines, is above every one of them (what the ceiling stands for),
as is the list from the tastes the generator drew (the oracle), and the
command's JSON says which baseline is the best."""

import json

from typer.testing import CliRunner

from bench.__main__ import app
from pipelines.shop import ShopSize, write_shop


def test_the_generators_own_list_is_above_every_baseline(tmp_path):
    dataset = write_shop(tmp_path / "shop", ShopSize(items=600, users=300, events=40_000))
    out = tmp_path / "ceiling.json"
    result = CliRunner().invoke(
        app, ["shop-ceiling", "--dataset", str(dataset), "--ease-lambda", "100", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert {"popularity", "item_knn", "ease", "generator", "generator_every_event"} <= set(report)
    assert report["best_baseline"] in {"popularity", "item_knn", "ease"}
    best = report[report["best_baseline"]]["ndcg@10"]
    assert best == max(report[n]["ndcg@10"] for n in ("popularity", "item_knn", "ease"))
    assert report["generator"]["ndcg@10"] > best
    # The tastes the generator drew, not fit ones: above every baseline too.
    assert report["oracle"]["ndcg@10"] > best
    assert "generator" in result.output and "oracle" in result.output
