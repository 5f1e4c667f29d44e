#!/usr/bin/env python3
"""Soak and fault suite for `airlock proxy` (docs/reliability.md, "Soak and fault suite").

Run it through bench/soak/run.sh, which raises the descriptor limit, makes a private work
directory, installs h2 into a venv of its own and unmounts the audit tmpfs on any exit.

    bench/soak/run.sh [--bin target/release/airlock] [--only a,b,...] [--json FILE]

Every scenario starts its own proxy (a fresh process, its own policy and audit log) in
front of loopback TLS and plain-HTTP upstreams this script serves itself (a subprocess:
`soak.py upstream ...`), drives it, samples the proxy's open descriptors and resident
memory every 50 ms, stops it and reports one row: requests served, requests lost (failed
that should not have), peak RSS (VmHWM from /proc/PID/status), peak open descriptors.

Scenarios:
  a  10,000 concurrent client connections from 20 loopback addresses
  b  slowloris heads and bodies (inspected json_deny path), body_timeout 5s, under load
  c  HTTP/2 stream flood: GET streams, rapid reset (HEADERS+RST_STREAM), half-sent
     inspected bodies on every stream with buffer_memory 64MiB
  d  upstream resets (RST) and closes (FIN) mid-body
  e  policy replaced 100 times through PUT /v1/policy and 100 times by SIGHUP under load
  f  audit log on a 1 MiB tmpfs that fills up, one client; then freed: service returns
  g  the same with 8 concurrent clients

Loopback only. Every loop is bounded in count and time.
"""
import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

HOST = "soak.test"
HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- PKI (openssl)

def run(cmd, **kw):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=60, **kw)


def make_ca(d, name, cn):
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.crt", "-days", "30",
         "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"])
    os.chmod(f"{d}/{name}.key", 0o600)


def make_pki(d):
    os.makedirs(d, exist_ok=True)
    make_ca(d, "upstream-ca", "soak upstream CA")
    make_ca(d, "proxy-ca", "soak proxy CA")
    run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", f"{d}/upstream.key", "-out", f"{d}/upstream.csr",
         "-subj", f"/CN={HOST}"])
    with open(f"{d}/upstream.ext", "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n"
                f"subjectAltName=DNS:{HOST},DNS:localhost,IP:127.0.0.1\n")
    run(["openssl", "x509", "-req", "-in", f"{d}/upstream.csr", "-CA", f"{d}/upstream-ca.crt",
         "-CAkey", f"{d}/upstream-ca.key", "-CAcreateserial", "-days", "30", "-sha256",
         "-extfile", f"{d}/upstream.ext", "-out", f"{d}/upstream.crt"])
    return d


# ---------------------------------------------------------------- HTTP/1.1 helpers

class HttpError(Exception):
    pass


async def read_head(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return parts, headers


async def read_body(reader, headers, limit=16 << 20):
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while len(out) <= limit:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)
        raise HttpError("chunked body too large")
    return b""


async def read_response(reader):
    parts, headers = await read_head(reader)
    status = int(parts[1])
    body = await read_body(reader, headers)
    return status, headers, body


def get_request(path, host_port, absolute=False, close=False):
    target = f"http://{host_port}{path}" if absolute else path
    return (f"GET {target} HTTP/1.1\r\nHost: {host_port}\r\n"
            + ("Connection: close\r\n" if close else "") + "\r\n").encode()


# ---------------------------------------------------------------- upstream (subprocess)

async def upstream_handler(reader, writer):
    try:
        while True:
            try:
                parts, headers = await read_head(reader)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            await read_body(reader, headers)
            path = parts[1].split("?")[0]
            if path.startswith("http"):
                path = "/" + path.split("/", 3)[-1]
            if path in ("/reset", "/close"):
                total = 200_000
                writer.transport.set_write_buffer_limits(0)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\n\r\n" % total + b"x" * (total // 2))
                await writer.drain()
                await asyncio.sleep(0.05)
                if path == "/reset":
                    sock = writer.get_extra_info("socket")
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        struct.pack("ii", 1, 0))
                    except OSError:
                        pass
                    writer.transport.abort()
                else:
                    writer.close()
                return
            if path == "/slow":
                await asyncio.sleep(5)
            body = b"ok\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
    except (ConnectionError, OSError, asyncio.IncompleteReadError, ssl.SSLError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def upstream_main(args):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)
    ctx.set_alpn_protocols(["http/1.1"])
    tls = await asyncio.start_server(upstream_handler, "127.0.0.1", 0, ssl=ctx, backlog=4096,
                                     limit=1 << 16)
    plain = await asyncio.start_server(upstream_handler, "127.0.0.1", 0, backlog=4096,
                                       limit=1 << 16)
    print("ready %d %d" % (tls.sockets[0].getsockname()[1], plain.sockets[0].getsockname()[1]),
          flush=True)
    # Ends when the parent closes stdin (or dies).
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    os._exit(0)


class Upstream:
    def __init__(self, pki):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "upstream",
             "--cert", f"{pki}/upstream.crt", "--key", f"{pki}/upstream.key"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError("upstream did not start")
        self.tls_port, self.plain_port = int(line[1]), int(line[2])

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(5)
        except Exception:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- the proxy under test

