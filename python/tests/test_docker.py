"""airlock.Sandbox with backend="docker": the same calls against a container. Needs root
and a running Docker engine; the image is built from this machine's files by
crates/airlock/tests/fixtures/build_sandbox_image.sh (no registry). Skipped otherwise, and
failed under AIRLOCK_TEST_REQUIRE (as in CI)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import airlock
from conftest import DEADLINE, Pki, run, skip_or_fail
from test_sandbox import host_processes_with

IMAGE = "airlock-test-sandbox:1"
BUILDER = Path(__file__).resolve().parents[2] / "crates" / "airlock" / "tests" / "fixtures" / "build_sandbox_image.sh"


def docker_ready() -> str:
    """Why docker sandboxes cannot run here, or "" if they can."""
    if os.geteuid() != 0:
        return "the docker backend needs root (run as root)"
    engine = shutil.which("docker")
    if engine is None:
        return "no docker command (install docker.io)"
    if subprocess.run([engine, "info"], capture_output=True, timeout=60).returncode != 0:
        return "no running Docker engine (start dockerd)"
    built = subprocess.run(["bash", str(BUILDER), IMAGE], capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        return f"cannot build {IMAGE}: {built.stderr.strip()}"
    return ""


@pytest.fixture(scope="module")
def docker_sandbox(state_dir: str, pki: Pki, tls_upstream: int) -> Iterator[airlock.Sandbox]:
    why = docker_ready()
    if why:
        skip_or_fail(why)
    box = airlock.Sandbox(
        f"py-docker-{os.getpid()}",
        backend="docker",
        image=IMAGE,
        allow=[f"allowed.test:{tls_upstream}"],
        resolve=["allowed.test:127.0.0.1"],
        upstream_ca=[str(pki.ca_cert)],
        state_dir=state_dir,
    )
    run(box.ensure_running(), timeout=300)
    yield box
    run(box.teardown(), timeout=300)
    containers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=airlock.sandbox={box.name}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert containers.stdout.strip() == "", "the container outlived teardown"


def test_docker_exec_streams_statuses_and_input(docker_sandbox: airlock.Sandbox) -> None:
    box = docker_sandbox
    assert run(box.health_check()) is True
    run(box.ensure_running())  # idempotent
    result = run(box.exec("echo out; echo err >&2; exit 5"))
    assert (result.exit_code, result.stdout, result.stderr) == (5, "out\n", "err\n")
    missing = run(box.exec(["no-such-command-airlock-py"]))
    assert missing.exit_code == 127 and missing.stdout == "", missing
    assert "no-such-command-airlock-py" in missing.stderr
    assert run(box.exec(["/etc/passwd"])).exit_code == 126  # not executable
    assert run(box.exec(["wc", "-c"], stdin=b"123456")).stdout.strip() == "6"
    assert run(box.exec('pwd; echo "$X"', cwd="/tmp", env={"X": "y"})).stdout == "/tmp\ny\n"

    async def lines() -> list:
        return [line async for line in box.exec_stream(["seq", "1", "300"])]

    assert run(lines()) == [str(i) for i in range(1, 301)]


def test_docker_network_is_the_policy(docker_sandbox: airlock.Sandbox, tls_upstream: int) -> None:
    allowed = run(docker_sandbox.exec(["curl", "-sS", "--max-time", "20", f"https://allowed.test:{tls_upstream}/d"]))
    assert allowed.stdout == "upstream saw /d\n", allowed
    refused = run(
        docker_sandbox.exec(["curl", "-sS", "--max-time", "20", "-w", "\\n%{http_code}", "https://unlisted.test/x"])
    )
    body, status = refused.stdout.rstrip("\n").rsplit("\n", 1)
    assert status == "403", refused
    assert json.loads(body)["reason"] == "host_not_allowed"


def test_docker_cancellation_kills_the_command(docker_sandbox: airlock.Sandbox) -> None:
    marker = f"airlockpy-dcancel-{os.getpid()}"

    async def scenario() -> None:
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in docker_sandbox.exec_stream(["sh", "-c", 'echo go; sleep 300 && echo "$0"', marker]):
                started.set()

        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(started.wait(), DEADLINE)
        assert host_processes_with(marker)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    assert host_processes_with(marker) == []
