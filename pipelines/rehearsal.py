"""Model versions made to be rolled out: the current artifact published
again under a label (a second version to rehearse a rollout with), or the
same with a ranking model made deliberately slow or broken, so that a
rollback can be rehearsed on the running stack (the judge must roll it back
and no client may see it)."""

from __future__ import annotations

from pathlib import Path

from pipelines.triton_repo import PYTHON_MODEL, publish_copy
from recserve_model import artifacts

# Appended to the served python model of a rehearsal version.
SLOW = """
import time as _time
_execute = TritonPythonModel.execute
def _slow(self, requests):
    _time.sleep({delay_s})  # a rehearsal: slow on every execution
    return _execute(self, requests)
TritonPythonModel.execute = _slow
"""
# A model whose every score is an expression ({new}) of the real one.
SCORES = """
_execute = TritonPythonModel.execute
def _{name}(self, requests):
    out = []
    for response in _execute(self, requests):
        score = pb_utils.get_output_tensor_by_name(response, "score").as_numpy()
        tensor = pb_utils.Tensor("score", {new})
        out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
    return out
TritonPythonModel.execute = _{name}
"""
NAN = SCORES.format(name="nan", new="np.full_like(score, np.nan)")
# Healthy but bad for users: the ranking reversed, the worst candidates first
# (a rehearsal of the outcome guardrail: latency and errors stay normal).
REVERSED = SCORES.format(name="reversed", new="-score")
KINDS = ("copy", "slow", "nan", "reversed")


class VersionError(ValueError):
    """A version that cannot be made as asked, with the reason."""


def check_label(label: str) -> None:
    if not label or not label.replace("-", "").replace("_", "").isalnum() or len(label) > 32:
        raise VersionError(f"label {label!r}: 1 to 32 letters, digits, '-' or '_'")


def make_version(
    data_dir: Path, label: str, kind: str = "copy", source: str = "", delay_ms: float = 200.0
) -> str:
    """Publishes ``<source>-<label>`` into the Triton repository and returns
    its name; ``source`` defaults to the current artifact. ``kind`` slow,
    nan or reversed patches its ranking model (a rehearsal of a bad version:
    slow, broken, or healthy but worse for users)."""
    check_label(label)
    if kind not in KINDS:
        raise VersionError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    if not 0 < delay_ms <= 10_000:
        raise VersionError(f"delay {delay_ms} ms: between 0 and 10,000")
    root = artifacts.artifacts_root(data_dir)
    source = source or artifacts.current(data_dir).name
    if not (root / source).is_dir():
        raise VersionError(f"no artifact {source!r} under {root}")
    version = f"{source}-{label}"
    if (root / version).exists():
        raise VersionError(f"version {version!r} exists already; choose another label")
    numbers = publish_copy(data_dir, source, version)
    if kind != "copy":
        patch = {"slow": SLOW.format(delay_s=delay_ms / 1000), "nan": NAN, "reversed": REVERSED}[
            kind
        ]
        ranker = data_dir / "triton" / "repository" / "ranker" / str(numbers["ranker"])
        (ranker / "model.py").write_text(PYTHON_MODEL.read_text() + patch)
    return version
