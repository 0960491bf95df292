"""The nightly retrain's schedule: when the next cycle is due, that each
cycle runs as its own process at its time and the schedule outlives one
that fails, and how the local runner starts it."""

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from recserve_stack.components import stack_components
from recserve_stack.retrain_schedule import every_day_at, next_run, parse_daily
from recserve_stack.settings import StackSettings


def test_the_next_run_is_the_first_such_time_strictly_after_now():
    now = datetime(2026, 12, 3, 4, 30, 0, tzinfo=UTC)
    assert next_run(now, "04:31") == now + timedelta(minutes=1)
    assert next_run(now, "04:30") == now + timedelta(days=1)  # just ran: tomorrow
    assert next_run(now, "03:00:15") == datetime(2026, 12, 4, 3, 0, 15, tzinfo=UTC)
    assert next_run(datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), "00:00") == datetime(
        2027, 1, 1, tzinfo=UTC
    )
    for bad in ("4:30", "24:00", "04:60", "04:30:61", "noon", ""):
        with pytest.raises(ValueError, match="HH:MM"):
            parse_daily(bad)


class Clock:
    """A clock that a sleep moves on, so waiting costs no time."""

    def __init__(self, start: datetime) -> None:
        self.at = start
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.at += timedelta(seconds=seconds)


def test_each_cycle_runs_at_its_time_as_a_process_and_a_failed_one_stops_nothing(tmp_path):
    ran = tmp_path / "ran"
    # The cycle: a real process that appends the clock-free mark, then fails.
    cycle = [sys.executable, "-c", f"open({str(ran)!r}, 'a').write('x'); raise SystemExit(3)"]
    clock = Clock(datetime(2026, 12, 3, 4, 29, 0, tzinfo=UTC))
    every_day_at("04:30", cycle, cycles=2, now=clock.now, sleep=clock.sleep)
    assert ran.read_text() == "xx"  # both ran though the first exited 3
    # The first waited a minute (in sleeps of at most 30 s), the second a day.
    assert sum(clock.slept) == pytest.approx(60 + 86_400)
    assert max(clock.slept) <= 30
    assert clock.at == datetime(2026, 12, 4, 4, 30, tzinfo=UTC)


def test_the_local_runner_starts_the_schedule_only_when_a_time_is_set(tmp_path: Path):
    plain = StackSettings(data_dir=tmp_path, gateway_extra_ports=[], gateway_standby_port=0)
    assert "retrain" not in {c.name for c in stack_components(plain)}
    settings = StackSettings(
        data_dir=tmp_path,
        gateway_extra_ports=[],
        gateway_standby_port=0,
        retrain_at="04:30",
        retrain_baseline_rate=0.05,
    )
    (retrain,) = (c for c in stack_components(settings) if c.name == "retrain")
    assert retrain.argv[2:] == [
        "-m",
        "recserve_stack",
        "retrain",
        "--every-day-at",
        "04:30",
        "--guardrail-baseline-rate",
        "0.05",
        "--guardrail-min-drop",
        "0.2",
    ]
    assert retrain.after == ("envoy",)
    assert retrain.env is not None and retrain.env["RECSERVE_STACK_DATA_DIR"] == str(tmp_path)
    with pytest.raises(ValidationError, match="retrain_at"):
        StackSettings(data_dir=tmp_path, retrain_at="4:30")


def test_the_admin_token_is_read_where_the_settings_say(tmp_path: Path):
    assert StackSettings(data_dir=tmp_path).admin_token_path == tmp_path / "auth" / "admin.token"
    mounted = tmp_path / "secret" / "admin.token"
    settings = StackSettings(data_dir=tmp_path, admin_token_file=mounted)
    assert settings.admin_token_path == mounted
