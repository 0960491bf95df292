"""What a killed Triton leaves in /dev/shm is cleared: by the local runner
for its own Triton's regions alone, by the container's start script for the
container's."""

import subprocess
from pathlib import Path

from recserve_stack import pki, triton
from recserve_stack.settings import StackSettings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PREFIX = "triton_python_backend_shm_region_"


def test_a_stack_removes_its_own_tritons_regions_and_no_one_elses(tmp_path: Path):
    ours = StackSettings(data_dir=tmp_path / "ours", triton_grpc_port=18001, tls=False)
    same_port = StackSettings(data_dir=tmp_path / "theirs", triton_grpc_port=18001)
    other_port = StackSettings(data_dir=tmp_path / "ours", triton_grpc_port=18101)
    prefix = triton.shared_memory_prefix(ours)
    flag = f"--backend-config=python,shm-region-prefix-name={prefix}"
    assert flag in triton.command(ours, ["ranker"])
    shm = tmp_path / "shm"
    shm.mkdir()
    kept = {triton.shared_memory_prefix(s) + "a" for s in (same_port, other_port)}
    kept.add(DEFAULT_PREFIX + "a")
    for name in (*kept, prefix + "a", prefix + "b"):
        (shm / name).touch()
    assert triton.remove_shared_memory(ours, shm) == 2
    assert {path.name for path in shm.iterdir()} == kept
    assert triton.remove_shared_memory(ours, shm) == 0


def test_the_containers_start_clears_what_a_killed_triton_left(tmp_path: Path):
    """Kubernetes keeps the pod's /dev/shm volume across container restarts."""
    tls = pki.ensure_pki(tmp_path / "tls")
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / (DEFAULT_PREFIX + "left")).touch()
    (shm / "unrelated").touch()
    env = {"PATH": "/usr/bin:/bin", "TRITON_TLS_DIR": str(tls), "TRITON_SHM_DIR": str(shm)}
    start = ROOT / "infra" / "triton" / "start.sh"
    ran = subprocess.run(
        ["sh", str(start), "echo", "--model-repository=/data/triton/repository"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"--grpc-root-cert={tls}/ca.pem" in ran.stdout  # it went on to start
    assert [path.name for path in shm.iterdir()] == ["unrelated"]
