from recserve_stack import envoy
from recserve_stack.settings import StackSettings


def test_rendered_envoy_config_passes_envoy_validate(tmp_path):
    settings = StackSettings(data_dir=tmp_path)
    result = envoy.validate(envoy.write_config(settings))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "OK" in result.stdout


def test_envoy_validate_rejects_a_broken_config(tmp_path):
    settings = StackSettings(data_dir=tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text(envoy.render(settings).replace("cluster: gateway", "cluster: nowhere", 1))
    result = envoy.validate(broken)
    assert result.returncode != 0


def test_admin_interface_stays_on_loopback(tmp_path):
    rendered = envoy.render(StackSettings(data_dir=tmp_path))
    admin = rendered.split("static_resources:")[0]
    assert "address: 127.0.0.1" in admin


def test_local_rate_limit_answers_resource_exhausted(tmp_path):
    """The real Envoy with a 1 request/s bucket; the gateway need not exist."""
    import subprocess

    import grpc

    from recserve.recommend.v1 import recommend_pb2 as pb
    from recserve.recommend.v1 import recommend_pb2_grpc
    from recserve_stack.probes import http_ok
    from tests.helpers import free_ports, poll_until

    listen, admin, gateway = free_ports(3)
    settings = StackSettings(
        data_dir=tmp_path,
        envoy_port=listen,
        envoy_admin_port=admin,
        gateway_port=gateway,
        rate_limit_per_second=1,
    )
    process = subprocess.Popen(
        [
            envoy.envoy_binary(),
            "-c",
            str(envoy.write_config(settings)),
            "--disable-hot-restart",
            "--log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import asyncio

        poll_until(lambda: asyncio.run(http_ok(f"http://127.0.0.1:{admin}/ready")), 30, 0.1)
        codes = []
        with grpc.insecure_channel(f"127.0.0.1:{listen}") as channel:
            stub = recommend_pb2_grpc.RecommendServiceStub(channel)
            for _ in range(5):
                try:
                    stub.Recommend(pb.RecommendRequest(user_id="1", k=1), timeout=2)
                except grpc.RpcError as error:
                    codes.append(error.code())
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
    finally:
        process.terminate()
        process.wait(10)


def test_the_config_with_the_tls_listener_passes_envoy_validate(tmp_path):
    settings = StackSettings(data_dir=tmp_path, edge_port=9443)
    result = envoy.validate(envoy.write_config(settings))
    assert result.returncode == 0, result.stderr + result.stdout
    assert (tmp_path / "edge" / "tls.crt").is_file()  # the pair it reads, made from the CA
