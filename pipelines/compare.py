"""A new build beside the served one: the served artifact's list scored
on the new build's own held-out split (after a retrain the new events move
every baseline and the split itself, so two builds' own tables do not
compare; this does)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from pipelines import dataset, evaluate
from pipelines.steps import Steps
from recserve_model import artifacts

CURRENT_MODEL = "current_model"  # the metrics' entry of the served artifact's list


def current_on_this_split(
    data_dir: Path, version: str, data: dataset.MovieLens, split: dataset.Split, console: Console
) -> tuple[str, dict[str, dict[str, float]]]:
    """The served artifact's version and its list scored on this build's
    held-out split (``CURRENT_MODEL``), beside the new one's: after a
    retrain every baseline moves with the new events, so only the same
    split says whether the new model is better. ("", {}) where nothing
    else is served, or it cannot be scored."""
    try:
        directory = artifacts.current(data_dir)
    except artifacts.ArtifactError:  # nothing served yet (or not whole): nothing to compare
        return "", {}
    current = directory.name
    if current == version:
        return "", {}
    try:
        with Steps(console)(f"the current model ({current}) on this split"):
            figures = evaluate.evaluate_artifact_on(directory, data, split, with_baselines=False)
    except (OSError, KeyError, ValueError) as failed:  # a comparison never stops a build
        console.print(f"[yellow]the current model {current} could not be scored: {failed}[/]")
        return "", {}
    ranked = figures["ranked"]
    console.print(
        f"on this split, ndcg@10: the current model {current} {ranked['ndcg@10']:.4f}",
        highlight=False,
    )
    return current, {CURRENT_MODEL: ranked}
