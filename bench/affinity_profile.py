"""What the ranker's user-affinity feature costs per Score, piece by piece.

End-to-end CPU rounds (`bench cpu`) cannot resolve less than about 0.3 ms
per Recommend on this host; this measures the pieces in one process, CPU
time (median of 5 runs of ``calls`` each), for one Score of ``n`` rows:

- the served graph (``user_affinity``: the user's side, 32 floats on every
  row, the item side gathered in the graph) against the same ranker
  exported to take the affinity already computed, one float a row;
- ONNX Runtime on one thread, as Triton's stub runs it;
- the Triton request built and serialized as the ranker does
  (tritonclient), and parsed back (what the server side does with it);
- the ranker's own share: the user's side from 20 recent items, and what
  the one-float variant would add (the item-side gather and dot product).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import Tensor, nn
from tritonclient.grpc import service_pb2

from bench.ranker_bench import inputs_for, ranker_feed
from pipelines import export
from pipelines.models import Ranker
from recserve_model.affinity import UserAffinity
from recserve_model.encoding import HISTORY_LEN, EncodingSpec


class _AffinityGiven(nn.Module):
    """The same ranker, taking the affinity score itself ([B, 1])."""

    def __init__(self, ranker: Ranker) -> None:
        super().__init__()
        self.ranker = ranker

    def forward(
        self,
        item_id: Tensor,
        user_vector: Tensor,
        user_features: Tensor,
        item_features: Tensor,
        retrieval_score: Tensor,
        affinity: Tensor,
        source_features: Tensor,
    ) -> Tensor:
        r = self.ranker
        rows = r.table[item_id.squeeze(-1)]
        x = r.features(
            rows,
            user_vector,
            user_features,
            item_features,
            retrieval_score,
            affinity,
            source_features,
        )
        return r.head(x, retrieval_score, affinity, source_features)


def _cpu_us(calls: int, **pieces: Callable[[], object]) -> dict[str, float]:
    """Median CPU microseconds per call of each piece; the pieces take turns
    (5 rounds), so a slower stretch of the shared host hits them alike."""
    runs: dict[str, list[float]] = {name: [] for name in pieces}
    for _ in range(5):
        for name, call in pieces.items():
            start = time.process_time()
            for _ in range(calls):
                call()
            runs[name].append((time.process_time() - start) / calls * 1e6)
    return {name: round(sorted(times)[2], 1) for name, times in runs.items()}


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _request(feed: dict[str, np.ndarray]) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="ranker")
    for tensor in inputs_for(feed):
        request.inputs.append(tensor._get_tensor())
        request.raw_input_contents.append(tensor._get_content())
    return request.SerializeToString()


def profile(artifact: Path, work_dir: Path, n: int = 200, calls: int = 2000) -> dict[str, object]:
    spec = EncodingSpec.load(artifact / "encoding.json")
    ranker = Ranker(spec.num_rows, spec.user_dim, spec.item_dim, spec.embedding_dim)
    ranker.load_state_dict(torch.load(artifact / "torch_state.pt")["ranker"])
    ranker.eval()
    affinity = UserAffinity.load(artifact)
    assert affinity is not None, "an artifact from before the affinity"
    work_dir.mkdir(parents=True, exist_ok=True)
    example = (
        *export.example_ranker_inputs(spec)[:5],
        torch.zeros(3, 1),
        export.example_ranker_inputs(spec)[6],
    )
    graphs = {
        "served": export.export_ranker(ranker, spec, work_dir / "served.onnx"),
        "affinity_given": export._export(
            _AffinityGiven(ranker).eval(),
            example,
            (*export.RANKER_INPUTS[:5], "affinity", "source_features"),
            export.RANKER_OUTPUTS,
            work_dir / "affinity_given.onnx",
        ),
    }
    served = ranker_feed(spec, n, spec.num_rows)
    history = np.random.default_rng(1).integers(1, spec.num_rows, (1, HISTORY_LEN))
    user_side = affinity.vectors(history)
    served["user_affinity"] = np.repeat(user_side, n, axis=0)
    item_side = ranker.affinity.item_side.numpy()

    def affinity_scores() -> np.ndarray:
        return (item_side[served["item_id"][:, 0]] @ user_side[0])[:, None]

    given = {k: v for k, v in served.items() if k != "user_affinity"}
    given["affinity"] = affinity_scores()
    feeds = {"served": served, "affinity_given": given}
    sessions = {name: _session(graph) for name, graph in graphs.items()}
    scores = {name: sessions[name].run(["score"], feed)[0] for name, feed in feeds.items()}
    blobs = {name: _request(feed) for name, feed in feeds.items()}
    out: dict[str, object] = {
        "rows": n,
        "request_bytes": {name: len(blob) for name, blob in blobs.items()},
        "max_score_difference": float(np.abs(scores["served"] - scores["affinity_given"]).max()),
    }
    pieces: dict[str, Callable[[], object]] = {}
    for name, feed in feeds.items():
        session, blob = sessions[name], blobs[name]
        pieces[f"{name}_onnxruntime"] = lambda s=session, f=feed: s.run(["score"], f)
        pieces[f"{name}_request_build"] = lambda f=feed: _request(f)
        pieces[f"{name}_request_parse"] = lambda b=blob: service_pb2.ModelInferRequest.FromString(b)
    pieces["ranker_user_side"] = lambda: affinity.vectors(history)
    pieces["ranker_item_side"] = affinity_scores
    out["cpu_us"] = _cpu_us(calls, **pieces)
    return out
