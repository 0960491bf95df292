"""A real service process: serving on start, graceful exit on SIGTERM, and
what it acknowledged survives SIGKILL."""

import asyncio
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from recserve.features.v1 import features_pb2, features_pb2_grpc
from recserve_stack.probes import grpc_serving
from tests.helpers import data_dir_with_artifacts, free_port, poll_until


def service_process(name, port, data_dir, output=subprocess.DEVNULL, **settings):
    """`python -m services.<name>` with RECSERVE_<NAME>_* settings, once SERVING."""
    prefix = f"RECSERVE_{name.upper()}_"
    env = {
        **os.environ,
        prefix + "PORT": str(port),
        prefix + "DATA_DIR": str(data_dir),
        **{prefix + key.upper(): str(value) for key, value in settings.items()},
    }
    process = subprocess.Popen(
        [sys.executable, "-m", f"services.{name}"],
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        poll_until(
            lambda: asyncio.run(grpc_serving(f"127.0.0.1:{port}")), 120, 0.1, f"{name} SERVING"
        )
    except BaseException:
        process.kill()
        raise
    return process


def test_service_process_serves_then_exits_cleanly_on_sigterm(tmp_path, built):
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    process = service_process(
        "retriever", free_port(), data_dir, subprocess.PIPE, shutdown_drain_s=0.2
    )
    try:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert '"msg": "shutting down"' in output
    assert '"msg": "stopped"' in output


def features_process(data_dir, port, redis_url=""):
    return service_process("features", port, data_dir, redis_url=redis_url, refresh_interval_s=0)


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_an_acknowledged_push_survives_sigkill_of_the_features_service(
    tmp_path, built, store, request
):
    """Durability: once PushUserEvents answered, the events are in
    the online store, whatever happens to the process next."""
    redis_url = request.getfixturevalue("redis_url") if store == "redis" else ""
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    port = free_port()
    process = features_process(data_dir, port, redis_url)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = features_pb2_grpc.FeatureServiceStub(channel)
            before = stub.GetUserFeatures(features_pb2.GetUserFeaturesRequest(user_id="5")).user
            when = Timestamp()
            when.FromDatetime(datetime.now(UTC))
            events = [
                features_pb2.UserEvent(user_id="5", item_id=str(i), rating=4.0, event_time=when)
                for i in (1500, 1501)
            ]
            reply = stub.PushUserEvents(features_pb2.PushUserEventsRequest(events=events))
            assert reply.accepted == 2
        process.kill()  # SIGKILL right after the acknowledgement
        process.wait(10)
        process = features_process(data_dir, port, redis_url)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = features_pb2_grpc.FeatureServiceStub(channel)
            after = stub.GetUserFeatures(features_pb2.GetUserFeaturesRequest(user_id="5")).user
        assert after.rating_count == before.rating_count + 2
        assert set(after.recent_item_ids[:2]) == {"1500", "1501"}
    finally:
        process.kill()
        process.wait(10)
