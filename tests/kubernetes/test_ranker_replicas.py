"""Ranker replicas share one rollout (services/ranker/replica.py): the replica
holding the lock on the data volume writes it and publishes the address its
peers forward operator calls to. Held here, in every overlay with a ranker:
each ranker states its pod IP (the downward API, not its hostname resolved)
with its gRPC port, and the code publishes exactly that; the NetworkPolicies
let ranker pods reach ranker pods on that port and nothing more than before;
and a follower's forwarded call gets through to a writer at such an address
with the ranker's own certificate."""

from __future__ import annotations

import copy
import re
import socket

import grpc
import pytest

from recserve.ranker.v1 import ranker_pb2, ranker_pb2_grpc
from recserve_kit.transport import bind
from recserve_stack import pki
from services.ranker.config import RankerSettings
from services.ranker.replica import RolloutReplica, WriterAnswered
from tests.kubernetes.manifests import (
    NAME,
    OVERLAYS,
    container,
    env,
    from_pod_ip,
    objects,
    of_kind,
    pods,
)
from tests.kubernetes.test_security import allowed, edges

POD_IP = "10.4.2.7"  # what the kubelet would put in the pod's variable


@pytest.fixture(scope="module", params=OVERLAYS)
def docs(request):
    docs = objects(request.param)
    if "ranker" not in {p.app for p in pods(docs)}:
        pytest.skip(f"{request.param} runs no ranker")
    return docs


def grpc_port(docs: list[dict]) -> int:
    ports = {p["name"]: p["containerPort"] for p in container(docs, "ranker")["ports"]}
    return ports["grpc"]


def expanded(c: dict) -> dict[str, str]:
    """The container's variables as the kubelet sets them: $(VAR) replaced by
    the value of a variable listed before it (the pod IP for the downward API's)."""
    known: dict[str, str] = {}
    for e in c["env"]:
        if "valueFrom" in e:
            assert e["name"] in from_pod_ip(c), e
            known[e["name"]] = POD_IP
        else:
            known[e["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: known.get(m[1], m[0]), str(e["value"])
            )
    return known


def test_each_ranker_advertises_its_pod_ip_and_port(docs, monkeypatch, tmp_path):
    c = container(docs, "ranker")
    (variable,) = from_pod_ip(c)
    port = grpc_port(docs)
    assert int(env(c)["RECSERVE_RANKER_PORT"]) == port
    assert env(c)["RECSERVE_RANKER_ADVERTISE_ADDR"] == f"$({variable}):{port}"
    # The kubelet expands $(VAR) only from variables listed before it.
    names = [e["name"] for e in c["env"]]
    assert names.index(variable) < names.index("RECSERVE_RANKER_ADVERTISE_ADDR")
    # Started with them, the ranker publishes that address for its peers, not
    # the one its hostname resolves to (what a wildcard bind falls back on).
    for key, value in expanded(c).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RECSERVE_RANKER_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "192.0.2.99")
    settings = RankerSettings()
    assert settings.host == "0.0.0.0"
    replica = RolloutReplica(settings)
    replica.advertise(settings.port)
    assert replica.lock.try_acquire()
    try:
        assert replica.lock.writer_address() == f"{POD_IP}:{port}"
    finally:
        replica.lock.release()


def test_ranker_pods_reach_ranker_pods_on_the_grpc_port_and_nothing_more(docs):
    port = grpc_port(docs)
    granted = allowed(docs)
    # Ranker pods of this namespace only ("ranker@any" would be every namespace's).
    assert granted[("ranker", port)] == {"gateway", "retriever", "features", "envoy", "ranker"}
    # The ranker's other ports take no ranker pod ...
    assert {k for k, callers in granted.items() if k[0] == "ranker" and "ranker" in callers} == {
        ("ranker", port)
    }
    # ... and what ranker pods may reach is what the configs have them dial.
    reached = {k for k, callers in granted.items() if "ranker" in callers}
    assert reached == {k for k, callers in edges(docs).items() if "ranker" in callers}
    assert reached == {
        ("ranker", port),
        ("features", 50052),
        ("triton", 8001),
        ("triton", 8002),
        ("otel-collector", 4317),
    }


def test_a_missing_ranker_to_ranker_rule_is_caught():
    docs = copy.deepcopy(objects("cpu"))
    spec = of_kind(docs, "NetworkPolicy")["ranker"]["spec"]
    rankers = {"podSelector": {"matchLabels": {NAME: "ranker"}}}
    for rule in spec["ingress"]:
        rule["from"] = [peer for peer in rule["from"] if peer != rankers]
    spec["ingress"] = [rule for rule in spec["ingress"] if rule["from"]]
    port = grpc_port(docs)
    assert "ranker" in edges(docs)[("ranker", port)]
    assert "ranker" not in allowed(docs)[("ranker", port)]


class Caller:
    """A follower's incoming call: the operator's token, a deadline."""

    def invocation_metadata(self):
        return (("authorization", "Bearer operator-token"),)

    def time_remaining(self):
        return 5.0


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",  # a name the ranker's certificate holds (ranker, localhost, 127.0.0.1)
        "127.0.0.2",  # an address it does not hold, as a pod IP is
    ],
)
async def test_a_follower_forwards_to_the_writer_at_its_advertised_address(host, tmp_path):
    tls_dir = pki.ensure_pki(tmp_path / "tls")
    settings = RankerSettings(
        host="0.0.0.0",
        data_dir=tmp_path / "data",
        tls_dir=tls_dir,
        admin_jwks=tmp_path / "jwks.json",
    )
    server = grpc.aio.server()
    # Every method UNIMPLEMENTED: an answer at all means the handshake passed.
    ranker_pb2_grpc.add_RankerServiceServicer_to_server(
        ranker_pb2_grpc.RankerServiceServicer(), server
    )
    port = bind(server, "0.0.0.0:0", settings.tls("ranker"))
    await server.start()
    writer = RolloutReplica(settings.model_copy(update={"advertise_addr": f"{host}:{port}"}))
    writer.advertise(port)
    assert writer.lock.try_acquire()
    follower = RolloutReplica(settings)
    try:
        with pytest.raises(WriterAnswered) as answered:
            await follower.forward("GetRollout", ranker_pb2.GetRolloutRequest(), Caller())
    finally:
        await follower.close()
        writer.lock.release()
        await server.stop(0)
    assert answered.value.code == grpc.StatusCode.UNIMPLEMENTED, str(answered.value)
