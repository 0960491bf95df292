"""Generates the Triton model repository from a model artifact.

Each model gets two configurations, chosen with ``--model-config-name``:
  config.pbtxt       CPU: python backend running ONNX Runtime (KIND_CPU), the
                     local default with the tritonserver from the pytriton wheel
  configs/gpu.pbtxt  GPU: onnxruntime backend (KIND_GPU) with TensorRT FP16
Both read the same version folder (model.py, model.onnx, model.onnx.data).

Batching choices (see docs/benchmarks.md for the measurements):
  ranker: one batch row is one (user, candidate) pair, so requests with any
    number of candidates merge; max_batch_size 4096 holds about 20 requests
    of 200 candidates. Queue delay 250 us, chosen by a sweep of 0.25/0.5/1/2
    ms (`python -m bench ranker --parts batching`): every window reached the
    same peak within p99 50 ms, and the short one costs least at low load.
  item_tower: one row per item, for items upserted without a vector (the
    retriever calls the ranker's EmbedItems); rare, batched by the caller.
  user_tower: one row per user (EmbedUser). Queue delay 250 us, from a sweep
    of no batching, 0.25 and 1 ms (`python -m bench ranker --parts
    batching-user`): 3.05x the throughput of no batching within p99 50 ms,
    and at every load level 250 us served more than 1 ms.

Triton versions are integers; ``versions.json`` in each model folder maps
them to artifact versions. The newest two stay on disk, and so does any
version a rollout of the ranker serves or may return to
(recserve_model.rollout_state); Triton loads every version on disk
(``all``): the ranker pins a version per request, so switching, canary
traffic and rolling back are instant and drop nothing.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.encoding import HISTORY_LEN

ROOT = Path(__file__).resolve().parents[1]
PYTHON_MODEL = ROOT / "infra" / "triton" / "onnx_model.py"
KEEP_VERSIONS = 2


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str  # folder in the artifact holding model.onnx
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    max_batch_size: int
    cpu_queue_delay_us: int
    gpu_queue_delay_us: int


# The widths an artifact's encoding sets (its users' and items' features,
# its embedding) are declared variable: the config is shared by a model's
# versions, and a retrain that meets a new category has wider features
# than the stable it rolls out against (a fixed width made every stable
# answer fail). Each version's graph checks its own; Triton's dynamic
# batcher batches only requests of one shape.
ANY_WIDTH = -1


def model_specs(affinity_rank: int = AFFINITY_RANK) -> list[ModelSpec]:
    d = ANY_WIDTH
    ranker_io = (
        (
            Tensor("item_id", "TYPE_INT64", (1,)),
            Tensor("user_vector", "TYPE_FP32", (d,)),
            Tensor("user_features", "TYPE_FP32", (ANY_WIDTH,)),
            Tensor("item_features", "TYPE_FP32", (ANY_WIDTH,)),
            Tensor("retrieval_score", "TYPE_FP32", (1,)),
            Tensor("user_affinity", "TYPE_FP32", (affinity_rank,)),
            # Graphs from before the repeat source take fewer (onnx_model.py cuts).
            Tensor("source_features", "TYPE_FP32", (ANY_WIDTH,)),
        ),
        (Tensor("score", "TYPE_FP32", (1,)),),
    )
    return [
        ModelSpec(
            "user_tower",
            "user_tower",
            (
                Tensor("user_features", "TYPE_FP32", (ANY_WIDTH,)),
                Tensor("history", "TYPE_INT64", (HISTORY_LEN,)),
            ),
            (Tensor("user_vector", "TYPE_FP32", (d,)),),
            max_batch_size=256,
            cpu_queue_delay_us=250,
            gpu_queue_delay_us=500,
        ),
        # Items the build did not see, one row each (UpsertItems without a
        # vector); called in batches by the retriever, rarely, so no sweep.
        ModelSpec(
            "item_tower",
            "item_tower",
            (
                Tensor("item_id", "TYPE_INT64", (1,)),
                Tensor("item_features", "TYPE_FP32", (ANY_WIDTH,)),
            ),
            (Tensor("item_vector", "TYPE_FP32", (d,)),),
            max_batch_size=1024,
            cpu_queue_delay_us=250,
            gpu_queue_delay_us=500,
        ),
        # 250 us: measured (docs/benchmarks.md) to reach the same peak as 2 ms
        # while costing ~1.7 ms less per request at low load.
        ModelSpec("ranker", "ranker", *ranker_io, 4096, 250, 250),
        ModelSpec("ranker_int8", "ranker_int8", *ranker_io, 4096, 250, 250),
    ]


def _tensors(kind: str, tensors: tuple[Tensor, ...]) -> str:
    body = ",\n".join(
        f'  {{ name: "{t.name}" data_type: {t.dtype} dims: [ {", ".join(map(str, t.dims))} ] }}'
        for t in tensors
    )
    return f"{kind} [\n{body}\n]\n"


def dynamic_batching(queue_delay_us: int) -> str:
    # No queue policy: one (REJECT with per-request timeouts) cost the
    # batcher a third of its throughput and put p99 at 128 clients from 22
    # to ~100 ms (docs/benchmarks.md); the ranker bounds its backlog instead.
    return f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}\n"


def cpu_config(model: ModelSpec, batching: bool = True) -> str:
    """The CPU configuration; ``batching=False`` only for benchmarks (off vs on)."""
    return (
        f'name: "{model.name}"\nbackend: "python"\nmax_batch_size: {model.max_batch_size}\n'
        + _tensors("input", model.inputs)
        + _tensors("output", model.outputs)
        + "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
        + (dynamic_batching(model.cpu_queue_delay_us) if batching else "")
        + "version_policy: { all: {} }\n"
        + 'parameters { key: "intra_op_threads" value { string_value: "2" } }\n'
    )


def gpu_config(model: ModelSpec) -> str:
    return (
        f'name: "{model.name}"\nbackend: "onnxruntime"\nmax_batch_size: {model.max_batch_size}\n'
        + _tensors("input", model.inputs)
        + _tensors("output", model.outputs)
        + "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
        + dynamic_batching(model.gpu_queue_delay_us)
        + "version_policy: { all: {} }\n"
        + "optimization { execution_accelerators { gpu_execution_accelerator: [ {\n"
        + '  name: "tensorrt"\n'
        + '  parameters { key: "precision_mode" value: "FP16" }\n'
        + '  parameters { key: "max_workspace_size_bytes" value: "1073741824" }\n'
        + "} ] } }\n"
    )


def read_versions(model_dir: Path) -> dict[int, str]:
    path = model_dir / "versions.json"
    if not path.exists():
        return {}
    return {int(k): v for k, v in json.loads(path.read_text()).items()}


def publish_model(
    repository: Path,
    model: ModelSpec,
    artifact: Path,
    version: str,
    protected: frozenset[str] = frozenset(),
) -> int:
    """Adds the artifact's model as a new Triton version (or finds it); returns it.
    Versions past the newest KEEP_VERSIONS are deleted unless ``protected``."""
    model_dir = repository / model.name
    versions = read_versions(model_dir)
    existing = [n for n, v in versions.items() if v == version]
    (model_dir / "configs").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(cpu_config(model))
    (model_dir / "configs" / "gpu.pbtxt").write_text(gpu_config(model))
    if existing and (model_dir / str(existing[0]) / "model.onnx").exists():
        # The python-backend glue is serving code, not the model: keep it current.
        glue = model_dir / str(existing[0]) / "model.py"
        if not glue.exists() or glue.read_bytes() != PYTHON_MODEL.read_bytes():
            shutil.copy2(PYTHON_MODEL, glue)
        return existing[0]
    number = max(versions, default=0) + 1
    staging = model_dir / f".{number}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name in ("model.onnx", "model.onnx.data"):
        shutil.copy2(artifact / model.source / name, staging / name)
    shutil.copy2(PYTHON_MODEL, staging / "model.py")
    staging.rename(model_dir / str(number))
    versions[number] = version
    for old in sorted(versions)[:-KEEP_VERSIONS]:
        if versions[old] in protected:
            continue
        shutil.rmtree(model_dir / str(old), ignore_errors=True)
        del versions[old]
    (model_dir / "versions.json").write_text(json.dumps(versions, indent=2, sort_keys=True))
    return number


def generate(
    repository: Path, artifact: Path, version: str, protected: frozenset[str] = frozenset()
) -> dict[str, int]:
    repository.mkdir(parents=True, exist_ok=True)
    return {
        m.name: publish_model(repository, m, artifact, version, protected)
        for m in model_specs()
        # An artifact from before the item tower's export publishes without it.
        if (artifact / m.source / "model.onnx").exists()
    }


def publish_copy(data_dir: Path, source: str, version: str) -> dict[str, int]:
    """The artifact ``source`` published again as ``version`` (a link to the
    same files): a second version to rehearse a rollout or measure shadow
    scoring with. Versions a rollout uses are kept."""
    from recserve_delivery import state as rollout_state
    from recserve_model import artifacts

    root = artifacts.artifacts_root(data_dir)
    link = root / version
    if not link.exists():
        link.symlink_to((root / source).resolve(), target_is_directory=True)
    return generate(
        data_dir / "triton" / "repository",
        link,
        version,
        frozenset(rollout_state.protected_versions(data_dir)),
    )
