"""Sandboxes from asyncio: ``airlock sandbox create / exec --json / ls --json / rm``.

Every call runs the ``airlock`` binary; nothing is kept in this process that another
process could not see (the state lives in airlock's sandbox directory), so an orchestrator
may restart and pick up its sandboxes by name.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
from dataclasses import dataclass, field
from typing import (
    Any,
    AsyncIterator,
    Deque,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._binary import find_binary
from ._errors import (
    AirlockError,
    CommandFailed,
    ProtocolError,
    SandboxDead,
    SandboxNotFound,
)

from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "PROTOCOL_VERSION",
    "Command",
    "ExecResult",
    "ExecStream",
    "Sandbox",
    "SandboxProvider",
]

#: The version of ``airlock sandbox exec --json`` / ``ls --json`` this package speaks.
PROTOCOL_VERSION = 1

#: A command: a string runs with ``sh -c``; a sequence is the program and its arguments.
Command = Union[str, Sequence[str]]
PathLike = Union[str, "os.PathLike[str]"]

# One JSON event holds at most a 64 KiB line, which escaping can grow about sixfold.
_EVENT_LIMIT = 1024 * 1024
# How long a stopped `exec` may take to kill its command and end.
_STOP_GRACE = 10.0
# How much of airlock's own standard error is kept for error messages.
_CLI_STDERR_LIMIT = 64 * 1024
# How many standard-error lines of the command `exec_stream` keeps (the most recent).
_STREAM_STDERR_LINES = 1000
# Bounds on the short airlock commands (create, ls, rm).
_CREATE_TIMEOUT = 180.0
_QUICK_TIMEOUT = 60.0


@runtime_checkable
class SandboxProvider(Protocol):
    """The interface an orchestrator drives (implemented by :class:`Sandbox`)."""

    async def ensure_running(self) -> None: ...

    def exec_stream(
        self,
        command: Command,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[Union[bytes, str]] = None,
    ) -> AsyncIterator[str]: ...

    async def teardown(self) -> None: ...

    async def health_check(self) -> bool: ...


@dataclass(frozen=True)
class ExecResult:
    """How a command ended and what it wrote.

    ``stdout`` and ``stderr`` are the command's lines, each followed by ``"\\n"``.
    ``exit_code`` is the shell status: the exit code, 128 + signal when killed, 124 when
    ``timeout`` killed it, 127 when the command was not found, 126 when it could not run.
    ``report`` is the whole exit report of the protocol (``wall_ms``, ``user_ms``, ...).
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    report: Dict[str, Any] = field(default_factory=dict)


def _argv_of(command: Command) -> List[str]:
    if isinstance(command, str):
        return ["sh", "-c", command]
    argv = [os.fspath(part) for part in command]
    if not argv:
        raise ValueError("an empty command")
    return argv


def _stdin_bytes(stdin: Optional[Union[bytes, bytearray, memoryview, str]]) -> Optional[bytes]:
    if stdin is None:
        return None
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    return bytes(stdin)


def _airlock_message(stderr: bytes) -> str:
    """airlock's own explanation in its standard error (its ``airlock: ...`` lines, else
    everything)."""
    text = stderr.decode("utf-8", "replace").strip()
    lines = [line for line in text.splitlines() if line.startswith("airlock:")]
    return "\n".join(lines) if lines else text


def _failure(message: str, status: Optional[int], argv: List[str]) -> AirlockError:
    """The exception for a failed airlock command, by what airlock said."""
    if not message:
        message = f"{' '.join(argv[:3])} failed"
    if "no sandbox named" in message:
        return SandboxNotFound(message, exit_status=status, argv=argv)
    if "is not running" in message:
        return SandboxDead(message, exit_status=status)
    return CommandFailed(message, exit_status=status, argv=argv)


async def _kill_and_reap(process: "asyncio.subprocess.Process") -> None:
    if process.returncode is None:
        try:
            process.kill()
        except ProcessLookupError:
            pass
    try:
        await asyncio.wait_for(process.wait(), _STOP_GRACE)
    except asyncio.TimeoutError:
        pass


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    """Writes `data` to airlock's standard input, then closes it."""
    try:
        pipe.write(data)
        await pipe.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # airlock went away; its status says why
    finally:
        pipe.close()


async def _collect(pipe: asyncio.StreamReader, into: bytearray) -> None:
    """Reads airlock's own standard error to its end, keeping the first 64 KiB."""
    while True:
        chunk = await pipe.read(4096)
        if not chunk:
            return
        room = _CLI_STDERR_LIMIT - len(into)
        if room > 0:
            into += chunk[:room]


