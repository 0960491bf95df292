"""The real Triton server loads the generated repository and returns what
ONNX Runtime returns, for one batched request and for concurrent singles."""

import asyncio

import numpy as np
import onnxruntime as ort
import pytest
import torch
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import InferInput, InferRequestedOutput

from pipelines.triton_repo import model_specs
from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.encoding import EncodingSpec
from recserve_model.sources import LEGACY_SOURCE_FEATURES, SOURCE_FEATURES
from recserve_stack.triton_process import running_triton
from tests.helpers import apoll_until

MODELS = ["user_tower", "ranker", "ranker_int8"]


@pytest.fixture(scope="module")
def triton(built, tmp_path_factory):
    repository = built.directory.parents[1] / "triton" / "repository"
    with running_triton(tmp_path_factory.mktemp("triton"), repository, MODELS) as server:
        yield server


def make_inputs(spec: EncodingSpec, model: str, n: int, seed: int):
    rng = np.random.default_rng(seed)
    if model == "user_tower":
        history = rng.integers(0, spec.num_rows, (n, 20)).astype(np.int64)
        return {
            "user_features": rng.random((n, spec.user_dim)).astype(np.float32),
            "history": history,
        }
    return {
        "item_id": rng.integers(0, spec.num_rows, (n, 1)).astype(np.int64),
        "user_vector": rng.standard_normal((n, spec.embedding_dim)).astype(np.float32) / 8,
        "user_features": rng.random((n, spec.user_dim)).astype(np.float32),
        "item_features": rng.random((n, spec.item_dim)).astype(np.float32),
        "retrieval_score": rng.random((n, 1)).astype(np.float32),
        "user_affinity": rng.standard_normal((n, AFFINITY_RANK)).astype(np.float32) / 4,
        "source_features": rng.random((n, SOURCE_FEATURES)).astype(np.float32),
    }


