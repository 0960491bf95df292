"""GetUserFeatures and GetItemFeatures(200 ids) through gRPC: SQLite vs Redis,
cold (item cache off) vs warm (cache on, preloaded)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import grpc

from bench.services import new_histogram, percentiles, service_process
from recserve.features.v1 import features_pb2 as pb
from recserve.features.v1 import features_pb2_grpc


def measure(address: str, calls: int, seed: int = 1) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    users, items = new_histogram(), new_histogram()
    with grpc.insecure_channel(address) as channel:
        stub = features_pb2_grpc.FeatureServiceStub(channel)
        for _ in range(50):  # connection and first-call warm-up
            stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="1"))
        for _ in range(calls):
            request = pb.GetUserFeaturesRequest(user_id=str(rng.randint(1, 943)))
            started = time.perf_counter()
            stub.GetUserFeatures(request, timeout=5)
            users.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
        for _ in range(calls // 4):
            ids = [str(i) for i in rng.sample(range(1, 1683), 200)]
            started = time.perf_counter()
            stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=ids), timeout=5)
            items.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
    return {"GetUserFeatures": percentiles(users), "GetItemFeatures_200": percentiles(items)}


def run(data_dir: Path, redis_url: str, calls: int) -> list[dict[str, object]]:
    rows = []
    for store, url in (("sqlite", ""), ("redis", redis_url)):
        if store == "redis" and not url:
            continue
        for cache in ("cold", "warm"):
            env = {
                "RECSERVE_FEATURES_DATA_DIR": str(data_dir),
                "RECSERVE_FEATURES_REDIS_URL": url,
                "RECSERVE_FEATURES_ITEM_CACHE_SIZE": "0" if cache == "cold" else "200000",
                "RECSERVE_FEATURES_REFRESH_INTERVAL_S": "0",
            }
            with service_process("features", env) as address:
                for rpc, numbers in measure(address, calls).items():
                    rows.append({"store": store, "cache": cache, "rpc": rpc, **numbers})
    return rows
