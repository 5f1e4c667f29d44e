#!/usr/bin/env python3
"""Start-up, phase by phase (issue 37 item 3; docs/benchmarks.md, "Start-up, phase by phase").

Launches `BIN proxy` afresh RUNS times in front of bench/nginx.sh's upstream and times, from
the launch (the moment before fork): the first accepted TCP connection (polled every 0.5
ms), the CONNECT answer, the inner TLS handshake and the first proxied 200. The same client
is also timed straight against nginx (TCP + TLS + GET, no proxy): the client's own share.
Runs alternate between the binaries given, so that a busy moment of the machine hits each.

    bench/startup.py [--runs 20] BIN [BIN...]

Each BIN is a command line (split as a shell would), so that `"env SSL_CERT_FILE=F BIN"`
times one binary under another environment.

Loopback only; every wait is bounded (5 s per run); prints medians and ranges per binary.
"""

import argparse
import os
import shlex
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PORT, UPSTREAM = 18081, 18443


def upstream():
    state = os.environ.get("BENCH_STATE", os.path.join(os.getcwd(), "target", "bench"))
    out = subprocess.run([os.path.join(HERE, "nginx.sh"), os.path.join(state, "c1")],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def get(sock, ctx):
    """TLS + one GET over an open socket; returns (handshake done, 200 read) times."""
    s = ctx.wrap_socket(sock, server_hostname="localhost")
    t_tls = time.monotonic()
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost:18443\r\nConnection: close\r\n\r\n")
    head_200(s)
    s.close()
    return t_tls, time.monotonic()


def head_200(sock):
    """Reads a response head (at most 64 KiB) and checks that it is a 200."""
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head[:80]


def accept_time(proc, deadline):
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(("127.0.0.1", PORT), timeout=1)
            return sock, time.monotonic()
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the proxy exited with {proc.returncode}")
            time.sleep(0.0005)
    raise SystemExit("the proxy did not accept within 5 s")


def one_start(binary, pki, ctx):
    argv = shlex.split(binary) + ["proxy", "--listen", f"127.0.0.1:{PORT}", "--ca-cert", f"{pki}/proxy-ca.crt",
            "--ca-key", f"{pki}/proxy-ca.key", "--upstream-ca", f"{pki}/upstream-ca.crt",
            "--allow", f"localhost:{UPSTREAM}/", "--resolve", "localhost:127.0.0.1"]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sock, t_accept = accept_time(proc, t0 + 5)
        sock.settimeout(5)
        sock.sendall(f"CONNECT localhost:{UPSTREAM} HTTP/1.1\r\nHost: localhost:{UPSTREAM}\r\n\r\n".encode())
        head_200(sock)
        t_connect = time.monotonic()
        t_tls, t_ok = get(sock, ctx)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"accept": t_accept - t0, "connect": t_connect - t0, "tls": t_tls - t0, "ok": t_ok - t0}


def direct(ctx):
    t0 = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", UPSTREAM), timeout=5)
    _, t_ok = get(sock, ctx)
    return t_ok - t0


def cell(values):
    ms = sorted(v * 1e3 for v in values)
    return f"{statistics.median(ms):6.1f} [{ms[0]:.1f}–{ms[-1]:.1f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    assert 1 <= a.runs <= 200
    pki = upstream()
    ctx = ssl.create_default_context(cafile=f"{pki}/client-trust.pem")
    results = {b: [] for b in a.binaries}
    floor = []
    for _ in range(a.runs):
        for b in a.binaries:
            results[b].append(one_start(b, pki, ctx))
            time.sleep(0.05)
        floor.append(direct(ctx))
    print(f"client alone (TCP + TLS + GET straight to nginx): {cell(floor)} ms")
    print(f"{'binary':40} {'accepts':>20} {'CONNECT 200':>20} {'inner TLS':>20} {'first 200':>20}")
    for b, runs in results.items():
        cols = [cell([r[k] for r in runs]) for k in ("accept", "connect", "tls", "ok")]
        print(f"{b[-40:]:40} " + " ".join(f"{c:>20}" for c in cols))


if __name__ == "__main__":
    sys.exit(main())
