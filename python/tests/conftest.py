"""Fixtures for the airlock Python package tests: the real `airlock` binary (the one the
package finds: installed with the wheel, or AIRLOCK_BIN), a private sandbox state
directory, a loopback TLS upstream signed by a test CA, and `airlock proxy` daemons with
their admin API. Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Coroutine, Dict, Iterator, List, Optional, TypeVar

import pytest

import airlock

T = TypeVar("T")

# Every wait in these tests is bounded by this many seconds.
DEADLINE = 30.0


def run(coroutine: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
    """Runs a coroutine to its end in a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def skip_or_fail(why: str) -> None:
    """A test that cannot run what it tests: skipped (saying why), or failed when
    AIRLOCK_TEST_REQUIRE is set to anything but empty or 0 (.ci/run sets it: in CI a test
    that checks nothing must not pass). `why` names what is missing and how to provide it."""
    if os.environ.get("AIRLOCK_TEST_REQUIRE", "") not in ("", "0"):
        pytest.fail(f"this test cannot run here: {why} (AIRLOCK_TEST_REQUIRE is set)", pytrace=False)
    pytest.skip(why)


def namespaces_available() -> bool:
    """Whether unprivileged user namespaces work here (the local backend needs them)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return True  # cannot tell; let airlock say
    probe = subprocess.run([unshare, "--user", "--net", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def binary() -> str:
    path = airlock.find_binary()
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    print(f"airlock binary: {path} ({version.stdout.strip()})")
    return path


@pytest.fixture(scope="session")
def state_dir(binary: str) -> Iterator[str]:
    """A private AIRLOCK_SANDBOX_DIR (short, so socket paths stay short); at the end no
    sandbox may remain in it."""
    if not namespaces_available():
        skip_or_fail("unprivileged user namespaces are not available (sysctl kernel.unprivileged_userns_clone=1)")
    directory = tempfile.mkdtemp(prefix="alpy-", dir="/tmp")
    yield directory
    listed = subprocess.run(
        [binary, "sandbox", "ls", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AIRLOCK_SANDBOX_DIR": directory},
    )
    leftovers = [json.loads(line)["name"] for line in listed.stdout.splitlines() if line.strip()]
    if leftovers:
        subprocess.run(
            [binary, "sandbox", "rm", *leftovers],
            timeout=120,
            env={**os.environ, "AIRLOCK_SANDBOX_DIR": directory},
        )
    shutil.rmtree(directory, ignore_errors=True)
    assert not leftovers, f"sandboxes left behind: {leftovers}"


class Pki:
    """A test CA and a server certificate for `allowed.test`, made with openssl."""

    def __init__(self, directory: Path) -> None:
        self.ca_cert = directory / "ca.pem"
        self.server_cert = directory / "server.pem"
        self.server_key = directory / "server.key"
        ca_key = directory / "ca.key"
        request = directory / "server.csr"
        extensions = directory / "server.ext"
        openssl = shutil.which("openssl")
        if openssl is None:
            skip_or_fail("openssl is needed to make the test certificates (apt-get install openssl)")

        def do(*arguments: str) -> None:
            subprocess.run([openssl, *arguments], check=True, capture_output=True, timeout=30)

        do("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(self.ca_cert),
           "-days", "2", "-subj", "/CN=airlock python test CA",
           "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        do("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.server_key), "-out", str(request),
           "-subj", "/CN=allowed.test")
        extensions.write_text(
            "basicConstraints=CA:FALSE\nsubjectAltName=DNS:allowed.test\nextendedKeyUsage=serverAuth\n"
        )
        do("x509", "-req", "-in", str(request), "-CA", str(self.ca_cert), "-CAkey", str(ca_key),
           "-CAcreateserial", "-out", str(self.server_cert), "-days", "2", "-extfile", str(extensions))


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


class _EchoHandler(http.server.BaseHTTPRequestHandler):
    #: The Authorization headers of every POST received (the example's LLM calls).
    authorizations: List[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(min(length, 1 << 20))
        _EchoHandler.authorizations.append(self.headers.get("Authorization", ""))
        body = json.dumps({"path": self.path, "choices": [{"message": {"content": "do it"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        body = f"upstream saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def tls_upstream(pki: Pki) -> Iterator[int]:
    """An HTTPS server on 127.0.0.1 (a free port) for `allowed.test`; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def sandbox(state_dir: str, pki: Pki, tls_upstream: int) -> Iterator[airlock.Sandbox]:
    """One running local sandbox per test module; it may reach allowed.test:PORT only."""
    box = airlock.Sandbox(
        f"py-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}",
        allow=[f"allowed.test:{tls_upstream}"],
        resolve=["allowed.test:127.0.0.1"],
        upstream_ca=[str(pki.ca_cert)],
        state_dir=state_dir,
    )
    run(box.ensure_running())
    yield box
    run(box.teardown())


class AdminProxy:
    """A running `airlock proxy` with its admin API."""

    def __init__(self, binary: str, arguments: List[str]) -> None:
        self.process = subprocess.Popen(
            [binary, "proxy", "--listen", "127.0.0.1:0", *arguments],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.admin: Optional[str] = None
        self.listen: Optional[str] = None
        self.stderr: List[str] = []
        deadline = time.monotonic() + DEADLINE
        assert self.process.stderr is not None
        while self.listen is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.stderr.append(line)
            if "admin API listening on " in line:
                self.admin = line.split("admin API listening on ", 1)[1].strip()
            if "proxy listening on " in line and "admin" not in line:
                self.listen = line.split("proxy listening on ", 1)[1].strip()
        if self.admin is None or self.listen is None:
            self.stop()
            raise AssertionError(f"airlock proxy did not start: {''.join(self.stderr)}")
        # Keep reading its standard error so that it never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if len(self.stderr) < 1000:
                self.stderr.append(line)

    def refused_request(self, host: str, path: str = "/") -> Dict[str, Any]:
        """Sends `GET http://HOST/PATH` through the proxy; returns the 403 body."""
        import http.client

        address, port = self.listen.rsplit(":", 1) if self.listen else ("", "0")
        connection = http.client.HTTPConnection(address, int(port), timeout=DEADLINE)
        try:
            connection.request("GET", f"http://{host}{path}", headers={"Host": host})
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        assert response.status == 403, (response.status, body)
        return json.loads(body)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=DEADLINE)


@pytest.fixture
def unix_proxy(binary: str, tmp_path: Path) -> Iterator[AdminProxy]:
    directory = Path(tempfile.mkdtemp(prefix="alpy-adm-", dir="/tmp"))
    proxy = AdminProxy(binary, ["--admin", f"unix:{directory}/admin.sock", "--allow", "allowed.test"])
    yield proxy
    proxy.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def tcp_proxy(binary: str, tmp_path: Path) -> Iterator[AdminProxy]:
    token = tmp_path / "token"
    token.write_text("s3cret-admin-token\n")
    token.chmod(0o600)
    proxy = AdminProxy(
        binary, ["--admin", "127.0.0.1:0", "--admin-token-file", str(token), "--allow", "allowed.test"]
    )
    yield proxy
    proxy.stop()
