"""`bench candidates` splits a candidate search's CPU between Qdrant Edge's
two queries and the rest, on the served artifact's own users, and leaves
the artifact as it was."""

import json

from bench.commands.components.candidates import candidates


def listing(directory):
    return sorted(
        (str(p.relative_to(directory)), p.stat().st_mtime_ns) for p in directory.rglob("*")
    )


def test_each_part_is_counted_and_the_artifact_is_left_alone(built, tmp_path):
    # The version's own folder: make test's other worker may name it CURRENT again meanwhile.
    before = listing(built.directory)
    out = tmp_path / "candidates.json"
    candidates(built.directory.parents[1], users=100, k=200, rounds=2, out=out)
    record = json.loads(out.read_text())
    assert record["artifact"] == built.version and record["users"] == 100
    assert record["mean_history"] > 0  # the users' seen items, sent as their history
    ms = record["cpu_ms_per_call"]
    assert set(ms) == {"total", "hnsw_query", "exact_query", "rest"}
    assert all(len(rounds) == 2 for rounds in ms.values())
    for n in range(2):
        parts = [ms[part][n] for part in ("hnsw_query", "exact_query", "rest")]
        assert all(value > 0 for value in parts), ms
        assert abs(sum(parts) - ms["total"][n]) < 1e-9
    assert listing(built.directory) == before
