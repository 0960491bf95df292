"""docs/adopting.md's local commands, run in the page's order as a user
types them, with only the data dir moved to a temp dir and the stack's
ports made free: generate a shop, validate it, `make run` it with the
nightly cycle scheduled (the page's steps 3 and 6 are one command but for
the schedule), ask for a list with the page's curl line, run one cycle now
(nothing new yet: it builds nothing), send a click with the app token
the page points to, through the client's EventBatcher as docs/clients.md
shows, back the data dir up while it serves, lose it, restore it and serve
again. Compose (step 7) and Kubernetes (step 8) have tests of their own
(tests/compose/test_your_dataset.py, tests/kubernetes/test_your_dataset.py);
cycles that build and roll out are tests/delivery/test_shop_cycles.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from recserve_client import ClientOptions, Event, EventBatcher, RecserveClient

from recserve_data import load
from tests.helpers import a_shopper, poll_until
from tests.stack import RunningStack, start_stack, stop_stack, wait_ready

pytestmark = [pytest.mark.local_stack_only, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adopting.md"
PAGE_DATA = "data/my-shop"
# The page's commands that reach past one machine: tested elsewhere (above).
NOT_LOCAL = re.compile(r"compose|kubectl")
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:bin/|make |curl )")


def page_commands(text: str) -> list[str]:
    """The page's commands in order: its code blocks' command lines and the
    inline ones (`bin/...` in the prose)."""
    commands, in_block = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        inline = [c for c in re.findall(r"`([^`]+)`", line) if c.startswith("bin/")]
        found = [line.strip()] if in_block else inline
        commands += [c for c in found if COMMAND.match(c) and not NOT_LOCAL.search(c)]
    return commands


def test_the_page_lists_the_commands_this_test_runs():
    """The page's local commands are the ones run below, in this order: a
    command added to the page, or changed, fails here until it is run."""
    assert [c.split()[0:3] for c in page_commands(PAGE.read_text())] == [
        ["bin/pipelines", "generate-shop", "--out"],
        ["bin/pipelines", "validate", f"{PAGE_DATA}/dataset"],
        ["make", "run", f"DATA={PAGE_DATA}"],
        ["curl", "-s", "-d"],
        ["RECSERVE_STACK_RETRAIN_AT=04:30", "make", "run"],
        ["bin/recserve-stack", "retrain"],
        ["bin/recserve-stack", "backup", "--data-dir"],
        ["bin/recserve-stack", "restore", "--data-dir"],
    ]


def run(command: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def listed(curl: str, stack: RunningStack, user: str) -> dict[str, Any]:
    """The page's curl line for ``user`` against this stack: a full answer
    (a degraded one, while a service warms up, is asked again)."""
    line = curl.replace("http://127.0.0.1:8080", f"http://{stack.envoy_address}")
    line = line.replace("<a user id of yours>", user)

    def full() -> dict[str, Any] | None:
        answer = json.loads(run(line))
        return None if answer.get("degraded") else answer

    return poll_until(full, 30, 0.2, f"a full answer for {user}")


def test_the_pages_local_commands_run_in_order(tmp_path):
    commands = [c.replace(PAGE_DATA, str(tmp_path / "my-shop")).replace(
        "backups/", f"{tmp_path}/backups/") for c in page_commands(PAGE.read_text())]  # fmt: skip
    generate, validate, make_run, curl, run_with_nightly, retrain_now, backup, restore = commands
    run(generate)
    assert "memory" in run(validate)  # no FAIL (exit 0), and the memory a build needs
    dataset = load(tmp_path / "my-shop" / "dataset")

    # `make run` with the nightly cycle at 04:30: it builds the data dir's
    # own dataset through the gate, then serves it.
    stack = start_stack(tmp_path / "my-shop", command=run_with_nightly)
    try:
        wait_ready(stack, timeout_s=1_200)
        assert any("every day at 04:30 UTC" in line for line in stack.lines), stack.output()
        user = a_shopper(dataset)
        answer = listed(curl, stack, user)
        assert len(answer["items"]) == 10, answer
        assert answer["model_version"].startswith("shop-"), answer

        assert "no new events or catalogue changes" in run(retrain_now, stack.env)

        token = (tmp_path / "my-shop" / "auth" / "app.token").read_text().strip()
        clicked = answer["items"][0]["item_id"]
        shown = answer["recommendation_id"]
        options = ClientOptions(token=token)
        with (
            RecserveClient(stack.envoy_address, options) as client,
            EventBatcher(client) as batcher,
        ):
            batcher.add(Event("click-1", user, clicked, "click", recommendation_id=shown))
            assert batcher.flush(timeout_s=30)
            assert batcher.stats.accepted == 1, batcher.stats
        # Accepted means on disk: the click is in the log the next cycle reads.
        logged = [json.loads(line) for f in (tmp_path / "my-shop" / "events" / "app").rglob("*")
                  if f.is_file() for line in f.read_text().splitlines()]  # fmt: skip
        assert [(e["event_id"], e["item_id"]) for e in logged] == [("click-1", clicked)]
        # One who sent nothing: their list is the same before and after.
        other = min(set(dataset.interactions["user_id"]) - {user})
        before = listed(curl, stack, other)
        run(backup, stack.env)  # while it serves
    finally:
        stop_stack(stack)

    # The data dir lost, then restored from the backup just made: the same
    # model serves the same list, and the click is in the log.
    (made,) = (tmp_path / "backups").iterdir()
    shutil.rmtree(tmp_path / "my-shop")
    run(re.sub(r"--from \S+", f"--from {made}", restore))
    stack = start_stack(tmp_path / "my-shop", command=make_run)
    try:
        wait_ready(stack)
        again = listed(curl, stack, other)
        assert again["model_version"] == before["model_version"]
        assert [i["item_id"] for i in again["items"]] == [i["item_id"] for i in before["items"]]
    finally:
        stop_stack(stack)
    restored = (tmp_path / "my-shop" / "events" / "app").rglob("*")
    assert any("click-1" in f.read_text() for f in restored if f.is_file())
