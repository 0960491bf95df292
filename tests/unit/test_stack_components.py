"""The local stack's wiring: two gateways by default, each with its own
ports and socket, both behind Envoy; one when asked; the processes call each
other on Unix sockets unless told to use the ports; the backends hosted in
the gateway's process, or each in its own; with them hosted, each further
gateway a request-path process of its own that follows the first's writers."""

from pathlib import Path

from recserve_stack import envoy
from recserve_stack.components import stack_components
from recserve_stack.settings import STANDBY_MARK, StackSettings


def test_two_gateways_with_their_own_ports_behind_envoy(tmp_path: Path):
    settings = StackSettings(
        data_dir=tmp_path,
        gateway_port=50051,
        gateway_extra_ports=[50061],
        gateway_standby_port=0,
        unix_sockets=False,
        one_process=False,
    )
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
    settings = StackSettings(data_dir=tmp_path, gateway_extra_ports=[], gateway_standby_port=0)
    names = [c.name for c in stack_components(settings)]
    assert names.count("gateway") == 1 and not any(n.startswith("gateway-") for n in names)


def test_on_one_host_the_processes_call_each_other_on_sockets(tmp_path: Path):
    settings = StackSettings(data_dir=tmp_path, gateway_extra_ports=[50061], envoy_workers=1)
    components = {c.name: c for c in stack_components(settings)}
    sockets = tmp_path / "sockets"
    assert sockets.stat().st_mode & 0o777 == 0o700
    gateway, second = components["gateway"].env, components["gateway-2"].env
    assert gateway is not None and second is not None
    assert gateway["RECSERVE_GATEWAY_SOCKET"] == str(sockets / "gateway.sock")
    assert second["RECSERVE_GATEWAY_SOCKET"] == str(sockets / "gateway-2.sock")
    assert gateway["RECSERVE_GATEWAY_RANKER_ADDR"] == f"unix:{sockets / 'ranker.sock'}"
    assert gateway["RECSERVE_RANKER_FEATURES_ADDR"] == f"unix:{sockets / 'features.sock'}"
    # Triton listens on a port only.
    assert gateway["RECSERVE_RANKER_TRITON_URL"] == f"127.0.0.1:{settings.triton_grpc_port}"
    config = envoy.render(settings)
    assert f"pipe: {{ path: {sockets / 'gateway-2.sock'} }}" in config
    assert "sni: gateway" not in config  # no TLS on the socket
    assert components["envoy"].argv[-2:] == ["--concurrency", "1"]


def test_a_data_dir_too_deep_for_a_socket_address_gets_a_short_one(tmp_path: Path):
    deep = tmp_path / ("d" * 100)
    settings = StackSettings(data_dir=deep)
    assert settings.socket_dir != deep / "sockets"
    assert len(str(settings.socket("gateway-standby"))) <= 107
    assert settings.socket_dir == StackSettings(data_dir=deep).socket_dir  # the same each start


def test_a_standby_gateway_is_envoys_failover_not_a_second_server(tmp_path: Path):
    settings = StackSettings(data_dir=tmp_path, gateway_extra_ports=[], gateway_standby_port=50062)
    components = {c.name: c for c in stack_components(settings)}
    standby = components["gateway-standby"].env
    assert standby is not None and standby["RECSERVE_GATEWAY_PORT"] == "50062"
    assert standby[STANDBY_MARK] == "standby" and STANDBY_MARK not in (
        components["gateway"].env or {}
    )
    assert standby["RECSERVE_GATEWAY_SOCKET"] == str(tmp_path / "sockets" / "gateway-standby.sock")
    assert "gateway-standby" in components["envoy"].after
    config = envoy.render(settings)
    cluster = config[config.index("cluster_name: gateway\n") :].split("- name:", 1)[0]
    primary, failover = cluster.split("- priority: 1", 1)
    assert "gateway.sock" in primary and "gateway-standby" not in primary
    assert "gateway-standby.sock" in failover
    assert "envoy.retry_priorities.previous_priorities" in config
    assert settings.metrics_port("gateway", 1) == int(standby["RECSERVE_GATEWAY_METRICS_PORT"])


def test_one_process_hosts_the_backends_and_the_other_processes_wait_for_it(tmp_path: Path):
    settings = StackSettings(
        data_dir=tmp_path,
        one_process=True,
        gateway_extra_ports=[50061],
        gateway_standby_port=50062,
        ranker_extra_ports=[50071],
    )
    components = {c.name: c for c in stack_components(settings)}
    assert not {"features", "retriever", "ranker"} & set(components)
    hosting = components["gateway"]
    # Started beside Triton: its ranker is ready once Triton is.
    assert hosting.argv[-2:] == ["-m", "services.one_process"] and hosting.after == ()
    assert hosting.env is not None
    # Each hosted module reads its own settings: its port and socket stay.
    assert hosting.env["RECSERVE_RANKER_PORT"] == str(settings.ranker_port)
    assert hosting.env["RECSERVE_RETRIEVER_SOCKET"] == str(tmp_path / "sockets" / "retriever.sock")
    # The standby and a second ranker call its ports.
    for name in ("gateway-standby", "ranker-2"):
        assert components[name].after == ("gateway",)
        assert components[name].argv[-1] != "services.one_process"
    # A second gateway is a second request-path process: its modules on
    # ports and sockets of their own, following the first's writers. It is
    # started at once and waits itself for the first's modules, after its
    # imports (services/one_process).
    second = components["gateway-2"]
    assert second.argv[-1] == "services.one_process" and second.after == ()
    assert second.env is not None and second.env["RECSERVE_GATEWAY_PORT"] == "50061"
    assert second.env["RECSERVE_GATEWAY_SOCKET"] == str(tmp_path / "sockets" / "gateway-2.sock")
    for module in ("FEATURES", "RETRIEVER", "RANKER"):
        assert second.env[f"RECSERVE_{module}_PORT"] == "0"
        assert f"RECSERVE_{module}_SOCKET" not in second.env
    assert second.env["RECSERVE_RETRIEVER_FOLLOW"] == "true"
    assert second.env["RECSERVE_FEATURES_PUBLISH"] == "false"
    assert "RECSERVE_RETRIEVER_FOLLOW" not in hosting.env
    # Its gateway's other calls (events, the catalogue's watch) reach the first's modules.
    assert (
        second.env["RECSERVE_GATEWAY_FEATURES_ADDR"]
        == hosting.env["RECSERVE_GATEWAY_FEATURES_ADDR"]
    )
    apart = {c.name for c in stack_components(StackSettings(data_dir=tmp_path, one_process=False))}
    assert {"features", "retriever", "ranker", "gateway"} <= apart
