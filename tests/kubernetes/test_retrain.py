"""The retrain CronJob, held to the command it runs and to the stack it
calls: one cycle of `recserve_stack retrain` a run, with options the
command has, on the data volume, calling Envoy's public listener with the
admin token the init Job writes, in the init Job's image; and Envoy passes
the admin calls a cycle makes to the ranker and the retriever, with a token."""

from __future__ import annotations

import importlib.util
import inspect
import re
import shutil

import pytest
import typer
import yaml

from recserve_stack import auth, envoy, rollout_cli
from recserve_stack import retrain as retrain_module
from recserve_stack.__main__ import app
from recserve_stack.settings import StackSettings
from tests.kubernetes.manifests import (
    K8S,
    OVERLAYS,
    container,
    env,
    objects,
    of_kind,
    pod,
    reach,
    render_dir,
)


@pytest.fixture(scope="module", params=OVERLAYS)
def docs(request):
    return objects(request.param)


def written_secrets() -> dict[str, dict[str, str]]:
    """The init Job's Secrets script's table: Secret -> {key: file it holds}."""
    spec = importlib.util.spec_from_file_location("init_secrets", K8S / "base/init/secrets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.secrets()


def retrain_options() -> set[str]:
    command = typer.main.get_command(app).commands["retrain"]  # type: ignore[attr-defined]
    return {name for param in command.params for name in param.opts}


def daily(cron: dict) -> tuple[int, int]:
    minute, hour, *rest = cron["spec"]["schedule"].split()
    assert rest == ["*", "*", "*"], cron["spec"]["schedule"]
    return int(hour), int(minute)


def test_the_cronjob_runs_one_cycle_with_the_commands_options(docs):
    crons = of_kind(docs, "CronJob")
    cron = crons["retrain"]
    spec = cron["spec"]
    assert spec["concurrencyPolicy"] == "Forbid" and spec["timeZone"] == "Etc/UTC"
    assert daily(crons["rescore"]) < daily(cron)  # after the night's re-scoring
    # Ends before the next day's run is due, so Forbid never skips one.
    assert 3600 <= spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] < 86400
    retrain = container(docs, "retrain")
    assert retrain["command"] == ["python", "-m", "recserve_stack", "retrain"]
    options = retrain_options()
    given = {a.split("=", 1)[0] for a in retrain["args"]}
    assert given <= options, given - options
    # One cycle: the cluster schedules it, not the process.
    assert "--every-day-at" in options and "--every-day-at" not in given
    assert {"--guardrail-baseline-rate", "--guardrail-min-drop"} <= given


def test_it_works_on_the_data_volume_with_the_admin_token(docs, monkeypatch, tmp_path):
    retrain = container(docs, "retrain")
    variables = env(retrain)
    for key, value in variables.items():
        assert key.startswith("RECSERVE_STACK_"), key
        monkeypatch.setenv(key, value)
    settings = StackSettings()  # every value is a setting and validates
    mounts = {m["mountPath"]: m for m in retrain["volumeMounts"]}
    volumes = {v["name"]: v for v in pod(docs, "retrain").spec["volumes"]}
    data = mounts[str(settings.data_dir)]
    assert not data.get("readOnly") and "subPath" not in data  # snapshots, builds, reports
    assert volumes[data["name"]]["persistentVolumeClaim"]["claimName"] == "recserve-data"
    token = settings.admin_token_path
    secret = volumes[mounts[str(token.parent)]["name"]]["secret"]
    assert secret["items"] == [{"key": token.name, "path": token.name}]
    # The Secret and key the init Job writes from what `recserve_stack keys` makes.
    held = written_secrets()[secret["secretName"]][token.name]
    auth.ensure_keys(tmp_path / "auth")
    assert held == "auth/admin.token" and (tmp_path / held).is_file()
    # Envoy's public listener, through its Service.
    assert reach(docs, settings.host, settings.envoy_port) == ("envoy", 8080)
    config = yaml.safe_load(envoy.COMPOSE_CONFIG.read_text())
    listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listener["port_value"] == 8080


def test_it_runs_the_init_jobs_image_and_build_size_in_every_overlay(tmp_path):
    for overlay in OVERLAYS:
        docs = objects(overlay)
        build = container(docs, "recserve-init", "build")
        retrain = container(docs, "retrain")
        assert retrain["image"] == build["image"] == container(docs, "rescore")["image"]
        assert retrain["resources"] == build["resources"], overlay
    # An overlay that points the pipelines image at a registry moves it too.
    tree = tmp_path / "kubernetes"
    shutil.copytree(K8S, tree)
    kustomization = tree / "overlays" / "production" / "kustomization.yaml"
    pushed = "registry.example.com/recserve/pipelines"
    images = f"images:\n  - name: recserve/pipelines\n    newName: {pushed}\n"
    kustomization.write_text(kustomization.read_text() + images)
    docs = [d for d in yaml.safe_load_all(render_dir(tree / "overlays" / "production")) if d]
    image = container(docs, "retrain")["image"]
    assert image.startswith(pushed + ":") and image == container(docs, "rescore")["image"]


def matches(match: dict, path: str) -> bool:
    if "path" in match:
        return match["path"] == path
    if "prefix" in match:
        return path.startswith(match["prefix"])
    return re.fullmatch(match["safe_regex"]["regex"], path) is not None


def route_cluster(config: dict, path: str) -> str:
    """The cluster of the first route a call to ``path`` without odd headers takes."""
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    (host,) = manager["typed_config"]["route_config"]["virtual_hosts"]
    for route in host["routes"]:
        if "headers" not in route["match"] and matches(route["match"], path):
            return str(route["route"]["cluster"])
    return ""


def required_provider(config: dict, path: str) -> str:
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    (jwt,) = [f for f in manager["typed_config"]["http_filters"] if f["name"].endswith("jwt_authn")]
    for rule in jwt["typed_config"]["rules"]:
        if matches(rule["match"], path):
            return str(rule.get("requires", {}).get("provider_name", ""))
    return ""


def test_envoy_passes_a_cycles_admin_calls_with_the_admin_token():
    source = inspect.getsource(retrain_module) + inspect.getsource(rollout_cli.until_ended)
    ranker_calls = set(re.findall(r'\bcall\("(\w+)"', source))
    assert {"StartRollout", "GetRollout"} <= ranker_calls
    calls = {f"/recserve.ranker.v1.RankerService/{m}": "ranker" for m in ranker_calls}
    (prepare,) = re.findall(r"stub\.(\w+)\(", inspect.getsource(rollout_cli.prepare_items))
    calls[f"/recserve.retriever.v1.RetrieverService/{prepare}"] = "retriever"
    config = yaml.safe_load(envoy.COMPOSE_CONFIG.read_text())  # Compose's and the cluster's
    for path, cluster in calls.items():
        assert route_cluster(config, path) == cluster, path
        assert required_provider(config, path) == "recserve_admin", path
    assert route_cluster(config, "/recserve.ranker.v1.RankerService/Score") == ""  # internal