async def infer(client, model: str, feed: dict[str, np.ndarray], output: str) -> np.ndarray:
    inputs = []
    for name, array in feed.items():
        tensor = InferInput(name, list(array.shape), "INT64" if array.dtype == np.int64 else "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = await client.infer(model, inputs, outputs=[InferRequestedOutput(output)])
    return result.as_numpy(output)


async def ranker_scores(url: str, version: int, feed: dict[str, np.ndarray]) -> np.ndarray:
    """One version's scores for ``feed``, pinned as the ranker pins it."""
    async with triton_aio.InferenceServerClient(url) as client:
        inputs = []
        for name, array in feed.items():
            kind = "INT64" if array.dtype == np.int64 else "FP32"
            tensor = InferInput(name, list(array.shape), kind)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        result = await client.infer("ranker", inputs, model_version=str(version))
    return result.as_numpy("score")


OUTPUT = {"user_tower": "user_vector", "ranker": "score", "ranker_int8": "score"}


@pytest.mark.parametrize("model", MODELS)
async def test_batched_request_matches_onnxruntime(built, triton, model):
    spec = EncodingSpec.load(built.directory / "encoding.json")
    feed = make_inputs(spec, model, 200, seed=5)
    expected = ort.InferenceSession(str(built.directory / model / "model.onnx")).run(None, feed)[0]
    async with triton_aio.InferenceServerClient(triton.grpc_url) as client:
        got = await infer(client, model, feed, OUTPUT[model])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


async def test_concurrent_single_requests_match_and_are_batched(built, triton):
    spec = EncodingSpec.load(built.directory / "encoding.json")
    feed = make_inputs(spec, "ranker", 256, seed=9)
    expected = ort.InferenceSession(str(built.directory / "ranker" / "model.onnx")).run(None, feed)[
        0
    ]
    async with triton_aio.InferenceServerClient(triton.grpc_url) as client:

        def counts(stats):
            # One entry per loaded version (the newest two); sum them.
            return (
                sum(int(s.get("inference_count", 0)) for s in stats["model_stats"]),
                sum(int(s.get("execution_count", 0)) for s in stats["model_stats"]),
            )

        before = counts(await client.get_inference_statistics("ranker", as_json=True))
        singles = [{k: v[i : i + 1] for k, v in feed.items()} for i in range(256)]
        results = await asyncio.gather(*(infer(client, "ranker", f, "score") for f in singles))

        async def settled():
            # Triton updates its statistics just after sending the responses.
            now = counts(await client.get_inference_statistics("ranker", as_json=True))
            return now if now[0] - before[0] >= 256 else None

        after = await apoll_until(settled, 10)
    np.testing.assert_allclose(np.concatenate(results), expected, rtol=1e-5, atol=1e-6)
    inferences = after[0] - before[0]
    executions = after[1] - before[1]
    assert inferences == 256
    assert executions < inferences, (inferences, executions)


def test_repository_has_cpu_and_gpu_configs(built):
    repository = built.directory.parents[1] / "triton" / "repository"
    for model in model_specs():
        cpu = (repository / model.name / "config.pbtxt").read_text()
        gpu = (repository / model.name / "configs" / "gpu.pbtxt").read_text()
        assert 'backend: "python"' in cpu and "KIND_CPU" in cpu
        assert 'backend: "onnxruntime"' in gpu and "KIND_GPU" in gpu and "FP16" in gpu
        assert "max_queue_delay_microseconds" in cpu and "max_queue_delay_microseconds" in gpu


def test_every_generated_config_parses_as_a_triton_model_config(built, tmp_path):
    """Triton's own ModelConfig schema, for the served configs (CPU and GPU)
    and the benchmark's batching-off and per-window variants."""
    from google.protobuf import text_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from bench.ranker_bench import batching_repository

    served = built.directory.parents[1] / "triton" / "repository"
    for model in MODELS:
        for path in (served / model / "config.pbtxt", served / model / "configs" / "gpu.pbtxt"):
            config = text_format.Parse(path.read_text(), ModelConfig())
            assert config.name == model and config.HasField("dynamic_batching")
    names = batching_repository(built.directory, tmp_path, built.version, "user_tower", (250,))
    for name in names:
        config = text_format.Parse((tmp_path / name / "config.pbtxt").read_text(), ModelConfig())
        assert config.name == name
        assert config.HasField("dynamic_batching") == (name != "user_tower_nobatch")


class RankerBeforeAffinity(torch.nn.Module):
    """A ranker graph as exported before the affinity feature: no ``user_affinity`` input."""

    def __init__(self, ranker) -> None:
        super().__init__()
        self.ranker = ranker

    def forward(self, item_id, user_vector, user_features, item_features, retrieval_score):
        none = user_vector.new_zeros(user_vector.shape[0], AFFINITY_RANK)
        sources = user_vector.new_zeros(user_vector.shape[0], SOURCE_FEATURES)
        return self.ranker(
            item_id, user_vector, user_features, item_features, retrieval_score, none, sources
        )


def test_a_ranker_version_from_before_the_affinity_still_serves(built, tmp_path):
    """The model's config is shared by its versions: one whose graph takes no
    input answers the same request (user_affinity ignored), so a rollback
    across the contract change works."""
    from pipelines.export import RANKER_INPUTS, RANKER_OUTPUTS, _export, example_ranker_inputs
    from pipelines.models import Ranker

    spec = EncodingSpec.load(built.directory / "encoding.json")
    ranker = Ranker(spec.num_rows, spec.user_dim, spec.item_dim, spec.embedding_dim)
    ranker.load_state_dict(torch.load(built.directory / "torch_state.pt")["ranker"])
    legacy = tmp_path / "legacy"
    _export(
        RankerBeforeAffinity(ranker.eval()),
        example_ranker_inputs(spec)[:5],
        RANKER_INPUTS[:5],
        RANKER_OUTPUTS,
        legacy / "ranker" / "model.onnx",
    )
    feed = make_inputs(spec, "ranker", 50, seed=2)
    without_history = {
        k: v for k, v in feed.items() if k not in ("user_affinity", "source_features")
    }
    expected_old = ort.InferenceSession(str(legacy / "ranker" / "model.onnx")).run(
        None, without_history
    )[0]
    both_versions_serve(tmp_path, legacy, built, feed, expected_old)


def both_versions_serve(tmp_path, legacy, built, feed, expected_old) -> None:
    """The legacy ranker graph and the built one, two versions of one model
    in Triton, each answer ``feed`` as its own graph does."""
    from pipelines.triton_repo import publish_model

    repository = tmp_path / "repository"
    model = next(m for m in model_specs() if m.name == "ranker")
    old = publish_model(repository, model, legacy, "legacy")
    new = publish_model(repository, model, built.directory, built.version)
    expected_new = ort.InferenceSession(str(built.directory / "ranker" / "model.onnx")).run(
        None, feed
    )[0]
    with running_triton(tmp_path / "run", repository, ["ranker"]) as server:
        for version, expected in ((old, expected_old), (new, expected_new)):
            got = asyncio.run(ranker_scores(server.grpc_url, version, feed))
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_a_retrained_version_with_wider_features_serves_beside_the_stable(built, tmp_path):
    """A retrain that met a new occupation and a new genre has wider user
    and item features than the stable it rolls out against; both versions
    of the one model answer, each with its own widths (the config's widths
    are variable: a fixed one made every stable answer fail)."""
    import dataclasses

    from pipelines.export import RANKER_INPUTS, RANKER_OUTPUTS, _export, example_ranker_inputs
    from pipelines.models import Ranker
    from pipelines.triton_repo import publish_model

    spec = EncodingSpec.load(built.directory / "encoding.json")
    wider = dataclasses.replace(
        spec, occupations=[*spec.occupations, "new"], genres=[*spec.genres, "New"]
    )
    assert (wider.user_dim, wider.item_dim) == (spec.user_dim + 1, spec.item_dim + 1)
    torch.manual_seed(0)
    ranker = Ranker(wider.num_rows, wider.user_dim, wider.item_dim, wider.embedding_dim)
    retrained = tmp_path / "retrained"
    _export(
        ranker.eval(),
        example_ranker_inputs(wider),
        RANKER_INPUTS,
        RANKER_OUTPUTS,
        retrained / "ranker" / "model.onnx",
    )
    repository = tmp_path / "repository"
    model = next(m for m in model_specs() if m.name == "ranker")
    stable = publish_model(repository, model, built.directory, built.version)
    candidate = publish_model(repository, model, retrained, "retrained")
    feeds = {
        stable: (make_inputs(spec, "ranker", 30, seed=4), built.directory),
        candidate: (make_inputs(wider, "ranker", 30, seed=5), retrained),
    }

    with running_triton(tmp_path / "run", repository, ["ranker"]) as server:
        for version, (feed, artifact) in feeds.items():
            graph = ort.InferenceSession(str(artifact / "ranker" / "model.onnx"))
            expected = graph.run(None, feed)[0]
            got = asyncio.run(ranker_scores(server.grpc_url, version, feed))
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


async def test_triton_keeps_an_idle_pinging_client_connected(triton):
    """Triton runs with the stack's keepalive terms (TRITON_KEEPALIVE_FLAGS):
    the ranker's channel, pinging while idle, is not cut with GOAWAY
    too_many_pings after a quiet spell, and the next call needs no reconnect."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    from recserve_kit.transport import CLIENT_KEEPALIVE

    pings = [*dict(CLIENT_KEEPALIVE, **{"grpc.keepalive_time_ms": 500}).items()]
    channel = grpc.aio.insecure_channel(triton.grpc_url, options=pings)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        await stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=5)
        states = []
        # 6 s: twice the spell after which gRPC's default server cuts such a
        # client (tests/unit/test_keepalive.py)
        for _ in range(24):
            await asyncio.sleep(0.25)  # idling is the point: pings, no calls
            states.append(channel.get_state().name)
        assert set(states) == {"READY"}, states
    finally:
        await channel.close()


class RankerBeforeRepeat(torch.nn.Module):
    """A ranker graph as exported before the repeat source: four source features."""

    def __init__(self, ranker) -> None:
        super().__init__()
        self.ranker = ranker

    def forward(  # the names of the exported graph's inputs
        self,
        item_id,
        user_vector,
        user_features,
        item_features,
        retrieval_score,
        user_affinity,
        source_features,
    ):
        four = source_features
        padded = torch.cat([four, four.new_zeros(four.shape[0], SOURCE_FEATURES - 4)], dim=1)
        return self.ranker(
            item_id,
            user_vector,
            user_features,
            item_features,
            retrieval_score,
            user_affinity,
            padded,
        )


def test_a_ranker_version_from_before_the_repeat_source_takes_its_four_columns(built, tmp_path):
    """Every ranker is sent six source features now; a version whose graph
    declares four (built before the repeat source) is fed its four by
    Triton's model (infra/triton/onnx_model.py), so a rollback across the
    change serves."""
    from pipelines.export import RANKER_INPUTS, RANKER_OUTPUTS, _export, example_ranker_inputs
    from pipelines.models import Ranker

    spec = EncodingSpec.load(built.directory / "encoding.json")
    ranker = Ranker(spec.num_rows, spec.user_dim, spec.item_dim, spec.embedding_dim)
    ranker.load_state_dict(torch.load(built.directory / "torch_state.pt")["ranker"])
    example = list(example_ranker_inputs(spec))
    example[-1] = example[-1][:, :LEGACY_SOURCE_FEATURES]
    legacy = tmp_path / "legacy"
    _export(
        RankerBeforeRepeat(ranker.eval()),
        tuple(example),
        RANKER_INPUTS,
        RANKER_OUTPUTS,
        legacy / "ranker" / "model.onnx",
    )
    old_graph = ort.InferenceSession(str(legacy / "ranker" / "model.onnx"))
    declared = {i.name: i.shape for i in old_graph.get_inputs()}
    assert declared["source_features"][-1] == LEGACY_SOURCE_FEATURES
    feed = make_inputs(spec, "ranker", 50, seed=3)
    assert feed["source_features"].shape[1] == SOURCE_FEATURES
    four = {**feed, "source_features": feed["source_features"][:, :LEGACY_SOURCE_FEATURES]}
    both_versions_serve(tmp_path, legacy, built, feed, old_graph.run(None, four)[0])
