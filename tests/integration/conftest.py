"""Fixtures shared by the integration tests."""

import shutil
import subprocess

import pytest
import redis

from tests.helpers import free_port, poll_until


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed and `make redis-server` could not install it")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)

    def answers():
        try:
            return client.ping()
        except redis.ConnectionError:
            return False

    poll_until(answers, 30, 0.05, "redis-server")
    yield f"127.0.0.1:{port}"
    process.terminate()
    process.wait(10)