def die_with_parent():
    """In the child before exec: SIGTERM when this script dies (PR_SET_PDEATHSIG)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def proc_status(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def sockets_of(proxy):
    """The proxy's TCP sockets by role: `client` (accepted on its port), `upstream` (to the
    soak upstreams), `listen`, `other` (from `ss`)."""
    out = subprocess.run(["ss", "-tanpH"], capture_output=True, text=True, timeout=10).stdout
    ups = {str(proxy.ctx.up.tls_port), str(proxy.ctx.up.plain_port)}
    roles = {}
    for line in out.splitlines():
        if f"pid={proxy.pid}," not in line:
            continue
        f = line.split()
        state, local, peer = f[0], f[3], f[4]
        if state == "LISTEN":
            role = "listen"
        elif local.rsplit(":", 1)[1] == str(proxy.port):
            role = "client"
        elif peer.rsplit(":", 1)[1] in ups:
            role = "upstream"
        else:
            role = "other"
        roles[role] = roles.get(role, 0) + 1
    return roles


class Proxy:
    """`airlock proxy` with the soak PKI, an audit log and a policy file; monitored."""

    def __init__(self, ctx, name, policy, log=None, extra=()):
        self.ctx = ctx
        self.dir = os.path.join(ctx.work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.policy_path = os.path.join(self.dir, "policy.yaml")
        with open(self.policy_path, "w") as f:
            f.write(policy)
        self.log = log or os.path.join(self.dir, "audit.jsonl")
        self.stderr_path = os.path.join(self.dir, "stderr.txt")
        pki = ctx.pki
        cmd = [ctx.bin, "proxy", "--listen", "127.0.0.1:0", "--policy", self.policy_path,
               "--log", self.log, "--ca-cert", f"{pki}/proxy-ca.crt",
               "--ca-key", f"{pki}/proxy-ca.key", "--upstream-ca", f"{pki}/upstream-ca.crt",
               "--resolve", f"{HOST}:127.0.0.1", *extra]
        env = dict(os.environ, AIRLOCK_HOME=os.path.join(self.dir, "home"))
        env.pop("RUST_LOG", None)
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, env=env, preexec_fn=die_with_parent)
        ctx.proxies.append(self)
        self.pid = self.proc.pid
        self.port = self.admin = None
        deadline = time.time() + 20
        while time.time() < deadline and self.port is None:
            with open(self.stderr_path) as f:
                for line in f:
                    if "admin API listening on " in line:
                        self.admin = line.rsplit(" ", 1)[1].strip()
                    if "proxy listening on " in line:
                        self.port = int(line.rsplit(":", 1)[1])
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("proxy did not start: " + open(self.stderr_path).read()[-2000:])
        self.peak_fds = fd_count(self.pid)
        self.peak_rss = proc_status(self.pid, "VmRSS")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._monitor, daemon=True)
        self._thread.start()

    def _monitor(self):
        while not self._stop.wait(0.05):
            if self.proc.poll() is not None:
                return
            self.peak_fds = max(self.peak_fds, fd_count(self.pid))
            self.peak_rss = max(self.peak_rss, proc_status(self.pid, "VmRSS"))

    def alive(self):
        return self.proc.poll() is None

    def fds(self):
        return fd_count(self.pid)

    def hwm_mib(self):
        return proc_status(self.pid, "VmHWM") / 1024

    def stop(self):
        if self.proc.returncode is not None and self.stderr.closed:
            return self.peak_rss_mib()
        if hasattr(self, "_stop"):
            self._stop.set()
        hwm = self.hwm_mib() if self.alive() else self.peak_rss_mib()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        return hwm

    def peak_rss_mib(self):
        return self.peak_rss / 1024

    def audit_lines(self):
        lines = []
        try:
            with open(self.log, errors="replace") as f:
                for line in f:
                    try:
                        lines.append(json.loads(line))
                    except ValueError:
                        lines.append({"unparsable": line[:200]})
        except OSError:
            pass
        return lines


def policy_yaml(ctx, limits=None, json_deny=False, extra_rules=""):
    rule = (f"    - host: {HOST}\n      ports: [{ctx.up.tls_port}, {ctx.up.plain_port}]\n")
    if json_deny:
        rule += "      json_deny:\n        - path: /tools/*/type\n          values: [web_search]\n"
    return ("version: 1\ndlp: {credentials: off}\n"
            + (f"limits: {limits}\n" if limits else "")
            + "network:\n  allow:\n" + rule + extra_rules)


# ---------------------------------------------------------------- clients

def client_tls(ctx, alpn=("http/1.1",)):
    c = ssl.create_default_context(cafile=f"{ctx.pki}/proxy-ca.crt")
    c.set_alpn_protocols(list(alpn))
    return c


async def open_tunnel(proxy, port, tls, src=None, timeout=10):
    async def go():
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", proxy.port, local_addr=(src, 0) if src else None, limit=1 << 20)
        writer.write(f"CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
        parts, _ = await read_head(reader)
        if parts[1] != "200":
            writer.close()
            raise HttpError("CONNECT " + parts[1])
        await writer.start_tls(tls, server_hostname=HOST)
        return reader, writer
    return await asyncio.wait_for(go(), timeout)


class Load:
    """Allowed GETs sent continuously until stopped: `keep` workers reuse one TLS tunnel
    each, `fresh` workers open a new connection per request (alternately a CONNECT tunnel
    and a plain absolute-form request), `h2` workers keep 10 HTTP/2 streams in flight on
    one connection. Every failure counts as lost."""

    def __init__(self, ctx, proxy, keep=4, fresh=1, src="127.0.0.1", h2=0):
        self.ctx, self.proxy, self.keep, self.fresh, self.src = ctx, proxy, keep, fresh, src
        self.h2 = h2
        self.h2_served = 0
        self.served = self.lost = 0
        self.errors = {}
        self.stopping = False
        self.tls = client_tls(ctx)

    def fail(self, why):
        self.lost += 1
        self.errors[why] = self.errors.get(why, 0) + 1

    async def keep_worker(self, n):
        up = self.ctx.up
        conn = None
        i = 0
        while not self.stopping:
            i += 1
            try:
                if conn is None:
                    conn = await open_tunnel(self.proxy, up.tls_port, self.tls, self.src)
                reader, writer = conn
                writer.write(get_request(f"/ok?w={n}&i={i}", f"{HOST}:{up.tls_port}"))
                status, _, body = await asyncio.wait_for(read_response(reader), 10)
                if status == 200 and body == b"ok\n":
                    self.served += 1
                else:
                    self.fail(f"status {status}")
                    writer.close()
                    conn = None
            except Exception as e:  # noqa: BLE001 - every failure is a lost request
                self.fail(type(e).__name__)
                if conn:
                    conn[1].close()
                conn = None
                await asyncio.sleep(0.05)
        if conn:
            conn[1].close()

    async def fresh_worker(self, n):
        up = self.ctx.up
        i = 0
        while not self.stopping:
            i += 1
            writer = None
            try:
                if i % 2:
                    reader, writer = await open_tunnel(self.proxy, up.tls_port, self.tls,
                                                       self.src)
                    writer.write(get_request(f"/ok?f={n}&i={i}", f"{HOST}:{up.tls_port}",
                                             close=True))
                else:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(
                        "127.0.0.1", self.proxy.port, local_addr=(self.src, 0)), 10)
                    writer.write(get_request(f"/ok?f={n}&i={i}", f"{HOST}:{up.plain_port}",
                                             absolute=True, close=True))
                status, _, body = await asyncio.wait_for(read_response(reader), 10)
                if status == 200 and body == b"ok\n":
                    self.served += 1
                else:
                    self.fail(f"status {status}")
            except Exception as e:  # noqa: BLE001
                self.fail(type(e).__name__)
                await asyncio.sleep(0.05)
            finally:
                if writer:
                    writer.close()

    async def h2_worker(self, n):
        """One HTTP/2 connection (CONNECT tunnel, ALPN h2) at a time, 10 GET streams in
        flight, each answered before the next batch; reconnects after a failure."""
        import h2.events
        up = self.ctx.up
        authority = f"{HOST}:{up.tls_port}"
        conn = None
        i = 0
        while not self.stopping:
            try:
                if conn is None:
                    conn = await h2_connect(self.ctx, self.proxy, up.tls_port, self.src)
                reader, writer, h2c = conn
                ids = set()
                for _ in range(10):
                    i += 1
                    sid = h2c.get_next_available_stream_id()
                    h2c.send_headers(sid, [(":method", "GET"), (":scheme", "https"),
                                           (":authority", authority),
                                           (":path", f"/ok?h2w={n}&i={i}")], end_stream=True)
                    ids.add(sid)
                writer.write(h2c.data_to_send())
                pending, ok = set(ids), set()
                events = await h2_pump(reader, writer, h2c, lambda e: not pending or any(
                    x == "eof" or isinstance(x, h2.events.ConnectionTerminated) for x in e)
                    or self._h2_done(e, pending, ok), 10)
                for ev in events:
                    if isinstance(ev, h2.events.StreamReset) and ev.stream_id in pending:
                        self.fail(f"h2 reset {ev.error_code!s}")
                        pending.discard(ev.stream_id)
                self.served += len(ok)
                self.h2_served += len(ok)
                for _ in pending:
                    self.fail("h2 no answer")
                if pending or any(x == "eof" or isinstance(x, h2.events.ConnectionTerminated)
                                  for x in events):
                    writer.close()
                    conn = None
            except Exception as e:  # noqa: BLE001
                self.fail("h2 " + type(e).__name__)
                if conn:
                    conn[1].close()
                conn = None
                await asyncio.sleep(0.05)
        if conn:
            conn[1].close()

    @staticmethod
    def _h2_done(events, pending, ok):
        """Moves streams answered 200 with their whole body from `pending` to `ok`."""
        import h2.events
        status = {}
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived):
                status[ev.stream_id] = dict(ev.headers).get(":status")
            if isinstance(ev, h2.events.StreamEnded) and ev.stream_id in pending:
                pending.discard(ev.stream_id)
                if status.get(ev.stream_id) == "200":
                    ok.add(ev.stream_id)
        return not pending

    def start(self):
        self.tasks = [asyncio.ensure_future(self.keep_worker(n)) for n in range(self.keep)]
        self.tasks += [asyncio.ensure_future(self.h2_worker(n)) for n in range(self.h2)]
        self.tasks += [asyncio.ensure_future(self.fresh_worker(n)) for n in range(self.fresh)]

    async def stop(self):
        self.stopping = True
        await asyncio.wait(self.tasks, timeout=15)


async def one_request(ctx, proxy, src="127.0.0.1", timeout=10):
    """One normal request through a fresh CONNECT tunnel: True when 200 ok."""
    try:
        reader, writer = await open_tunnel(proxy, ctx.up.tls_port, client_tls(ctx), src, timeout)
        writer.write(get_request("/ok?single", f"{HOST}:{ctx.up.tls_port}", close=True))
        status, _, body = await asyncio.wait_for(read_response(reader), timeout)
        writer.close()
        return status == 200 and body == b"ok\n"
    except Exception:  # noqa: BLE001
        return False


def row(name, served, lost, proxy, hwm, notes, ok):
    return {"scenario": name, "served": served, "lost": lost, "peak_rss_mib": round(hwm, 1),
            "peak_fds": proxy.peak_fds, "notes": notes, "ok": ok}


# ---------------------------------------------------------------- a. 10,000 connections

async def scenario_a(ctx):
    proxy = Proxy(ctx, "a", policy_yaml(ctx))
    up = ctx.up
    total, sources = 10_000, 20
    baseline_fds = proxy.fds()
    counts = {"served": 0, "closed_at_accept": 0, "connect_failed": 0, "failed_after_accept": 0}
    held = []
    sem = asyncio.Semaphore(400)
    release = asyncio.Event()

    async def conn(i):
        src = f"127.0.0.{2 + i % sources}"
        async with sem:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", proxy.port, local_addr=(src, 0)), 20)
            except Exception:  # noqa: BLE001
                counts["connect_failed"] += 1
                return
            try:
                writer.write(get_request(f"/ok?c={i}", f"{HOST}:{up.plain_port}", absolute=True))
                status, _, _ = await asyncio.wait_for(read_response(reader), 30)
                counts["served" if status == 200 else "failed_after_accept"] += 1
            except (asyncio.IncompleteReadError, ConnectionError):
                # No byte of an answer: the proxy closed it at accept (over its cap).
                counts["closed_at_accept"] += 1
                writer.close()
                return
            except Exception:  # noqa: BLE001
                counts["failed_after_accept"] += 1
                writer.close()
                return
        held.append(writer)
        await release.wait()
        writer.close()

    started = time.time()
    tasks = [asyncio.ensure_future(conn(i)) for i in range(total)]
    # All 10,000 attempted (bounded): wait until none is connecting or answered.
    deadline = time.time() + 120
    while time.time() < deadline:
        done = sum(counts.values())
        if done >= total:
            break
        await asyncio.sleep(0.2)
    opened_s = time.time() - started
    during = await one_request(ctx, proxy, "127.0.1.1", 5)
    fds_held = proxy.fds()
    release.set()
    await asyncio.wait(tasks, timeout=30)
    await asyncio.sleep(1)
    after = await one_request(ctx, proxy, "127.0.1.1")
    after_fds = proxy.fds()
    # The per-address cap: 600 connections from one address (connections_per_client 512).
    one = {"held": 0, "closed": 0}
    writers = []

    async def single(i):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", proxy.port, local_addr=("127.0.1.2", 0)),
                20)
        except Exception:  # noqa: BLE001
            one["closed"] += 1
            return
        writers.append(writer)
        try:
            writer.write(get_request(f"/ok?s={i}", f"{HOST}:{up.plain_port}", absolute=True))
            status, _, _ = await asyncio.wait_for(read_response(reader), 30)
            one["held" if status == 200 else "closed"] += 1
        except Exception:  # noqa: BLE001
            one["closed"] += 1

    await asyncio.wait([asyncio.ensure_future(single(i)) for i in range(600)], timeout=60)
    other = await one_request(ctx, proxy, "127.0.1.3")
    for w in writers:
        w.close()
    await asyncio.sleep(1)
    after_one = await one_request(ctx, proxy, "127.0.1.2")
    alive = proxy.alive()
    hwm = proxy.stop()
    c = counts
    lost = c["failed_after_accept"] + (0 if after else 1) + (0 if other else 1) \
        + (0 if after_one else 1)
    notes = (f"{total} conns from {sources} addresses in {opened_s:.0f}s: {c['served']} served "
             f"and held, {c['closed_at_accept']} closed at accept, {c['connect_failed']} "
             f"connect failed; fds {baseline_fds} idle, {fds_held} while held, {after_fds} "
             f"after; request while full: {'ok' if during else 'refused (cap)'}; "
             f"request after: {'ok' if after else 'FAILED'}; then 600 conns from one address: "
             f"{one['held']} served and held, {one['closed']} closed at accept, a request "
             f"from another address meanwhile {'ok' if other else 'FAILED'}, from the same "
             f"address after {'ok' if after_one else 'FAILED'}")
    served = c["served"] + one["held"] + int(after) + int(other) + int(after_one)
    return row("a. 10,000 concurrent connections", served, lost, proxy, hwm, notes,
               alive and lost == 0)


# ---------------------------------------------------------------- b. slowloris

async def scenario_b(ctx):
    proxy = Proxy(ctx, "b", policy_yaml(ctx, "{body_timeout: 5s}", json_deny=True))
    up = ctx.up
    tls = client_tls(ctx)
    load = Load(ctx, proxy, keep=4, fresh=1)
    load.start()
    kinds = (("head", 100), ("connect_head", 50), ("head_tls", 50), ("after_connect", 50),
             ("body", 200), ("body_tls", 50))
    results = {k: [] for k, _ in kinds}

    async def slow(kind, i):
        started = time.time()
        outcome = "held"
        writer = None
        try:
            src = f"127.0.2.{1 + i % 50}"
            if kind in ("body_tls", "head_tls"):
                reader, writer = await open_tunnel(proxy, up.tls_port, tls, src)
                port = up.tls_port
            else:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", proxy.port, local_addr=(src, 0))
                port = up.plain_port
            target = (f"http://{HOST}:{port}/v1" if kind in ("head", "body") else "/v1")
            body = b""
            if kind in ("head", "head_tls"):
                data = f"GET {target} HTTP/1.1\r\nHost: {HOST}:{port}\r\nX-Slow: ".encode()
            elif kind == "connect_head":
                data = f"CONNECT {HOST}:{up.tls_port} HTTP/1.1\r\nX-Slow: ".encode()
            elif kind == "after_connect":
                # A tunnel granted, then its first bytes (a TLS record header) dribbled.
                writer.write(f"CONNECT {HOST}:{up.tls_port} HTTP/1.1\r\n"
                             f"Host: {HOST}:{up.tls_port}\r\n\r\n".encode())
                parts, _ = await asyncio.wait_for(read_head(reader), 10)
                if parts[1] != "200":
                    raise HttpError("CONNECT " + parts[1])
                data = b""
                body = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 8
            else:
                body = b'{"tools":[{"type":"x"}],"pad":"' + b"a" * 200 + b'"}'
                data = (f"POST {target} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                        ).encode()
            writer.write(data)
            started = time.time()
            # One byte every 2 s, at most 15 (30 s): the proxy must cut it at ~5 s.
            for n in range(15):
                await asyncio.sleep(2)
                try:
                    chunk = await asyncio.wait_for(reader.read(4096), 0.01)
                except asyncio.TimeoutError:
                    chunk = None
                if chunk is not None:
                    outcome = chunk.split(b" ")[1].decode() if chunk else "closed"
                    break
                writer.write(body[n:n + 1] if body else b"a")
                await writer.drain()
        except (ConnectionError, OSError) as e:
            outcome = "closed" if isinstance(e, ConnectionError) else type(e).__name__
        except Exception as e:  # noqa: BLE001
            outcome = type(e).__name__
        finally:
            if writer:
                writer.close()
        results[kind].append((outcome, time.time() - started))

    tasks = [asyncio.ensure_future(slow(k, i)) for k, n in kinds for i in range(n)]
    await asyncio.wait(tasks, timeout=60)
    await load.stop()
    after = await one_request(ctx, proxy)
    alive = proxy.alive()
    hwm = proxy.stop()
    summary = []
    cut_ok = True
    for kind, res in results.items():
        outcomes = {}
        for o, _ in res:
            outcomes[o] = outcomes.get(o, 0) + 1
        longest = max((t for _, t in res), default=0)
        label = {"head": "heads (plain)", "connect_head": "CONNECT heads",
                 "head_tls": "heads (TLS)", "after_connect": "TLS hellos after CONNECT",
                 "body": "bodies (plain)", "body_tls": "bodies (TLS)"}[kind]
        summary.append(f"{len(res)} slow {label}: {outcomes}, "
                       f"cut within {longest:.1f}s")
        # Heads and bodies: body_timeout (5 s). A TLS hello: the built-in first-bytes
        # (2 s) and handshake (10 s) deadlines; never a raw relay on this guarded host.
        cut_ok &= "held" not in outcomes and longest < (15 if kind == "after_connect" else 10)
    lost = load.lost + (0 if after else 1)
    notes = ("; ".join(summary) + f"; load errors {load.errors or 'none'}")
    return row("b. slowloris heads + bodies (body_timeout 5s)", load.served + int(after), lost,
               proxy, hwm, notes, alive and cut_ok and lost == 0)


# ---------------------------------------------------------------- c. HTTP/2 floods

async def h2_connect(ctx, proxy, port, src):
    import h2.config
    import h2.connection
    import h2.events
    reader, writer = await open_tunnel(proxy, port, client_tls(ctx, ("h2",)), src)
    if writer.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
        raise HttpError("no h2")
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                header_encoding="utf-8"))
    conn.local_settings.max_concurrent_streams = 1000
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    # Wait for the proxy's SETTINGS (its stream limit) before opening streams.
    events = await h2_pump(reader, writer, conn, lambda e: any(
        isinstance(x, h2.events.RemoteSettingsChanged) for x in e), 5)
    if not any(isinstance(x, h2.events.RemoteSettingsChanged) for x in events):
        writer.close()
        raise HttpError("no SETTINGS from the proxy")
    return reader, writer, conn


async def h2_pump(reader, writer, conn, until, timeout):
    """Reads frames until `until()` or the deadline; returns the events seen."""
    import h2.events
    events = []
    deadline = time.time() + timeout
    while time.time() < deadline and not until(events):
        try:
            data = await asyncio.wait_for(reader.read(65536), max(0.01, deadline - time.time()))
        except asyncio.TimeoutError:
            break
        if not data:
            events.append("eof")
            break
        for ev in conn.receive_data(data):
            events.append(ev)
            if isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        writer.write(conn.data_to_send())
    return events


async def scenario_c(ctx):
    import h2.errors
    import h2.events
    import h2.exceptions
    proxy = Proxy(ctx, "c", policy_yaml(ctx, "{buffer_memory: 64MiB}", json_deny=True))
    up = ctx.up
    authority = f"{HOST}:{up.tls_port}"
    load = Load(ctx, proxy, keep=2, fresh=1)
    load.start()
    parts = []
    flood_served = flood_failed = 0

    # 1. GET stream flood: 8 connections x 1,000 streams, as many in flight as the proxy
    #    allows (its SETTINGS_MAX_CONCURRENT_STREAMS).
    ended = []
    resets = {}

    async def get_flood(n, streams=1000, path="/ok"):
        nonlocal flood_served, flood_failed
        try:
            reader, writer, conn = await h2_connect(ctx, proxy, up.tls_port, f"127.0.3.{n + 1}")
        except Exception:  # noqa: BLE001
            flood_failed += streams
            return
        sent = done = retries = 0
        open_ids = set()
        ok = 0
        deadline = time.time() + 60
        while done < streams and time.time() < deadline:
            limit = conn.remote_settings.max_concurrent_streams
            while sent < streams and len(open_ids) < min(limit, 1000):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, [(":method", "GET"), (":scheme", "https"),
                                        (":authority", authority), (":path", f"{path}?h2={sent}")],
                                  end_stream=True)
                open_ids.add(sid)
                sent += 1
            writer.write(conn.data_to_send())
            events = await h2_pump(reader, writer, conn, lambda e: len(e) > 0, 10)
            if not events or "eof" in events:
                ended.append(f"{'eof' if events else 'silence'} after {done}")
                break
            for ev in events:
                if isinstance(ev, h2.events.ConnectionTerminated):
                    ended.append(f"GOAWAY {ev.error_code!s} after {done}")
                    done = streams
            for ev in events:
                if isinstance(ev, h2.events.ResponseReceived):
                    st = dict(ev.headers).get(":status")
                    if st == "200":
                        ok += 1
                    else:
                        resets["status " + str(st)] = resets.get("status " + str(st), 0) + 1
                if isinstance(ev, h2.events.StreamReset):
                    resets[str(ev.error_code)] = resets.get(str(ev.error_code), 0) + 1
                    if (ev.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
                            and ev.stream_id in open_ids and retries < streams):
                        # Refused streams were not processed (RFC 9113 8.7): send again.
                        open_ids.discard(ev.stream_id)
                        retries += 1
                        sent -= 1
                        continue
                if isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    if ev.stream_id in open_ids:
                        open_ids.discard(ev.stream_id)
                        done += 1
        flood_served += ok
        flood_failed += streams - ok
        writer.close()

    t0 = time.time()
    await asyncio.wait([asyncio.ensure_future(get_flood(n)) for n in range(8)], timeout=90)
    parts.append(f"GET flood 8 conns x 1000 streams: {flood_served} ok, {flood_failed} failed "
                 f"in {time.time() - t0:.0f}s" + (f" (ended: {ended})" if ended else "")
                 + (f", other answers: {resets}" if resets else ""))
    rss_get = proxy.peak_rss_mib()

    # 1b. The same against an upstream that answers after 5 s: every stream holds an
    #     upstream connection (HTTP/1.1 upstream) meanwhile. 16 connections x 100 streams.
    served0, failed0, fds0 = flood_served, flood_failed, proxy.peak_fds
    t0 = time.time()
    slow_conns = 16
    await asyncio.wait([asyncio.ensure_future(get_flood(8 + n, 100, "/slow"))
                        for n in range(slow_conns)], timeout=90)
    parts.append(f"slow-upstream flood {slow_conns} conns x 100 streams (upstream answers after 5s): "
                 f"{flood_served - served0} ok, {flood_failed - failed0} failed in "
                 f"{time.time() - t0:.0f}s ({resets or 'all 200'}), peak fds {proxy.peak_fds}, peak RSS "
                 f"{proxy.peak_rss_mib():.0f} MiB")
    rss_get = proxy.peak_rss_mib()

    # 2. Rapid reset: HEADERS then RST_STREAM at once, 20,000 streams on 4 connections.
    rst_sent = 0
    rst_goaway = 0
    rst_ends = {}

    async def rst_flood(n):
        nonlocal rst_sent, rst_goaway
        try:
            reader, writer, conn = await h2_connect(ctx, proxy, up.tls_port, f"127.0.4.{n + 1}")
        except Exception:  # noqa: BLE001
            return
        try:
            for batch in range(50):
                for _ in range(100):
                    sid = conn.get_next_available_stream_id()
                    conn.send_headers(sid, [(":method", "GET"), (":scheme", "https"),
                                            (":authority", authority), (":path", "/ok?rst")],
                                      end_stream=True)
                    conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                    rst_sent += 1
                writer.write(conn.data_to_send())
                await writer.drain()
                events = await h2_pump(reader, writer, conn, lambda e: False, 0.02)
                for e in events:
                    if isinstance(e, h2.events.ConnectionTerminated):
                        rst_ends[str(e.error_code)] = rst_ends.get(str(e.error_code), 0) + 1
                if "eof" in events or any(isinstance(e, h2.events.ConnectionTerminated)
                                          for e in events):
                    rst_goaway += 1
                    break
        except (h2.exceptions.ProtocolError, ConnectionError, OSError):
            rst_goaway += 1
        writer.close()

    t0 = time.time()
    await asyncio.wait([asyncio.ensure_future(rst_flood(n)) for n in range(4)], timeout=60)
    parts.append(f"rapid reset: {rst_sent} HEADERS+RST_STREAM on 4 conns in "
                 f"{time.time() - t0:.0f}s, {rst_goaway} conns ended by the proxy (GOAWAY {rst_ends or '-'})")
    rss_rst = proxy.peak_rss_mib()

    # 3. Inspected-body flood: 16 connections x 100 streams each announce a 900 KiB JSON
    #    body to the json_deny host and send what flow control lets through, hold 5 s,
    #    then reset. buffer_memory is 64MiB.
    statuses = {}
    body_len = 900 * 1024

    async def body_flood(n):
        try:
            reader, writer, conn = await h2_connect(ctx, proxy, up.tls_port, f"127.0.5.{n + 1}")
        except Exception as e:  # noqa: BLE001
            statuses[type(e).__name__] = statuses.get(type(e).__name__, 0) + 100
            return
        ids = []
        chunk = b" " * 16384
        try:
            for _ in range(min(100, conn.remote_settings.max_concurrent_streams)):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, [(":method", "POST"), (":scheme", "https"),
                                        (":authority", authority), (":path", "/v1"),
                                        ("content-type", "application/json"),
                                        ("content-length", str(body_len))])
                ids.append(sid)
            writer.write(conn.data_to_send())
            end = time.time() + 5
            while time.time() < end:
                for sid in ids:
                    try:
                        room = min(conn.local_flow_control_window(sid), len(chunk))
                    except (h2.exceptions.StreamClosedError, KeyError, h2.exceptions.ProtocolError):
                        continue
                    if room > 0:
                        try:
                            conn.send_data(sid, chunk[:room])
                        except h2.exceptions.ProtocolError:
                            pass
                writer.write(conn.data_to_send())
                events = await h2_pump(reader, writer, conn, lambda e: False, 0.2)
                for ev in events:
                    if isinstance(ev, h2.events.ResponseReceived):
                        s = dict(ev.headers).get(":status", "?")
                        statuses[s] = statuses.get(s, 0) + 1
                if "eof" in events:
                    break
            for sid in ids:
                try:
                    conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                except Exception:  # noqa: BLE001
                    pass
            writer.write(conn.data_to_send())
        except Exception as e:  # noqa: BLE001
            statuses[type(e).__name__] = statuses.get(type(e).__name__, 0) + 1
        writer.close()

    t0 = time.time()
    await asyncio.wait([asyncio.ensure_future(body_flood(n)) for n in range(16)], timeout=60)
    parts.append(f"inspected-body flood 16 conns x 100 streams x 900 KiB half-sent, "
                 f"buffer_memory 64MiB: answers {statuses or 'none before reset'}")
    await load.stop()
    await asyncio.sleep(1)
    after = await one_request(ctx, proxy)
    alive = proxy.alive()
    hwm = proxy.stop()
    parts.append(f"peak RSS after GET flood {rss_get:.0f} MiB, after rapid reset "
                 f"{rss_rst:.0f} MiB, after body flood {hwm:.0f} MiB")
    parts.append(f"load errors {load.errors or 'none'}; request after: "
                 f"{'ok' if after else 'FAILED'}")
    lost = load.lost + flood_failed + (0 if after else 1)
    return row("c. HTTP/2 stream flood", load.served + flood_served + int(after), lost, proxy,
               hwm, "; ".join(parts), alive and lost == 0 and hwm < 512)


# ---------------------------------------------------------------- d. upstream resets

async def scenario_d(ctx):
    proxy = Proxy(ctx, "d", policy_yaml(ctx))
    up = ctx.up
    tls = client_tls(ctx)
    # Baseline: after the same load alone has warmed the upstream pool.
    warm = Load(ctx, proxy, keep=2, fresh=1)
    warm.start()
    await asyncio.sleep(2)
    await warm.stop()
    await asyncio.sleep(0.5)
    baseline, baseline_socks = proxy.fds(), sockets_of(proxy)
    load = Load(ctx, proxy, keep=2, fresh=1)
    load.start()
    outcomes = {}
    hangs = 0

    async def victim(i):
        nonlocal hangs
        path = "/reset" if i % 2 == 0 else "/close"
        writer = None
        try:
            if i % 4 < 2:
                reader, writer = await open_tunnel(proxy, up.tls_port, tls)
                writer.write(get_request(f"{path}?i={i}", f"{HOST}:{up.tls_port}"))
            else:
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(get_request(f"{path}?i={i}", f"{HOST}:{up.plain_port}",
                                         absolute=True))
            status, _, body = await asyncio.wait_for(read_response(reader), 15)
            key = f"{path} complete {status}"
        except asyncio.TimeoutError:
            hangs += 1
            key = f"{path} HANG"
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError) as e:
            key = f"{path} cut ({type(e).__name__})"
        except Exception as e:  # noqa: BLE001
            key = f"{path} {type(e).__name__}"
        finally:
            if writer:
                writer.close()
        outcomes[key] = outcomes.get(key, 0) + 1

    sem = asyncio.Semaphore(100)

    async def bounded(i):
        async with sem:
            await victim(i)

    victims = 4000
    t0 = time.time()
    await asyncio.wait([asyncio.ensure_future(bounded(i)) for i in range(victims)], timeout=120)
    took = time.time() - t0
    await load.stop()
    # fd count back to the baseline (bounded wait).
    settled = None
    for _ in range(100):
        await asyncio.sleep(0.2)
        settled = proxy.fds()
        if settled <= baseline:
            break
    settled_socks = sockets_of(proxy)
    after = await one_request(ctx, proxy)
    alive = proxy.alive()
    hwm = proxy.stop()
    complete = sum(v for k, v in outcomes.items() if " complete " in k)
    lost = load.lost + hangs + complete + (0 if after else 1)
    notes = (f"{victims} requests (half RST, half FIN mid-body; TLS and plain) in {took:.0f}s: "
             f"{outcomes}; fds {baseline} before, {settled} after (sockets by peer "
             f"{baseline_socks} before, {settled_socks} after); load errors "
             f"{load.errors or 'none'}; request after: {'ok' if after else 'FAILED'}")
    return row("d. upstream resets mid-body", load.served + int(after), lost, proxy, hwm, notes,
               alive and lost == 0 and settled_socks.get("client", 0) == 0
               and settled <= baseline + 2)


# ---------------------------------------------------------------- e. policy swaps

def admin_call(addr, token, method, path, body=None, timeout=10):
    import http.client
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/yaml"
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


async def scenario_e(ctx):
    token = "soak-token-0123456789"
    edir = os.path.join(ctx.work, "e")
    os.makedirs(edir, exist_ok=True)
    token_file = os.path.join(edir, "token")
    with open(token_file, "w") as f:
        f.write(token)
    os.chmod(token_file, 0o600)
    base = policy_yaml(ctx)
    variants = [base, policy_yaml(ctx, extra_rules="    - host: other.test\n      ports: [443]\n")]
    proxy = Proxy(ctx, "e", base,
                  extra=["--admin", "127.0.0.1:0", "--admin-token-file", token_file])
    load = Load(ctx, proxy, keep=6, fresh=2, h2=2)
    load.start()
    await asyncio.sleep(1)
    loop = asyncio.get_running_loop()
    api_ok = api_fail = 0
    t0 = time.time()
    for i in range(100):
        status, _ = await loop.run_in_executor(
            None, admin_call, proxy.admin, token, "PUT", "/v1/policy", variants[(i + 1) % 2])
        if status == 200:
            api_ok += 1
        else:
            api_fail += 1
        await asyncio.sleep(0.1)
    api_s = time.time() - t0
    served_api, lost_api = load.served, load.lost
    t0 = time.time()
    for i in range(100):
        with open(proxy.policy_path + ".tmp", "w") as f:
            f.write(variants[i % 2])
        os.replace(proxy.policy_path + ".tmp", proxy.policy_path)
        os.kill(proxy.pid, signal.SIGHUP)
        await asyncio.sleep(0.1)
    hup_s = time.time() - t0
    await asyncio.sleep(1.5)
    await load.stop()
    _, health = await loop.run_in_executor(None, admin_call, proxy.admin, token, "GET",
                                           "/healthz")
    version = json.loads(health).get("policy_version")
    # The swaps take effect: a policy without the host refuses it, the old one allows again.
    deny = "version: 1\ndlp: {credentials: off}\nnetwork:\n  allow:\n    - host: other.test\n"
    await loop.run_in_executor(None, admin_call, proxy.admin, token, "PUT", "/v1/policy", deny)
    refused_now = not await one_request(ctx, proxy)
    await loop.run_in_executor(None, admin_call, proxy.admin, token, "PUT", "/v1/policy", base)
    allowed_again = await one_request(ctx, proxy)
    alive = proxy.alive()
    hwm = proxy.stop()
    changes = sum(1 for l in proxy.audit_lines() if l.get("kind") == "policy")
    notes = (f"100 PUT /v1/policy in {api_s:.0f}s ({api_ok} accepted, {api_fail} refused): "
             f"{served_api} served, {lost_api} lost meanwhile; then 100 SIGHUP file rewrites "
             f"in {hup_s:.0f}s; policy version at end {version}, {changes} policy audit lines; "
             f"{load.h2_served} of the served over HTTP/2; load errors {load.errors or 'none'}; "
             f"a policy without the host then refused it: {'yes' if refused_now else 'NO'}, "
             f"allowed again after: {'yes' if allowed_again else 'NO'}")
    return row("e. policy replaced 100+100 times under load", load.served, load.lost, proxy,
               hwm, notes, alive and load.lost == 0 and api_fail == 0 and refused_now
               and allowed_again)


# ---------------------------------------------------------------- f. audit disk full

async def scenario_f(ctx):
    return await audit_full(ctx, "f", 1)


async def scenario_g(ctx):
    return await audit_full(ctx, "g", 8)


async def audit_full(ctx, name, workers):
    mnt = os.path.join(ctx.work, "auditfs")
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], check=True,
                   timeout=10)
    try:
        return await audit_full_mounted(ctx, name, mnt, workers)
    finally:
        for proxy in ctx.proxies:
            proxy.stop()
        subprocess.run(["umount", mnt], timeout=20)


async def audit_full_mounted(ctx, name, mnt, workers):
    """The audit log on a 1 MiB tmpfs filled but for 24 KiB; `workers` clients send
    allowed requests (each on its own keep-alive tunnel) until every one has been refused
    50 times in a row. Lost: a 200 whose line is not in the log (served unlogged). Then
    the space is freed: service must come back by itself (the writer retries every
    second) with the `kind: audit` line that counts the refusals (docs/reliability.md)."""
    log = os.path.join(mnt, "audit.jsonl")
    proxy = Proxy(ctx, name, policy_yaml(ctx), log=log)
    up = ctx.up
    assert await one_request(ctx, proxy)
    filler = os.path.join(mnt, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(1024):
            os.write(fd, b"\1" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(filler, max(0, os.path.getsize(filler) - 24 * 1024))
    seq = []  # statuses, in the order answers arrived
    timing = []  # (sent, answered, status) of every request that got an answer
    tls = client_tls(ctx)

    async def worker(w):
        conn = None
        refused_in_row = 0
        for i in range(3000):
            try:
                if conn is None:
                    conn = await open_tunnel(proxy, up.tls_port, tls)
                reader, writer = conn
                sent = time.monotonic()
                writer.write(get_request(f"/ok?n={w}-{i}&pad={'p' * 100}",
                                         f"{HOST}:{up.tls_port}"))
                status, _, body = await asyncio.wait_for(read_response(reader), 10)
                seq.append(status)
                timing.append((sent, time.monotonic(), status))
                if status != 200:
                    writer.close()
                    conn = None
            except Exception as e:  # noqa: BLE001
                seq.append(str(e) if isinstance(e, HttpError) else type(e).__name__)
                if conn:
                    conn[1].close()
                conn = None
            refused_in_row = 0 if seq[-1] == 200 else refused_in_row + 1
            if refused_in_row >= 50:
                break
        if conn:
            conn[1].close()

    await asyncio.wait([asyncio.ensure_future(worker(w)) for w in range(workers)], timeout=120)
    first_refusal = next((i for i, s in enumerate(seq) if s != 200), None)
    ok_total = seq.count(200)
    ok_after = sum(1 for s in seq[first_refusal:] if s == 200) if first_refusal is not None else 0
    # A 200 for a request sent after some client already had a refusal: admitted after
    # the log had failed (a 200 answered later but sent before is one in flight).
    refused_at = min((t for _, t, st in timing if st != 200), default=None)
    admitted_after = sum(1 for sent, _, st in timing
                         if st == 200 and refused_at is not None and sent > refused_at)
    refused = {str(s): seq.count(s) for s in set(seq) if s != 200}
    # Space again: service must come back within a few retry intervals, with no restart.
    os.remove(filler)
    freed = time.monotonic()
    back = None
    while back is None and time.monotonic() - freed < 5:
        if await one_request(ctx, proxy, timeout=5):
            back = time.monotonic() - freed
        else:
            await asyncio.sleep(0.1)
    recovered = [await one_request(ctx, proxy) for _ in range(3)]
    alive = proxy.alive()
    hwm = proxy.stop()
    lines = proxy.audit_lines()
    logged = sum(l.get("count", 1) for l in lines
                 if l.get("kind") == "http" and l.get("path") == "/ok"
                 and "n=" in str(l.get("query", "")))
    broken = sum(1 for l in lines if "unparsable" in l)
    unlogged = max(0, ok_total - logged)
    lost = unlogged
    # The lines that end each outage: every refusal a client saw is counted in them.
    gaps = [l for l in lines if l.get("kind") == "audit"
            and l.get("reason") == "audit_log_unavailable"]
    gap_refused = sum(l.get("refused", 0) for l in gaps)
    seen_503 = sum(1 for s in seq if s in (503, "CONNECT 503"))
    with open(proxy.stderr_path) as f:
        said = [l.strip() for l in f if "audit log" in l]
    notes = (f"{len(seq)} requests from {workers} client(s), log on a 1 MiB tmpfs with 24 KiB "
             f"left: {ok_total} answered 200 ({logged} of them in the log"
             + (f", {broken} partial line(s)" if broken else "") + "), then "
             f"{refused or 'no refusal'}; 200s received after the first refusal: {ok_after}, of "
             f"them sent after it: {admitted_after} (served, and logged, after a retry found "
             f"room); after freeing space: served again after "
             f"{'%.1f s' % back if back is not None else 'never (5 s)'}, then "
             f"{sum(recovered)}/3 served; {len(gaps)} gap line(s) counting {gap_refused} "
             f"refusal(s) (clients saw {seen_503} 503s); stderr: {said[:1]}")
    title = "f. audit disk full" + (f" ({workers} concurrent clients)" if workers > 1 else "")
    return row(title, ok_total, lost, proxy, hwm, notes,
               alive and first_refusal is not None and lost == 0 and back is not None
               and all(recovered) and bool(gaps) and gap_refused >= seen_503)


# ---------------------------------------------------------------- driver

SCENARIOS = {"a": scenario_a, "b": scenario_b, "c": scenario_c, "d": scenario_d,
             "e": scenario_e, "f": scenario_f, "g": scenario_g}


class Ctx:
    pass


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "upstream":
        ap = argparse.ArgumentParser()
        ap.add_argument("cmd")
        ap.add_argument("--cert")
        ap.add_argument("--key")
        asyncio.run(upstream_main(ap.parse_args()))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/airlock")
    ap.add_argument("--only", default=",".join(SCENARIOS))
    ap.add_argument("--work", required=True)
    ap.add_argument("--json")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    except (ValueError, OSError):
        pass
    ctx = Ctx()
    ctx.proxies = []
    ctx.bin = os.path.abspath(args.bin)
    ctx.work = args.work
    ctx.pki = make_pki(os.path.join(args.work, "pki"))
    ctx.up = Upstream(ctx.pki)
    rows = []
    try:
        for name in args.only.split(","):
            t0 = time.time()
            print(f"== {name}", file=sys.stderr, flush=True)
            ctx.proxies = []
            try:
                r = asyncio.run(asyncio.wait_for(SCENARIOS[name](ctx), 240))
            except Exception as e:  # noqa: BLE001
                r = {"scenario": name, "served": 0, "lost": "?", "peak_rss_mib": "?",
                     "peak_fds": "?", "notes": f"scenario error: {type(e).__name__}: {e}",
                     "ok": False}
            finally:
                for proxy in ctx.proxies:
                    proxy.stop()
            r["seconds"] = round(time.time() - t0)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    finally:
        ctx.up.stop()
    print("| scenario | served | lost | peak RSS (MiB) | peak fds | notes |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['scenario']} | {r['served']} | {r['lost']} | {r['peak_rss_mib']} | "
              f"{r['peak_fds']} | {r['notes']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
