"""The TypeScript client's own tests (node's test runner), against the
stack's Envoy. `make clients` builds clients/typescript/dist."""

from __future__ import annotations

import os
import subprocess

from tests.clients.conftest import ENVOY, full_answer
from tests.stack import ROOT

PACKAGE = ROOT / "clients" / "typescript"


def test_the_typescript_client_against_the_stack(stack, client):
    assert (PACKAGE / "dist" / "test").is_dir(), "build it first: make clients"
    full_answer(client)
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    env = {
        **os.environ,
        "RECSERVE_ENVOY_ADDRESS": stack.envoy_address,
        "RECSERVE_APP_TOKEN": token,
        # Envoy's TLS listener and the CA of its certificate.
        "RECSERVE_EDGE_ADDRESS": stack.edge_address,
        "RECSERVE_CA_FILE": str(stack.edge_ca),
        # Its last test kills Envoy (the runner restarts it).
        "RECSERVE_ENVOY_PID": str(stack.component_pid(ENVOY)),
    }
    done = subprocess.run(
        ["node", "--test", "dist/test/"],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert "# fail 0" in report and "# skipped 0" in report, report[-3000:]
