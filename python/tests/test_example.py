"""examples/python/orchestrator.py, run as a user would, against a loopback "LLM"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import Pki, _EchoHandler

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "orchestrator.py"


def test_the_orchestrator_example_streams_the_worker_and_tears_down(
    state_dir: str, pki: Pki, tls_upstream: int
) -> None:
    real_llm_key = "sk-" + os.urandom(12).hex()
    real_git_token = "ghp_" + os.urandom(18).hex()
    name = f"py-example-{os.getpid()}"
    _EchoHandler.authorizations.clear()
    completed = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--name", name,
            "--llm-upstream", f"https://allowed.test:{tls_upstream}/v1/",
            "--git-host", "git.test",
            "--resolve", "allowed.test:127.0.0.1",
            "--upstream-ca", str(pki.ca_cert),
            "--timeout", "60",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "AIRLOCK_SANDBOX_DIR": state_dir, "LLM_API_KEY": real_llm_key, "GIT_TOKEN": real_git_token},
    )
    assert completed.returncode == 0, completed.stderr + completed.stdout
    events = [json.loads(line.split(": ", 1)[1]) for line in completed.stdout.splitlines() if line.startswith(f"[{name}]")]
    assert [e["event"] for e in events] == ["started", "git_credentials", "llm", "step", "step", "step", "done"]
    credentials = events[1]
    assert credentials["present"] and credentials["length"] == len(real_git_token)
    llm = events[2]
    assert llm["status"] == 200 and json.loads(llm["body"])["path"] == "/v1/chat/completions"
    # The upstream got the real key, injected by airlock; the worker never printed it.
    assert _EchoHandler.authorizations == [f"Bearer {real_llm_key}"]
    assert real_llm_key not in completed.stdout and real_git_token not in completed.stdout
    # Torn down.
    assert not (Path(state_dir) / name).exists()
