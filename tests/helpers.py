"""Test helpers: free ports, polling on a condition instead of sleeping,
a full (not degraded) Recommend answer, the ranker's request parts, and a
generated shop's busiest shopper and a brand-and-price filter."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from recserve.recommend.v1 import recommend_pb2

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker_port_range(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of [low, high): workers pick blocks
    at the same moments, and a block is only checked free, not held, until
    its stack binds it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2:
        return low, high
    share = (high - low) // workers
    start = low + int(worker[2:]) * share
    return start, start + share


def free_port_block(count: int) -> int:
    """A base port with base .. base + count - 1 all free now, taken below the
    kernel's ephemeral range: a port-0 bind or an outbound connection (Spark
    opens dozens) can then never take one of them between now and the bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    start, end = worker_port_range(10_000, low - count)
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(start, end)
        sockets: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


def python_process(code: str, data_dir: Path) -> subprocess.Popen[str]:
    """``code`` run by this interpreter in a process of its own, from the
    repository's root with ``data_dir`` as its RECSERVE_DATA_DIR; its
    output (stdout and stderr) read as text."""
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "RECSERVE_DATA_DIR": str(data_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def poll_until(
    condition: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.05, what: str = ""
) -> T:
    """Calls ``condition`` until it returns something truthy; fails after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or condition}")
        time.sleep(interval_s)


def asked_until(
    ask: Callable[[], T], accept: Callable[[T], bool], what: str, timeout_s: float = 30.0
) -> T:
    """``ask()`` again until ``accept`` takes its answer. A stage late on a busy
    host degrades an answer for its own reason (FEATURES_TIMEOUT, say), which is
    not the behaviour a test of cold start or a fallback is about."""
    last: list[T] = []

    def attempt() -> T | None:
        last[:] = [ask()]
        return last[0] if accept(last[0]) else None

    try:
        return poll_until(attempt, timeout_s, 0.2, what)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out} (the last answer: {last})") from None


def cold_start_answer(
    stub: Any, request: recommend_pb2.RecommendRequest
) -> recommend_pb2.RecommendResponse:
    """A Recommend for a user with no features (cold start), asked again
    while a stage late on a busy host degraded it for its own reason."""
    return asked_until(
        lambda: stub.Recommend(request, timeout=2),
        lambda reply: reply.degraded_reason == recommend_pb2.DEGRADED_REASON_COLD_START,
        "a cold-start answer",
    )


async def apoll_until(
    condition: Callable[[], Awaitable[T]], timeout_s: float = 30.0, interval_s: float = 0.05
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {condition}")
        await asyncio.sleep(interval_s)


def data_dir_with_artifacts(tmp: Path, built_data_dir: Path) -> Path:
    """A fresh data dir that shares the built (read-only) artifacts."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "artifacts").symlink_to(built_data_dir / "artifacts", target_is_directory=True)
    (tmp / "triton").mkdir(exist_ok=True)
    (tmp / "triton" / "repository").symlink_to(
        built_data_dir / "triton" / "repository", target_is_directory=True
    )
    return tmp


def data_dir_for_versions(tmp: Path, built_data_dir: Path) -> Path:
    """A fresh data dir that shares the built artifacts but can take more
    versions: its own artifacts folder (links to each built artifact) and its
    own copy of the Triton repository, so a version published into it
    changes nothing outside it."""
    (tmp / "artifacts").mkdir(parents=True)
    for entry in (built_data_dir / "artifacts").iterdir():
        target = tmp / "artifacts" / entry.name
        if entry.is_dir():
            target.symlink_to(entry.resolve(), target_is_directory=True)
        else:
            shutil.copy2(entry, target)
    shutil.copytree(built_data_dir / "triton" / "repository", tmp / "triton" / "repository")
    (tmp / "raw").symlink_to(built_data_dir / "raw", target_is_directory=True)
    return tmp


def user_message(row):
    """A features.v1.UserFeatures from a row of the joined user tables."""
    from recserve.features.v1 import features_pb2

    return features_pb2.UserFeatures(
        user_id=row.user_id,
        found=True,
        age=int(row.age),
        gender=row.gender,
        occupation=row.occupation,
        rating_count=int(row.rating_count),
        mean_rating=float(row.mean_rating),
        recent_item_ids=list(row.recent_item_ids),
    )


async def started_ranker(data_dir: Path, repository: Path, triton: Any, **settings: Any) -> Any:
    """A ranker service in this process on ``data_dir``'s repository, started
    and ready (its models loaded in ``triton``, a running server)."""
    from services.ranker.config import RankerSettings
    from services.ranker.server import create_server

    service = await create_server(
        RankerSettings(
            port=0,
            data_dir=data_dir,
            triton_url=triton.grpc_url,
            triton_repository=repository,
            shutdown_drain_s=0,
            health_interval_s=0.1,
            **settings,
        )
    )
    await service.start()
    await apoll_until(lambda: service.domain.models_ready(), 60)
    return service


def ranker_catalog(directory: Path) -> tuple[Any, Any]:
    """(users, items): an artifact's joined user and item feature tables."""
    import pandas as pd

    f = directory / "features"
    users = pd.read_parquet(f / "user_profile.parquet").merge(
        pd.read_parquet(f / "user_activity.parquet"), on="user_id"
    )
    items = pd.read_parquet(f / "item_profile.parquet").merge(
        pd.read_parquet(f / "item_stats.parquet"), on="item_id"
    )
    return users, items


def ranker_candidates(items: Any, n: int, offset: int = 0) -> list[Any]:
    """ranker.v1 Candidates, with their features, from rows of ``items``."""
    from recserve.features.v1 import features_pb2
    from recserve.ranker.v1 import ranker_pb2

    rows = items.iloc[offset : offset + n]
    return [
        ranker_pb2.Candidate(
            item_id=r.item_id,
            retrieval_score=0.1 * (i % 7),
            features=features_pb2.ItemFeatures(
                item_id=r.item_id,
                found=True,
                title=r.title,
                year=int(r.year),
                categories=list(r.genres),
                popularity=int(r.popularity),
                mean_rating=float(r.mean_rating),
            ),
        )
        for i, r in enumerate(rows.itertuples())
    ]


def full_answer(
    stub: Any, user_id: str = "42", k: int = 20, timeout_s: float = 30.0, **fields: Any
) -> recommend_pb2.RecommendResponse:
    """Recommend, retried until the answer is not degraded (the stack may be
    starting or recovering)."""

    last: list[str] = []

    def attempt() -> recommend_pb2.RecommendResponse | None:
        request = recommend_pb2.RecommendRequest(user_id=user_id, k=k, **fields)
        reply = stub.Recommend(request, timeout=2)
        last[:] = [recommend_pb2.DegradedReason.Name(reply.degraded_reason)]
        return reply if not reply.degraded else None

    try:
        return poll_until(attempt, timeout_s, 0.2, "a full (not degraded) answer")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out} (the last one: {last})") from None


