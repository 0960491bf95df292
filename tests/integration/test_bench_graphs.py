"""`bench graphs` times one exported model of two artifacts side by side
and records each round; an artifact beside itself costs the same."""

import json

from bench.commands.components.graphs import graphs


def test_an_artifact_beside_itself_times_alike_and_every_round_is_recorded(built, tmp_path):
    out = tmp_path / "graphs.json"
    for model, rows in (("user_tower", 1), ("ranker", 50)):
        graphs(built.directory, built.directory, model=model, rows=rows, calls=100, rounds=2,
               out=out)  # fmt: skip
        record = json.loads(out.read_text())
        assert record["model"] == model and record["rows"] == rows
        rounds = record["cpu_us_per_call"]
        assert len(rounds["before"]) == len(rounds["after"]) == 2
        assert all(us > 0 for side in rounds.values() for us in side)
        assert 0.2 < record["median_after_over_before"] < 5  # the same graph, a noisy host
