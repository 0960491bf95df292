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
