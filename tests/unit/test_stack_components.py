"""The local stack's wiring: two gateways by default, each with its own
ports, both behind Envoy; one when asked."""

from pathlib import Path

from recserve_stack import envoy
from recserve_stack.components import stack_components
from recserve_stack.settings import StackSettings


def test_two_gateways_with_their_own_ports_behind_envoy(tmp_path: Path):
    settings = StackSettings(data_dir=tmp_path, gateway_port=50051, gateway_extra_ports=[50061])
    components = {c.name: c for c in stack_components(settings)}
    first, second = components["gateway"], components["gateway-2"]
    assert (first.address, second.address) == ("127.0.0.1:50051", "127.0.0.1:50061")
    assert second.env is not None and second.env["RECSERVE_GATEWAY_PORT"] == "50061"
    assert second.env["RECSERVE_GATEWAY_METRICS_PORT"] == str(settings.metrics_base_port + 4)
    assert set(components["envoy"].after) == {"gateway", "gateway-2"}
    assert set(components["ranker"].after) == {"triton", "features"}
    config = envoy.render(settings)
    assert "port_value: 50051" in config and "port_value: 50061" in config


def test_one_gateway_when_no_extra_ports(tmp_path: Path):
    settings = StackSettings(data_dir=tmp_path, gateway_extra_ports=[])
    names = [c.name for c in stack_components(settings)]
    assert names.count("gateway") == 1 and not any(n.startswith("gateway-") for n in names)
