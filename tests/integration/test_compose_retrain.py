"""Compose's `retrain` service, checked without a Docker engine: the local
runner's schedule (`recserve_stack retrain --every-day-at`, the same
options and the same RECSERVE_STACK_RETRAIN_* variables with their
defaults), on the data volume, calling Envoy's listener on the network with
the admin token the init service writes, in the init service's image."""

import re
from pathlib import Path

import typer
import yaml

from recserve_kit.config import env_name
from recserve_stack import auth, envoy
from recserve_stack.__main__ import app
from recserve_stack.components import retrain_component
from recserve_stack.retrain_schedule import parse_daily
from recserve_stack.settings import StackSettings
from tests.compose_stack import VARIABLE

ROOT = Path(__file__).resolve().parents[2]


def services() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]


def options(argv: list[str]) -> dict[str, str]:
    """``--name=value`` arguments (Compose's form) by name."""
    return dict(a.split("=", 1) for a in argv)


def test_the_service_runs_the_local_runners_schedule():
    retrain = services()["retrain"]
    assert retrain["entrypoint"] == ["python", "-m", "recserve_stack", "retrain"]
    given = options(retrain["command"])
    command = typer.main.get_command(app).commands["retrain"]  # type: ignore[attr-defined]
    known = {name for param in command.params for name in param.opts}
    assert set(given) <= known, set(given) - known
    runner = [a for a in retrain_component(StackSettings(retrain_at="04:30")).argv if "--" in a]
    assert set(given) == set(runner)  # the local runner's options, no more
    settings_of = {
        "--every-day-at": "retrain_at",
        "--guardrail-baseline-rate": "retrain_baseline_rate",
        "--guardrail-min-drop": "retrain_min_drop",
    }
    defaults = StackSettings()
    for option, value in given.items():
        (variable, default) = VARIABLE.fullmatch(value).groups()
        field = settings_of[option]
        assert variable == env_name(StackSettings, field), option
        if field == "retrain_at":
            parse_daily(default)  # a time the schedule takes
        else:
            assert float(default) == getattr(defaults, field), option
        StackSettings(**{field: default})  # and the setting's own check


def test_it_calls_envoy_with_the_token_init_writes_on_the_data_volume(monkeypatch, tmp_path):
    found = services()
    retrain, init = found["retrain"], found["init"]
    for key, value in retrain["environment"].items():
        assert key.startswith("RECSERVE_STACK_"), key
        monkeypatch.setenv(key, str(value))
    settings = StackSettings()  # every value is a setting and validates
    assert "data:/data" in retrain["volumes"] and str(settings.data_dir) == "/data"
    # Envoy's service and its listener inside the network (the published port maps to it).
    config = yaml.safe_load(envoy.COMPOSE_CONFIG.read_text())
    listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert settings.host == "envoy" and "networks" in found["envoy"]
    assert settings.envoy_port == listener["port_value"]
    # The plaintext listener the job calls on the network; the host publishes
    # it on its loopback alone (app backends elsewhere use the TLS one).
    assert f"127.0.0.1:8080:{settings.envoy_port}" in found["envoy"]["ports"]
    # init runs `keys /data/auth`, which writes the token there.
    (auth_dir,) = re.findall(r"recserve_stack keys (\S+)", " ".join(init["command"]))
    assert settings.admin_token_path == Path(auth_dir) / "admin.token"
    auth.ensure_keys(tmp_path / "auth")
    assert (tmp_path / "auth" / settings.admin_token_path.name).is_file()


def test_it_starts_with_the_stack_in_inits_image_and_limit():
    found = services()
    retrain, init = found["retrain"], found["init"]
    assert retrain["profiles"] == found["rescore"]["profiles"] == ["nightly"]
    assert retrain["image"] == init["image"] == found["rescore"]["image"]
    limits = retrain["deploy"]["resources"]["limits"]
    assert limits == init["deploy"]["resources"]["limits"]  # a cycle runs init's build
    assert retrain["restart"] == "unless-stopped" and retrain["read_only"] is True
    assert retrain["depends_on"] == {"envoy": {"condition": "service_healthy"}}
    assert retrain["networks"] == ["recserve"]
