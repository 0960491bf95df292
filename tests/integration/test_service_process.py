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


def test_service_process_serves_then_exits_cleanly_on_sigterm(tmp_path, built):
    port = free_port()
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    env = {
        **os.environ,
        "RECSERVE_RETRIEVER_PORT": str(port),
        "RECSERVE_RETRIEVER_DATA_DIR": str(data_dir),
        "RECSERVE_RETRIEVER_SHUTDOWN_DRAIN_S": "0.2",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.retriever"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        poll_until(
            lambda: asyncio.run(grpc_serving(f"127.0.0.1:{port}")), 60, 0.1, "retriever SERVING"
        )
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert '"msg": "shutting down"' in output
    assert '"msg": "stopped"' in output


def features_process(data_dir, port, redis_url=""):
    env = {
        **os.environ,
        "RECSERVE_FEATURES_PORT": str(port),
        "RECSERVE_FEATURES_DATA_DIR": str(data_dir),
        "RECSERVE_FEATURES_REDIS_URL": redis_url,
        "RECSERVE_FEATURES_REFRESH_INTERVAL_S": "0",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.features"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    poll_until(lambda: asyncio.run(grpc_serving(f"127.0.0.1:{port}")), 120, 0.1, "features SERVING")
    return process


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_an_acknowledged_push_survives_sigkill_of_the_features_service(
    tmp_path, built, store, request
):
    """Issue 16, durability: once PushUserEvents answered, the events are in
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
