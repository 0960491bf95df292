"""A service process takes what it loaded before serving out of the garbage
collector's walks (``gc.freeze``): a full collection then walks only what
was made since, not the whole startup heap (a 150 ms stall of the event
loop at 200/s before)."""

import signal
import subprocess

from tests.helpers import python_process

SERVICE = """
import asyncio, gc
from recserve_kit.config import ServiceSettings
from recserve_kit.server import build_server, run

loaded = [[n] for n in range(50_000)]  # a catalogue, loaded at start (lists: always tracked)

async def report() -> None:
    for _ in range(3000):  # until the process serves (30 s at most)
        if gc.get_freeze_count():
            break
        await asyncio.sleep(0.01)
    made_since = [["new"]]
    walked = {id(o) for o in gc.get_objects()}
    print("frozen", gc.get_freeze_count(), id(loaded[0]) in walked, id(made_since) in walked,
          flush=True)

async def factory():
    service = build_server("test", ServiceSettings(port=0, shutdown_drain_s=0), [])
    service.run_in_background(report)
    return service, None

run(factory)
"""


def test_the_heap_loaded_before_serving_is_frozen_and_what_comes_after_is_not(tmp_path):
    process = python_process(SERVICE, tmp_path)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().split()
        assert line[0] == "frozen", line
        frozen, loaded_walked, new_walked = int(line[1]), line[2], line[3]
        assert frozen >= 50_000
        assert loaded_walked == "False", "the startup heap is still walked by collections"
        assert new_walked == "True", "objects made after the start must still be collected"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
