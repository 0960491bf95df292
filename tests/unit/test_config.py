import os
import subprocess
import sys

import pytest

from recserve_kit.config import ConfigError, load_settings
from services.ranker.config import RankerSettings


def test_valid_settings_are_read_with_the_service_prefix(monkeypatch):
    monkeypatch.setenv("RECSERVE_RANKER_PORT", "6123")
    monkeypatch.setenv("RECSERVE_RANKER_TRITON_URL", "10.0.0.5:8001")
    settings = load_settings(RankerSettings)
    assert settings.port == 6123
    assert settings.triton_url == "10.0.0.5:8001"


def test_bad_value_names_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("RECSERVE_RANKER_PORT", "99999")
    monkeypatch.setenv("RECSERVE_RANKER_LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigError) as raised:
        load_settings(RankerSettings)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "RECSERVE_RANKER_PORT=" in err and "99999" in err
    assert "RECSERVE_RANKER_LOG_LEVEL=" in err


def test_service_process_refuses_to_start_on_bad_config():
    env = {**os.environ, "RECSERVE_GATEWAY_PORT": "not-a-port"}
    result = subprocess.run(
        [sys.executable, "-m", "services.gateway"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "RECSERVE_GATEWAY_PORT='not-a-port'" in result.stderr


def test_a_redis_address_is_checked_at_start_and_a_url_is_converted():
    """Compose once passed redis://redis:6379/0, which the
    settings took and Feast crashed on at first use."""
    from pydantic import ValidationError

    from services.features.config import FeaturesSettings

    assert FeaturesSettings(redis_url="redis://redis:6379/0").redis_url == "redis:6379,db=0"
    assert FeaturesSettings(redis_url="127.0.0.1:6379").redis_url == "127.0.0.1:6379"
    for bad in ("//redis", "redis://redis", "redis"):
        with pytest.raises(ValidationError, match="redis"):
            FeaturesSettings(redis_url=bad)
