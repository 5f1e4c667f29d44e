"""airlock.Sandbox against the real binary and real local sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import List

import pytest

import airlock
from conftest import DEADLINE, run


def host_processes_with(marker: str) -> List[int]:
    """Host PIDs whose command line contains `marker` (the sandbox's processes are visible
    from the host, outside its PID namespace)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def wait_until(condition, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_sandbox_is_a_sandbox_provider(sandbox: airlock.Sandbox) -> None:
    assert isinstance(sandbox, airlock.SandboxProvider)
    assert run(sandbox.health_check()) is True


def test_ensure_running_is_idempotent(sandbox: airlock.Sandbox) -> None:
    before = run(sandbox.info())
    run(sandbox.ensure_running())
    run(sandbox.ensure_running())
    after = run(sandbox.info())
    assert before is not None and after is not None
    assert after["created_unix"] == before["created_unix"]
    assert after["status"] == "running"
    assert after["protocol"] == airlock.PROTOCOL_VERSION


def test_exec_returns_status_and_both_streams(sandbox: airlock.Sandbox) -> None:
    result = run(sandbox.exec("echo out1; echo err1 >&2; echo out2; printf tail; exit 7"))
    assert result.exit_code == 7
    assert result.stdout == "out1\nout2\ntail\n"
    assert result.stderr == "err1\n"
    assert result.timed_out is False
    assert result.report["protocol"] == 1
    assert isinstance(result.report["wall_ms"], int)


def test_a_missing_command_is_127_not_an_exception(sandbox: airlock.Sandbox) -> None:
    result = run(sandbox.exec(["no-such-command-airlock-py"]))
    assert result.exit_code == 127
    assert "no-such-command-airlock-py" in result.stderr
    result = run(sandbox.exec("no-such-command-airlock-py"))  # through sh -c
    assert result.exit_code == 127

    async def streamed() -> airlock.ExecStream:
        stream = sandbox.exec_stream(["no-such-command-airlock-py"])
        assert [line async for line in stream] == []
        return stream

    stream = run(streamed())
    assert stream.exit_code == 127


def test_other_statuses(sandbox: airlock.Sandbox) -> None:
    assert run(sandbox.exec(["true"])).exit_code == 0
    assert run(sandbox.exec(["/etc/passwd"])).exit_code == 126  # not executable
    assert run(sandbox.exec("kill -9 $$")).exit_code == 137
    timed = run(sandbox.exec("echo before; sleep 30", timeout=0.5))
    assert timed.exit_code == 124 and timed.timed_out is True
    assert timed.stdout == "before\n"
    # A command that exits 125 itself is not mistaken for airlock failing.
    assert run(sandbox.exec("exit 125")).exit_code == 125


def test_stdin_bytes_and_text(sandbox: airlock.Sandbox) -> None:
    assert run(sandbox.exec(["wc", "-c"], stdin=b"12345")).stdout.strip() == "5"
    assert run(sandbox.exec(["cat"], stdin="héllo\nworld")).stdout == "héllo\nworld\n"
    big = os.urandom(3 * 1024 * 1024)
    assert run(sandbox.exec(["wc", "-c"], stdin=big)).stdout.strip() == str(len(big))
    # Without stdin the command reads an empty input.
    assert run(sandbox.exec(["wc", "-c"])).stdout.strip() == "0"


def test_cwd_and_env_apply_to_one_command(sandbox: airlock.Sandbox) -> None:
    result = run(sandbox.exec('pwd; echo "$GREETING"; echo "$AIRLOCK"', cwd="/tmp", env={"GREETING": "hello there"}))
    assert result.stdout == "/tmp\nhello there\n1\n"
    result = run(sandbox.exec('pwd; echo "[$GREETING]"'))
    workdir = run(sandbox.info())["workdir"]  # type: ignore[index]
    assert result.stdout == f"{workdir}\n[]\n"
    with pytest.raises(ValueError):
        sandbox.exec_stream("true", env={"A=B": "c"})


def test_stream_yields_a_line_before_the_command_ends(sandbox: airlock.Sandbox) -> None:
    """The command prints a line, then waits (bounded) for a file that the test creates
    only once it received that line: the line must come while the command still runs."""
    workdir = Path(run(sandbox.info())["workdir"])  # type: ignore[index]
    go = workdir / f"go-{os.getpid()}"
    go.unlink(missing_ok=True)
    script = (
        f"echo first; i=0; while [ ! -e {go.name} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
        "[ -e " + go.name + " ] && echo second || echo never-released"
    )

    async def scenario() -> List[str]:
        stream = sandbox.exec_stream(script)
        lines = []
        started = time.monotonic()
        async for line in stream:
            lines.append(line)
            if line == "first":
                assert stream.exit_code is None, "the command must still be running"
                assert time.monotonic() - started < 10
                go.write_text("go")
        assert stream.exit_code == 0
        return lines

    try:
        assert run(scenario()) == ["first", "second"]
    finally:
        go.unlink(missing_ok=True)


def test_stream_keeps_order_and_long_lines(sandbox: airlock.Sandbox) -> None:
    async def collect() -> List[str]:
        return [line async for line in sandbox.exec_stream(["seq", "1", "5000"])]

    assert run(collect()) == [str(i) for i in range(1, 5001)]
    long = run(sandbox.exec("head -c 10000 /dev/zero | tr '\\0' x; echo; printf 'é\\tü\\n'"))
    assert long.stdout == "x" * 10000 + "\n" + "é\tü\n"


def test_a_slow_consumer_holds_the_command_up(sandbox: airlock.Sandbox) -> None:
    """About 20 MB of output: while the consumer pauses, the command cannot finish (the
    output waits in bounded buffers, not in memory), and nothing is lost afterwards."""
    workdir = Path(run(sandbox.info())["workdir"])  # type: ignore[index]
    marker = workdir / f"finished-{os.getpid()}"
    marker.unlink(missing_ok=True)
    lines = 20000
    script = f"yes \"$(head -c 1000 /dev/zero | tr '\\0' x)\" | head -n {lines}; echo done > {marker.name}"

    async def scenario() -> int:
        stream = sandbox.exec_stream(script)
        first = await stream.__anext__()
        assert first == "x" * 1000
        await asyncio.sleep(2)
        assert not marker.exists(), "the command ran ahead of its consumer"
        count = 1
        async for line in stream:
            assert len(line) == 1000
            count += 1
        assert stream.exit_code == 0
        return count

    try:
        assert run(scenario()) == lines
        assert marker.exists()
    finally:
        marker.unlink(missing_ok=True)


def test_stream_keeps_stderr_and_report(sandbox: airlock.Sandbox) -> None:
    async def scenario() -> airlock.ExecStream:
        stream = sandbox.exec_stream("echo o; echo e >&2; exit 3")
        assert [line async for line in stream] == ["o"]
        return stream

    stream = run(scenario())
    assert stream.exit_code == 3
    assert list(stream.stderr_lines) == ["e"]
    assert stream.report is not None and stream.report["exit"] == 3


def test_cancelling_the_task_kills_the_command(sandbox: airlock.Sandbox) -> None:
    marker = f"airlockpy-cancel-{os.getpid()}"

    async def scenario() -> None:
        received = asyncio.Event()

        async def consume() -> None:
            async for line in sandbox.exec_stream(["sh", "-c", 'echo started; sleep 300 && echo "$0"', marker]):
                if line == "started":
                    received.set()

        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(received.wait(), DEADLINE)
        assert host_processes_with(marker), "the command should be running"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    # Killed by the time the cancellation completed (the shell and its sleep alike).
    assert host_processes_with(marker) == []
    assert run(sandbox.health_check()) is True
    # The sandbox still works.
    assert run(sandbox.exec(["echo", "still here"])).stdout == "still here\n"


def test_leaving_the_stream_early_with_aclose_kills_the_command(sandbox: airlock.Sandbox) -> None:
    marker = f"airlockpy-aclose-{os.getpid()}"

    async def scenario() -> None:
        stream = sandbox.exec_stream(["sh", "-c", 'while :; do echo tick; sleep 0.1; done; echo "$0"', marker])
        async for line in stream:
            assert line == "tick"
            break
        assert host_processes_with(marker)
        await stream.aclose()

    run(scenario())
    assert host_processes_with(marker) == []


def test_breaking_out_of_the_loop_kills_the_command(sandbox: airlock.Sandbox) -> None:
    marker = f"airlockpy-break-{os.getpid()}"

    async def scenario() -> None:
        async for line in sandbox.exec_stream(["sh", "-c", 'while :; do echo tick; sleep 0.1; done; echo "$0"', marker]):
            assert line == "tick"
            break
        # The abandoned stream is collected; airlock is told to stop the command.
        import gc

        gc.collect()
        for _ in range(200):
            if not host_processes_with(marker):
                return
            await asyncio.sleep(0.05)

    run(scenario())
    assert host_processes_with(marker) == []


def test_the_network_is_the_policy(sandbox: airlock.Sandbox, tls_upstream: int) -> None:
    allowed = run(
        sandbox.exec(["curl", "-sS", "--max-time", "20", f"https://allowed.test:{tls_upstream}/from/python"])
    )
    assert allowed.exit_code == 0, allowed
    assert allowed.stdout == "upstream saw /from/python\n"

    refused = run(
        sandbox.exec(
            ["curl", "-sS", "--max-time", "20", "-o", "/dev/stdout", "-w", "\\n%{http_code}", "https://unlisted.test/x"]
        )
    )
    body, status = refused.stdout.rstrip("\n").rsplit("\n", 1)
    assert status == "403", refused
    assert json.loads(body)["reason"] == "host_not_allowed"

    # A direct connection to a loopback address that no rule names goes nowhere either.
    direct = run(sandbox.exec(["curl", "-sS", "--max-time", "10", f"http://127.0.0.1:{tls_upstream}/"]))
    assert "upstream saw" not in direct.stdout


def test_report_mode_lets_a_path_through_and_enforce_does_not(state_dir: str, pki, tls_upstream: int) -> None:
    def box(mode: str) -> airlock.Sandbox:
        return airlock.Sandbox(
            f"py-{mode}-{os.getpid()}",
            allow=[f"allowed.test:{tls_upstream}/only/**"],
            resolve=["allowed.test:127.0.0.1"],
            upstream_ca=[str(pki.ca_cert)],
            state_dir=state_dir,
            mode=mode,
        )

    curl = ["curl", "-sS", "--max-time", "20", f"https://allowed.test:{tls_upstream}/elsewhere"]
    answers = {}
    for mode in ("report", "enforce"):
        sandbox = box(mode)
        run(sandbox.ensure_running())
        try:
            answers[mode] = run(sandbox.exec(curl)).stdout
        finally:
            run(sandbox.teardown())
    assert answers["report"] == "upstream saw /elsewhere\n", answers
    assert json.loads(answers["enforce"])["reason"] == "path_not_allowed", answers
    with pytest.raises(ValueError):
        airlock.Sandbox("x", mode="ask-me")


def test_ensure_running_and_teardown_life_cycle(state_dir: str, binary: str) -> None:
    name = f"py-life-{os.getpid()}"
    box = airlock.Sandbox(name, allow=["allowed.test"], state_dir=state_dir)
    assert run(box.health_check()) is False
    assert run(box.info()) is None

    async def start_concurrently() -> None:
        await asyncio.gather(box.ensure_running(), box.ensure_running(), box.ensure_running())

    run(start_concurrently())
    assert run(box.health_check()) is True
    state = json.loads((Path(state_dir) / name / "control" / "state.json").read_text())
    daemon_pid = state["daemon"]["pid"]
    assert Path(f"/proc/{daemon_pid}").exists()

    # A second object for the same name sees the same sandbox.
    same = airlock.Sandbox(name, state_dir=state_dir)
    assert run(same.exec(["echo", "shared"])).stdout == "shared\n"

    run(box.teardown())
    assert run(box.health_check()) is False
    assert not (Path(state_dir) / name).exists()
    wait_until(lambda: not Path(f"/proc/{daemon_pid}").exists(), "the daemon to be gone")
    run(box.teardown())  # idempotent

    with pytest.raises(airlock.SandboxNotFound) as caught:
        run(box.exec(["true"]))
    assert caught.value.exit_status == 125
    assert f"no sandbox named {name}" in caught.value.message

    # And it can be started again.
    run(box.ensure_running())
    assert run(box.exec(["true"])).exit_code == 0
    run(box.teardown())


def test_two_creators_of_one_name_both_succeed(state_dir: str) -> None:
    """Separate objects (as separate orchestrator processes would be) racing to create the
    same sandbox: one creates it, the other waits for it to run."""
    name = f"py-race-{os.getpid()}"
    first = airlock.Sandbox(name, allow=["allowed.test"], state_dir=state_dir)
    second = airlock.Sandbox(name, allow=["allowed.test"], state_dir=state_dir)

    async def race() -> None:
        await asyncio.gather(first.ensure_running(), second.ensure_running())

    try:
        run(race())
        assert run(second.exec(["echo", "one sandbox"])).stdout == "one sandbox\n"
    finally:
        run(first.teardown())
    assert run(second.health_check()) is False


def test_a_dead_sandbox_is_reported(state_dir: str) -> None:
    name = f"py-dead-{os.getpid()}"
    box = airlock.Sandbox(name, allow=["allowed.test"], state_dir=state_dir)
    run(box.ensure_running())
    try:
        state = json.loads((Path(state_dir) / name / "control" / "state.json").read_text())
        os.kill(state["daemon"]["pid"], 9)
        wait_until(lambda: not run(box.health_check()), "the sandbox to be dead")
        with pytest.raises(airlock.SandboxDead):
            run(box.ensure_running())
        with pytest.raises(airlock.SandboxDead) as caught:
            run(box.exec(["true"]))
        assert caught.value.exit_status == 125
    finally:
        run(box.teardown())
    assert run(box.info()) is None


def test_creation_errors_carry_airlocks_message(state_dir: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nnetwork:\n  allow:\n    - hots: example.com\n")
    box = airlock.Sandbox(f"py-bad-{os.getpid()}", policy=bad, state_dir=state_dir)
    with pytest.raises(airlock.CommandFailed) as caught:
        run(box.ensure_running())
    assert caught.value.exit_status == 125
    assert "airlock:" in caught.value.message and "hots" in caught.value.message
    assert run(box.info()) is None, "a failed create leaves nothing"

    with pytest.raises(airlock.CommandFailed) as caught:
        run(airlock.Sandbox("Not A Valid Name", state_dir=state_dir).ensure_running())
    assert caught.value.exit_status == 125

    with pytest.raises(ValueError):
        airlock.Sandbox("x", backend="vm")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        airlock.Sandbox("x", backend="docker")
    with pytest.raises(airlock.BinaryNotFound):
        airlock.Sandbox("x", binary=tmp_path / "nowhere")


def test_secrets_stay_outside(state_dir: str) -> None:
    real = "ghp_" + "R" * 36
    box = airlock.Sandbox(
        f"py-sec-{os.getpid()}",
        allow=["allowed.test"],
        secrets=["GH_TOKEN@allowed.test"],
        secret_env={"GH_TOKEN": real},
        state_dir=state_dir,
    )
    run(box.ensure_running())
    try:
        inside = run(box.exec('echo "$GH_TOKEN"')).stdout.strip()
        assert inside and inside != real
        assert len(inside) == len(real)
        assert real not in run(box.exec(["env"])).stdout
    finally:
        run(box.teardown())


def test_binary_is_the_installed_one(binary: str) -> None:
    completed = subprocess.run([binary, "sandbox", "--help"], capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0 and "exec" in completed.stdout