class ExecStream(AsyncIterator[str]):
    """The standard output lines of one command in a sandbox, as they come (without their
    newline). Returned by :meth:`Sandbox.exec_stream`; the command starts at the first
    ``__anext__``.

    Lines are read from airlock only as the consumer asks for them, so a slow consumer
    slows the producer instead of filling this process's memory. Once the iteration ended,
    ``exit_code``, ``timed_out`` and ``report`` say how the command ended and ``stderr_lines``
    holds its most recent standard error lines.

    If the iteration is abandoned — the task is cancelled, an exception interrupts it, or
    :meth:`aclose` is called before the end — the command and its descendants are killed
    in the sandbox before the cancellation completes (bounded by a grace of 10 s).
    """

    def __init__(
        self,
        sandbox: "Sandbox",
        arguments: List[str],
        stdin: Optional[bytes],
        stderr_lines: Optional[int] = _STREAM_STDERR_LINES,
    ) -> None:
        self._sandbox = sandbox
        self._arguments = arguments
        self._stdin = stdin
        self._process: Optional[asyncio.subprocess.Process] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._helpers: List["asyncio.Future[Any]"] = []
        self._cli_stderr = bytearray()
        self._finished = False
        self.exit_code: Optional[int] = None
        self.timed_out: Optional[bool] = None
        self.report: Optional[Dict[str, Any]] = None
        self.stderr_lines: Deque[str] = collections.deque(maxlen=stderr_lines)

    def __aiter__(self) -> "ExecStream":
        return self

    async def __anext__(self) -> str:
        if self._finished:
            raise StopAsyncIteration
        try:
            if self._process is None:
                await self._start()
            while True:
                event = await self._next_event()
                if event is None:
                    await self._end()
                    raise StopAsyncIteration
                stream = event.get("stream")
                if stream == "stdout":
                    return str(event.get("line", ""))
                if stream == "stderr":
                    self.stderr_lines.append(str(event.get("line", "")))
                elif "exit" in event:
                    self._take_report(event)
                else:
                    raise ProtocolError(f"airlock sandbox exec: unexpected event {event!r}")
        except StopAsyncIteration:
            raise
        except BaseException:
            if not self._finished:
                await self._stop()
            raise

    async def aclose(self) -> None:
        """Stops the command if it still runs (as a cancellation does)."""
        if not self._finished and self._process is not None:
            await self._stop()
        self._finished = True

    def __del__(self) -> None:
        # Abandoned mid-way without aclose() (a `break` out of the loop): stop the command as
        # a cancellation would. airlock is told at once; reaping it is left to a task, as
        # asyncio does for async generators.
        process = self._process
        if process is None or self._finished or process.returncode is not None:
            return
        try:
            process.send_signal(signal.SIGTERM)
        except (ProcessLookupError, OSError):
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(lambda: loop.create_task(self._stop()))
            except RuntimeError:
                pass

    @property
    def pid(self) -> Optional[int]:
        """The process ID of the ``airlock sandbox exec`` process (not of the command)."""
        return self._process.pid if self._process is not None else None

    async def _start(self) -> None:
        sandbox = self._sandbox
        self._loop = asyncio.get_running_loop()
        self._process = await asyncio.create_subprocess_exec(
            sandbox.binary,
            *self._arguments,
            stdin=asyncio.subprocess.PIPE if self._stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=sandbox._cli_environment(),
            limit=_EVENT_LIMIT,
            # Signals of the orchestrator's terminal reach this process, which stops the
            # command itself (below); they do not hit the CLI on their own.
            start_new_session=True,
        )
        # The helpers hold the process, not this object, so that an abandoned stream can
        # be collected (and stop its command, see __del__).
        assert self._process.stderr is not None
        self._helpers.append(asyncio.ensure_future(_collect(self._process.stderr, self._cli_stderr)))
        if self._stdin is not None:
            assert self._process.stdin is not None
            self._helpers.append(asyncio.ensure_future(_feed(self._process.stdin, self._stdin)))

    async def _next_event(self) -> Optional[Dict[str, Any]]:
        assert self._process is not None and self._process.stdout is not None
        try:
            raw = await self._process.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError) as error:
            raise ProtocolError(f"airlock sandbox exec: an event longer than {_EVENT_LIMIT} bytes") from error
        if not raw:
            return None
        try:
            event = json.loads(raw)
        except ValueError as error:
            raise ProtocolError(f"airlock sandbox exec: not a JSON event: {raw[:200]!r}") from error
        if not isinstance(event, dict):
            raise ProtocolError(f"airlock sandbox exec: not a JSON object: {raw[:200]!r}")
        return event

    def _take_report(self, event: Dict[str, Any]) -> None:
        # Reports of airlock versions before the field existed have the version 1 shape.
        version = event.get("protocol", 1)
        if version != PROTOCOL_VERSION:
            raise ProtocolError(
                f"airlock sandbox exec speaks protocol version {version!r}; this package "
                f"knows version {PROTOCOL_VERSION} (install matching versions)"
            )
        exit_code = event.get("exit")
        if not isinstance(exit_code, int):
            raise ProtocolError(f"airlock sandbox exec: exit report without a status: {event!r}")
        self.exit_code = exit_code
        self.timed_out = bool(event.get("timed_out", False))
        self.report = event

    async def _end(self) -> None:
        """The output ended: waits for airlock and raises its error if there was no report."""
        process = self._process
        assert process is not None
        status: Optional[int]
        try:
            status = await asyncio.wait_for(process.wait(), _STOP_GRACE)
            await asyncio.wait_for(asyncio.gather(*self._helpers), _STOP_GRACE)
        except asyncio.TimeoutError:
            await _kill_and_reap(process)
            status = process.returncode
        finally:
            self._finished = True
        if self.exit_code is None:
            raise _failure(_airlock_message(bytes(self._cli_stderr)), status, [self._sandbox.binary, *self._arguments])

    async def _stop(self) -> None:
        """Stops the command: airlock kills it (and its descendants) in the sandbox on
        SIGTERM; its remaining output is read and dropped until it ends."""
        self._finished = True
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

        async def drain() -> None:
            assert process is not None and process.stdout is not None
            while await process.stdout.read(65536):
                pass
            await process.wait()

        try:
            await asyncio.wait_for(drain(), _STOP_GRACE)
        except asyncio.TimeoutError:
            await _kill_and_reap(process)
        finally:
            for helper in self._helpers:
                helper.cancel()


