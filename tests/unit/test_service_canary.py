"""The service canary's controller against a stand-in Envoy admin: it
refuses to start without a canary build behind its cluster, and abort and
reset do what their help says in every state."""

import pytest

from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.state import Triggers
from recserve_kit.errors import FailedPrecondition
from recserve_stack.service_canary import CANARY, NAME, ServiceCanary

STABLE_HOST = "127.0.0.1:50051"


class FakeEnvoy:
    def __init__(self, canary_hosts: dict[str, bool]) -> None:
        self.hosts = {"gateway": {STABLE_HOST: True}, CANARY: canary_hosts}
        self.runtime_values: dict[str, int] = {}

    def set_runtime(self, values: dict[str, int]) -> None:
        self.runtime_values.update(values)

    def cluster_hosts(self, cluster: str) -> dict[str, bool]:
        return self.hosts[cluster]

    def cluster_stats(self, cluster: str) -> dict[str, object]:
        return {"counters": {}, "buckets": []}


def canary(tmp_path, hosts: dict[str, bool]) -> tuple[ServiceCanary, FakeEnvoy]:
    envoy = FakeEnvoy(hosts)
    rollout = Rollout(tmp_path, "gateway", name=NAME, metrics_prefix="recserve_canary")
    return ServiceCanary(envoy, rollout), envoy  # type: ignore[arg-type]


PLAN = Plan(f"{CANARY}:build-2", [5, 25, 50, 100], 60, 50, 0, Triggers())


@pytest.mark.parametrize(
    "hosts, why",
    [({STABLE_HOST: True}, "only the stable gateway"), ({}, "no host")],
)
def test_start_refuses_without_a_canary_build(tmp_path, hosts, why):
    controller, envoy = canary(tmp_path, hosts)
    with pytest.raises(FailedPrecondition, match=why) as refused:
        controller.start(PLAN)
    assert "RECSERVE_STACK_GATEWAY_CANARY_PORT" in str(refused.value)
    assert controller.state.status == "idle" and envoy.runtime_values == {}


def test_start_waits_for_a_healthy_canary_then_starts(tmp_path):
    controller, envoy = canary(tmp_path, {"127.0.0.1:50071": False})
    with pytest.raises(FailedPrecondition, match="health checks"):
        controller.start(PLAN)
    envoy.hosts[CANARY]["127.0.0.1:50071"] = True
    controller.start(PLAN)
    assert envoy.runtime_values[f"routing.gateway.{CANARY}"] == 500


def test_reset_works_while_a_canary_runs_at_its_last_step(tmp_path):
    controller, envoy = canary(tmp_path, {"127.0.0.1:50071": True})
    controller.start(PLAN)
    for _ in range(3):
        controller.rollout.promote()  # 100%: a controller that stopped here
    assert controller.state.active and controller.state.share_percent == 100
    controller.reset()
    assert controller.state.status == "idle" and controller.state.stable == "gateway"
    assert envoy.runtime_values[f"routing.gateway.{CANARY}"] == 0
    assert [d.action for d in controller.state.history][-2:] == ["abort", "reset"]


def test_abort_after_a_promotion_sends_every_request_back_to_the_stable_gateway(tmp_path):
    controller, envoy = canary(tmp_path, {"127.0.0.1:50071": True})
    controller.start(PLAN)
    for _ in range(4):
        controller.rollout.promote()
    controller.apply()  # as the controller's look does
    assert controller.state.status == "promoted"
    assert envoy.runtime_values[f"routing.gateway.{CANARY}"] == 10_000
    controller.abort()
    assert envoy.runtime_values["routing.gateway.gateway"] == 10_000
    controller.abort()  # nothing left to abort: still fine
    assert envoy.runtime_values[f"routing.gateway.{CANARY}"] == 0