PERMISSION_DENIED = 13
# A process of another user, connecting to a socket: the exit code says how far it got.
OTHER_USER_CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except PermissionError:
    sys.exit(13)  # PERMISSION_DENIED
sys.exit(0)
"""


def connect_as_nobody(path: Path) -> int:
    """Exit code of a process of user nobody connecting to the socket at
    ``path``: PERMISSION_DENIED, or 0 when it got in (the caller is root)."""
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    return subprocess.run(
        [python, "-I", "-S", "-c", OTHER_USER_CONNECT, str(path)], user="nobody"
    ).returncode


def a_shopper(source: Any) -> str:
    """A generated shop's busiest shopper."""
    return str(source.interactions["user_id"].value_counts().index[0])


def brand_and_price(source: Any) -> tuple[recommend_pb2.ItemFilter, Callable[[str], bool]]:
    """The two commonest brands and the middle half of prices: a filter
    many products meet, and many do not."""
    items = source.items[source.items["active"]]
    brands = list(items["brand"].value_counts().index[:2])
    low, high = (float(q) for q in np.quantile(items["price"], [0.25, 0.75]))
    conditions = [
        recommend_pb2.AttributeFilter(name="brand", any_of=brands),
        recommend_pb2.AttributeFilter(name="price", min=low, max=high),
    ]
    by_id = items.set_index("item_id")

    def meets(item_id: str) -> bool:
        row = by_id.loc[item_id]
        return row["brand"] in brands and low <= row["price"] <= high

    return recommend_pb2.ItemFilter(attributes=conditions), meets


def built_shop(root: Path, seed: int) -> tuple[Path, Path]:
    """A small generated shop whose shoppers buy their staples again (400
    products, 300 shoppers, 60,000 events), built through the pipeline and
    its gate (QualityGateError below every baseline): (dataset, data dir)."""
    from pipelines.build import build
    from pipelines.shop import ShopSize, write_shop

    size = ShopSize(items=400, users=300, events=60_000, repeat=True)
    dataset = write_shop(root / "dataset", size, seed=seed)
    build(root / "data", dataset_dir=dataset)
    return dataset, root / "data"


def envoy_counters(stack, *names: str) -> dict[str, int]:
    """Envoy's counters by name (admin /stats, live values)."""
    url = f"http://127.0.0.1:{stack.port('envoy_admin')}/stats"
    with urllib.request.urlopen(url, timeout=5) as response:
        lines = response.read().decode().splitlines()
    values = dict(line.split(": ", 1) for line in lines if ": " in line)
    return {name: int(values.get(name, "0")) for name in names}


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """SIGSTOP a process (a hung component), SIGCONT it afterwards."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# Envoy's count of calls it sent on to another gateway (a retry or a hedge)
# that then answered.
HEDGED = "cluster.gateway.upstream_rq_retry_success"


def calls_while_frozen(client: Any, pid: int, seconds: float) -> int:
    """Recommend through ``client`` (the Python client) in a loop while
    ``pid`` is frozen, each answer whole; how many calls were made."""
    calls = 0
    with frozen(pid):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert len(client.recommend(str(1 + calls % 100), k=10).items) == 10
            calls += 1
    return calls
