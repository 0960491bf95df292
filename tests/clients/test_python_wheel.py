"""The Python client as an app backend gets it: the wheel built from the
tree, installed with its pinned dependencies into a clean environment
(nothing of this repository on its path), calling the stack through Envoy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.clients.conftest import full_answer
from tests.stack import ROOT

CLIENT = ROOT / "clients" / "python"

SCRIPT = """
import json, sys
import recserve_client
from recserve_client import ClientOptions, Event, EventBatcher, InvalidRequest, RecserveClient
from recserve_client import new_event_id
with RecserveClient(sys.argv[1]) as client:
    similar = client.similar_items("50", k=3, debug=True)
    try:
        client.recommend("42", k=0)
        field = None
    except InvalidRequest as error:
        field = error.field
# The events API, with the app token: through the batcher, then the same event again.
event = Event(new_event_id(), "wheel-1", "50", "rating", value=4.0)
with RecserveClient(sys.argv[1], ClientOptions(token=sys.argv[2])) as client:
    with EventBatcher(client) as batcher:
        batcher.add(event)
    again = client.push_events([event])
events = {"accepted": batcher.stats.accepted, "again": [again.accepted, again.duplicates]}
print(json.dumps(
    {"module": recserve_client.__file__, "similar": similar.item_ids, "field": field} | events
))
"""


def run(*args: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_wheel_in_a_clean_environment_calls_the_stack(stack, client, tmp_path):
    full_answer(client)
    dist = tmp_path / "dist"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    run(*pip_wheel, "-w", dist, CLIENT, cwd=tmp_path)
    (wheel,) = dist.glob("recserve_client-*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    pins = CLIENT / "requirements.txt"
    run(python, "-m", "pip", "install", "-q", wheel, "-r", pins, cwd=tmp_path)
    installed = run(python, "-m", "pip", "freeze", cwd=tmp_path).lower().splitlines()
    pinned = [line.lower() for line in pins.read_text().splitlines() if "==" in line]
    # The client's dependencies and nothing else, at the pinned versions.
    assert sorted(i for i in installed if not i.startswith("recserve-client")) == sorted(pinned)
    out = run(venv / "bin" / "recserve-client", "recommend", "--user", "42", "--k", "5",
              "--json", "--target", stack.envoy_address, cwd=tmp_path)  # fmt: skip
    answer = json.loads(out)
    assert len(answer["items"]) == 5 and all(i["title"] for i in answer["items"])
    app_token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    result = json.loads(run(python, "-c", SCRIPT, stack.envoy_address, app_token, cwd=tmp_path))
    assert result["module"].startswith(str(venv)), result["module"]
    assert len(result["similar"]) == 3 and "50" not in result["similar"]
    assert result["field"] == "k"
    assert result["accepted"] == 1 and result["again"] == [0, 1]  # kept once per event id
