"""`bench ranker --parts affinity` compares like with like: the variant that
takes the affinity as one float a row scores exactly as the served graph."""

from bench.affinity_profile import profile


def test_the_affinity_profile_compares_equivalent_graphs(built, tmp_path):
    rows = 20
    result = profile(built.directory, tmp_path, n=rows, calls=3)
    assert result["max_score_difference"] < 1e-4
    sizes = result["request_bytes"]
    # 32 floats a row in the served request, 1 in the variant's (and the
    # input's longer name).
    extra = sizes["served"] - sizes["affinity_given"]
    assert rows * 31 * 4 <= extra < rows * 31 * 4 + 16
    assert all(us > 0 for us in result["cpu_us"].values())