class Sandbox:
    """A named airlock sandbox: a confinement whose only way out is airlock's proxy, with
    the real secrets held by airlock's daemon outside it.

    ``policy``: a policy file (or several), as ``--policy`` (``FORMAT:FILE`` allowed).
    ``allow``: ``--allow`` rules. ``secrets``: ``--secret`` specs (``NAME@HOST,...``: the real
    value comes from the variable NAME of ``secret_env``, else of this process's environment).
    ``backend``: ``"local"`` (namespaces, no root) or ``"docker"`` (needs ``image``).
    ``workspace``: a repository (path or URL) cloned into the sandbox's private workspace;
    commands start in its worktree (on ``branch``, default ``airlock/NAME``).

    ``mode``: ``"enforce"`` (the default) or ``"report"`` (requests refused only for host,
    method or path pass and are logged as would-deny; credentials stay enforced).

    Keyword-only extras: ``resolve`` (``HOST:ADDR`` pins), ``upstream_ca`` (CA files),
    ``memory_mib``/``cpus``/``pids`` (limits), ``state_dir`` (airlock's sandbox directory,
    ``AIRLOCK_SANDBOX_DIR``), ``binary`` (the ``airlock`` executable).
    """

    def __init__(
        self,
        name: str,
        *,
        policy: Optional[Union[PathLike, Sequence[PathLike]]] = None,
        allow: Sequence[str] = (),
        secrets: Sequence[str] = (),
        backend: Literal["local", "docker"] = "local",
        mode: Literal["enforce", "report"] = "enforce",
        image: Optional[str] = None,
        workspace: Optional[PathLike] = None,
        branch: Optional[str] = None,
        resolve: Sequence[str] = (),
        upstream_ca: Sequence[PathLike] = (),
        secret_env: Optional[Mapping[str, str]] = None,
        memory_mib: Optional[int] = None,
        cpus: Optional[float] = None,
        pids: Optional[int] = None,
        state_dir: Optional[PathLike] = None,
        binary: Optional[PathLike] = None,
    ) -> None:
        if backend not in ("local", "docker"):
            raise ValueError(f"backend must be 'local' or 'docker', not {backend!r}")
        if backend == "docker" and not image:
            raise ValueError("the docker backend needs an image")
        if mode not in ("enforce", "report"):
            raise ValueError(f"mode must be 'enforce' or 'report', not {mode!r}")
        for kind, values in (("allow", allow), ("secrets", secrets), ("resolve", resolve)):
            if isinstance(values, str):
                raise TypeError(f"{kind} takes a sequence of strings, not one string")
        self.name = name
        if policy is None:
            self.policies: List[str] = []
        elif isinstance(policy, (str, os.PathLike)):
            self.policies = [os.fspath(policy)]
        else:
            self.policies = [os.fspath(p) for p in policy]
        self.allow = list(allow)
        self.secrets = list(secrets)
        self.backend = backend
        self.mode = mode
        self.image = image
        self.workspace = os.fspath(workspace) if workspace is not None else None
        self.branch = branch
        self.resolve = list(resolve)
        self.upstream_ca = [os.fspath(p) for p in upstream_ca]
        self.memory_mib = memory_mib
        self.cpus = cpus
        self.pids = pids
        self.state_dir = os.fspath(state_dir) if state_dir is not None else None
        self.binary = find_binary(binary)
        self._secret_env = dict(secret_env or {})
        self._lock: Optional[Tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = None

    def __repr__(self) -> str:
        return f"Sandbox({self.name!r}, backend={self.backend!r})"

    # The SandboxProvider protocol.

    async def ensure_running(self) -> None:
        """Creates the sandbox unless it is running already (then nothing changes; its
        options are not compared). Returns once commands can run. Raises
        :class:`SandboxDead` for a sandbox of this name whose daemon is gone (``teardown``
        it first) and :class:`CommandFailed` when airlock cannot create it (nothing is
        left behind then)."""
        async with self._locked():
            entry = await self._entry()
            failure: Optional[AirlockError] = None
            if entry is None:
                status, _, stderr = await self._airlock(
                    self._create_arguments(), timeout=_CREATE_TIMEOUT, with_secrets=True
                )
                if status == 0:
                    return
                failure = _failure(_airlock_message(stderr), status, ["airlock", "sandbox", "create", self.name])
                # Someone else (another process) may be creating it meanwhile.
                entry = await self._entry()
                if entry is None:
                    raise failure
            # Another creator's sandbox may still be starting: wait for it (bounded).
            loop = asyncio.get_running_loop()
            deadline = loop.time() + _CREATE_TIMEOUT
            while entry is not None and entry.get("status") == "starting" and loop.time() < deadline:
                await asyncio.sleep(0.2)
                entry = await self._entry()
            if entry is not None and entry.get("status") == "running":
                return
            if entry is None and failure is not None:
                raise failure
            self._check_running(entry or {"status": "gone", "reason": "removed while starting"})

    def exec_stream(
        self,
        command: Command,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[Union[bytes, str]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> ExecStream:
        """Runs ``command`` in the sandbox; iterate the result for its standard output lines
        (without newline) as they come. ``stdin`` (bytes, or str as UTF-8) is given on
        standard input, then closed; ``cwd`` and ``env`` apply to this command only;
        ``timeout`` (seconds) kills the command and its descendants (status 124).

        A command that cannot be found is not an exception: the stream ends and
        ``exit_code`` is 127. Cancelling the consuming task kills the command."""
        return ExecStream(self, self._exec_arguments(command, cwd, env, stdin, timeout), _stdin_bytes(stdin))

    async def exec(
        self,
        command: Command,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[Union[bytes, str]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Runs ``command`` to its end and returns its status and whole output."""
        stream = ExecStream(
            self,
            self._exec_arguments(command, cwd, env, stdin, timeout),
            _stdin_bytes(stdin),
            stderr_lines=None,
        )
        stdout = [line async for line in stream]
        assert stream.exit_code is not None and stream.report is not None
        return ExecResult(
            exit_code=stream.exit_code,
            stdout="".join(line + "\n" for line in stdout),
            stderr="".join(line + "\n" for line in stream.stderr_lines),
            timed_out=bool(stream.timed_out),
            report=stream.report,
        )

    async def teardown(self) -> None:
        """Stops the sandbox and removes everything it made (daemon, confinement, listeners,
        workspace, state). Idempotent: a sandbox that does not exist is not an error."""
        async with self._locked():
            if await self._entry() is None:
                return
            status, _, stderr = await self._airlock(["sandbox", "rm", self.name], timeout=_QUICK_TIMEOUT)
            if status != 0 and await self._entry() is not None:
                raise _failure(_airlock_message(stderr), status, ["airlock", "sandbox", "rm", self.name])

    async def health_check(self) -> bool:
        """Whether the sandbox's daemon and confinement are alive (one ``airlock sandbox ls``;
        never raises for a sandbox that is missing or broken)."""
        try:
            entry = await self._entry()
        except AirlockError:
            return False
        return entry is not None and entry.get("status") == "running"

    async def info(self) -> Optional[Dict[str, Any]]:
        """This sandbox's line of ``airlock sandbox ls --json`` (``status``, ``workdir``,
        ``branch``, ...), or ``None`` when it does not exist."""
        return await self._entry()

    # Plumbing.

    def _locked(self) -> asyncio.Lock:
        # One lock per event loop: a Sandbox may outlive the loop it was first used in.
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    def _check_running(self, entry: Dict[str, Any]) -> None:
        status = entry.get("status")
        if status == "running":
            return
        reason = entry.get("reason") or status
        raise SandboxDead(
            f"airlock: sandbox {self.name} is {status} ({reason}); tear it down to start it again"
        )

    def _create_arguments(self) -> List[str]:
        arguments = ["sandbox", "create", self.name, "--provider", self.backend, "--mode", self.mode]
        for policy in self.policies:
            arguments += ["--policy", policy]
        for rule in self.allow:
            arguments += ["--allow", rule]
        for spec in self.secrets:
            arguments += ["--secret", spec]
        for pin in self.resolve:
            arguments += ["--resolve", pin]
        for ca in self.upstream_ca:
            arguments += ["--upstream-ca", ca]
        if self.image is not None:
            arguments += ["--image", self.image]
        if self.workspace is not None:
            arguments += ["--repo", self.workspace]
            if self.branch is not None:
                arguments += ["--branch", self.branch]
        if self.memory_mib is not None:
            arguments += ["--memory", str(self.memory_mib)]
        if self.cpus is not None:
            arguments += ["--cpus", str(self.cpus)]
        if self.pids is not None:
            arguments += ["--pids", str(self.pids)]
        return arguments

    def _exec_arguments(
        self,
        command: Command,
        cwd: Optional[PathLike],
        env: Optional[Mapping[str, str]],
        stdin: Optional[Union[bytes, str]],
        timeout: Optional[float],
    ) -> List[str]:
        argv = _argv_of(command)
        arguments = ["sandbox", "exec", self.name, "--json"]
        if cwd is not None:
            arguments += ["--cwd", os.fspath(cwd)]
        for key, value in (env or {}).items():
            if not key or "=" in key:
                raise ValueError(f"not an environment variable name: {key!r}")
            arguments += ["--env", f"{key}={value}"]
        if timeout is not None:
            if not timeout > 0:
                raise ValueError("timeout must be a positive number of seconds")
            arguments += ["--timeout", repr(float(timeout))]
        if stdin is not None:
            arguments.append("--stdin")
        return arguments + ["--"] + argv

    def _cli_environment(self, with_secrets: bool = False) -> Dict[str, str]:
        environment = dict(os.environ)
        if with_secrets:
            environment.update(self._secret_env)
        if self.state_dir is not None:
            environment["AIRLOCK_SANDBOX_DIR"] = self.state_dir
        return environment

    async def _airlock(
        self, arguments: List[str], *, timeout: float, with_secrets: bool = False
    ) -> Tuple[Optional[int], bytes, bytes]:
        """Runs a short airlock command: (status, stdout, stderr); killed after ``timeout``."""
        process = await asyncio.create_subprocess_exec(
            self.binary,
            *arguments,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._cli_environment(with_secrets),
            start_new_session=True,
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        except asyncio.TimeoutError:
            await _kill_and_reap(process)
            raise CommandFailed(
                f"airlock {' '.join(arguments[:2])} did not finish within {timeout:.0f} s",
                exit_status=None,
                argv=[self.binary, *arguments],
            ) from None
        except BaseException:
            await _kill_and_reap(process)
            raise
        return process.returncode, stdout, stderr

    async def _entry(self) -> Optional[Dict[str, Any]]:
        status, stdout, stderr = await self._airlock(["sandbox", "ls", "--json"], timeout=_QUICK_TIMEOUT)
        if status != 0:
            raise _failure(_airlock_message(stderr), status, ["airlock", "sandbox", "ls", "--json"])
        for raw in stdout.splitlines():
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except ValueError as error:
                raise ProtocolError(f"airlock sandbox ls: not a JSON line: {raw[:200]!r}") from error
            if not isinstance(entry, dict):
                raise ProtocolError(f"airlock sandbox ls: not a JSON object: {raw[:200]!r}")
            version = entry.get("protocol", 1)
            if version != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"airlock sandbox ls speaks protocol version {version!r}; this package "
                    f"knows version {PROTOCOL_VERSION}"
                )
            if entry.get("name") == self.name:
                return entry
        return None
