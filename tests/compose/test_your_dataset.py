"""A team's dataset served by Compose: `DATASET=DIR make compose-up`
validates it on the host, mounts it at /data/dataset, gives the build's
container the memory `validate` estimates, and the stack serves what it
built from it. make compose-test runs this after its e2e suite, against a
fresh stack serving a generated shop (RECSERVE_COMPOSE_DATASET names it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_data import load
from recserve_model import artifacts
from tests.compose_stack import copy_data, docker, project_containers
from tests.helpers import a_shopper, brand_and_price, full_answer

DATASET = os.environ.get("RECSERVE_COMPOSE_DATASET")
pytestmark = pytest.mark.skipif(
    not DATASET, reason="make compose-test runs it, against a stack it starts with DATASET="
)


@pytest.fixture(scope="module")
def shop():
    return load(Path(str(DATASET)))


@pytest.fixture(scope="module")
def stub():
    channel = grpc.insecure_channel("127.0.0.1:8080")
    yield recommend_pb2_grpc.RecommendServiceStub(channel)
    channel.close()


def test_the_build_learned_the_mounted_dataset_in_the_memory_validate_gave(shop, tmp_path):
    data_dir = copy_data(tmp_path / "data")
    manifest = json.loads((artifacts.current(data_dir) / "manifest.json").read_text())
    assert manifest["dataset_dir"] == "/data/dataset"
    assert manifest["dataset_fingerprint"] == shop.fingerprint
    report = subprocess.run(
        [sys.executable, "-m", "pipelines", "validate", "--json", str(DATASET)],
        check=True,
        capture_output=True,
        text=True,
    )
    limit_gib = json.loads(report.stdout)["build_memory_limit_gib"]
    (init,) = project_containers("com.docker.compose.service=init")
    (container,) = json.loads(docker("inspect", init))
    assert container["HostConfig"]["Memory"] == limit_gib << 30
    assert container["State"]["ExitCode"] == 0


def test_shoppers_get_the_shops_products_filtered_on_its_attributes(shop, stub):
    user = a_shopper(shop)
    listed = full_answer(stub, user, k=10)
    active = set(shop.items.loc[shop.items["active"], "item_id"])
    assert len(listed.items) == 10 and {i.item_id for i in listed.items} <= active
    assert listed.model_version.startswith(f"{shop.manifest.name}-")
    item_filter, meets = brand_and_price(shop)
    filtered = full_answer(stub, user, k=10, filter=item_filter)
    assert filtered.items and all(meets(i.item_id) for i in filtered.items)


def test_a_new_shopper_gets_a_list_of_the_shops_products(shop, stub):
    reply = stub.Recommend(pb.RecommendRequest(user_id="new-shopper", k=5), timeout=5)
    assert reply.degraded and len(reply.items) == 5
    assert {i.item_id for i in reply.items} <= set(shop.items["item_id"])
