#!/usr/bin/env python3
"""Connection scale (issue 17, item 3): idle client connections and idle CONNECT tunnels held
open against `airlock proxy` while an S1c1-like client (one keep-alive HTTPS client through
the proxy, `oha -c 1`) runs; reports the proxy's RSS after each stage and per connection,
the S1c1 latency with and without the held connections, and which held connections the
proxy closed by itself and after how long.

    bench/idle_conns.py [--bin target/release/airlock] [--conns 10000] [--tunnels 1000]
                        [--tls-tunnels 0] [--hold 100] [--duration 5] [--limits '{}']
                        [--oha oha] [--json]

Stages, in order (RSS is VmRSS of the proxy, read from /proc):
  1. S1c1 baseline: `oha -c 1 -z DURATION` through the proxy, nothing held.
  2. --conns plain TCP connections to the proxy that send nothing.
  3. --tunnels CONNECT tunnels: `CONNECT localhost:UPORT`, the 200 read, then silence.
  4. --tls-tunnels CONNECT tunnels with the TLS handshake done inside (trusting the proxy
     CA), then silence: what a real idle HTTPS client leaves behind.
  5. S1c1 again while everything still open is held.
  6. The connections are held until --hold seconds after stage 2 began; a poll loop notes
     when each held socket gets EOF or a reset (closed by the proxy), reported per stage
     as "closed at once" (within 5 s of opening, well before any timeout: refused at accept) and "closed later"
     with the times since opening.

The connections are spread over loopback sources 127.0.0.1, 127.0.0.2, ... (at most 500 per
source), since the proxy admits `connections_per_client` (512) per client address. The
upstream is nginx (/usr/sbin/nginx, loopback, a throwaway PKI made with openssl) answering
`GET /tiny` with "Hello, world\\n". --limits is written as the `limits:` of a policy file
given with --policy (e.g. '{idle_timeout: 20s}'); more than 1,024 connections in all need
`--limits '{connections: 12000}'` (the proxy's default `limits.connections`, docs/policy.md).
Everything runs on 127.0.0.0/8; the
proxy, nginx and the temp dir are removed on exit, Ctrl-C included.
"""
import argparse
import json
import os
import resource
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

PER_SOURCE = 500
NOFILE = 65536


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile(want=NOFILE):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run(cmd, cwd):
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_pki(d):
    """Upstream CA + leaf (localhost, 127.0.0.1) and the proxy's MITM CA, with openssl."""
    run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "uca.key"], d)
    run(["openssl", "req", "-x509", "-new", "-key", "uca.key", "-sha256", "-days", "2",
         "-subj", "/CN=idle bench upstream CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "uca.crt"], d)
    run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "up.key"], d)
    run(["openssl", "req", "-new", "-key", "up.key", "-subj", "/CN=localhost", "-out", "up.csr"], d)
    with open(os.path.join(d, "up.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run(["openssl", "x509", "-req", "-in", "up.csr", "-CA", "uca.crt", "-CAkey", "uca.key",
         "-CAcreateserial", "-days", "2", "-sha256", "-extfile", "up.ext", "-out", "up.crt"], d)
    run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
         "-out", "pca.key"], d)
    run(["openssl", "req", "-x509", "-new", "-key", "pca.key", "-sha256", "-days", "2",
         "-subj", "/CN=idle bench proxy CA/O=bench", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-out", "pca.crt"], d)


def start_nginx(d, port):
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""worker_processes 1;
daemon off;
pid %(d)s/nginx.pid;
error_log %(d)s/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %(d)s/ncb; proxy_temp_path %(d)s/np; fastcgi_temp_path %(d)s/nf;
  uwsgi_temp_path %(d)s/nu; scgi_temp_path %(d)s/ns;
  keepalive_requests 1000000; keepalive_timeout 300s;
  server {
    listen 127.0.0.1:%(port)d ssl;
    ssl_certificate %(d)s/up.crt; ssl_certificate_key %(d)s/up.key;
    location = /tiny { default_type text/plain; return 200 "Hello, world\\n"; }
  }
}
""" % {"d": d, "port": port})
    return subprocess.Popen(["/usr/sbin/nginx", "-e", os.path.join(d, "nginx-error.log"),
                             "-p", d, "-c", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=lambda: raise_nofile())


def wait_port(port, proc, what):
    for _ in range(100):
        if proc.poll() is not None:
            raise SystemExit("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("%s did not listen on %d" % (what, port))


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def settle_rss(pid, seconds=2.0):
    """VmRSS after the proxy has had `seconds` to finish with what was just opened."""
    time.sleep(seconds)
    return rss_kib(pid)


def oha(args, port, uport, ca):
    cmd = [args.oha, "--no-tui", "--output-format", "json", "-z", "%gs" % args.duration,
           "-c", "1", "-x", "http://127.0.0.1:%d" % port, "--cacert", ca,
           "https://localhost:%d/tiny" % uport]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 60)
        data = json.loads(out.stdout)
    except (subprocess.TimeoutExpired, ValueError, OSError) as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    summary = data.get("summary", {})
    pct = data.get("latencyPercentiles", {})
    codes = data.get("statusCodeDistribution", {})
    ok = sum(v for k, v in codes.items() if k == "200")
    return {
        "rps": ok / args.duration,  # answered with 200 only (oha's own rate counts errors)
        "p50_ms": (pct.get("p50") or 0) * 1000,
        "p99_ms": (pct.get("p99") or 0) * 1000,
        "ok": ok,
        "status": codes,
        "errors": data.get("errorDistribution", {}),
    }


class Held:
    """The held sockets of every stage, and when the proxy closed each of them."""

    def __init__(self):
        self.socks = {}  # fd -> (socket, stage, opened_at)
        self.closed = {}  # stage -> list of seconds from opening to close
        self.opened = {}  # stage -> number established
        self.failed = {}  # stage -> {reason: count} (never established)
        self.poll = select.poll()

    def add(self, sock, stage, opened_at):
        self.socks[sock.fileno()] = (sock, stage, opened_at)
        self.opened[stage] = self.opened.get(stage, 0) + 1
        self.poll.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)

    def fail(self, stage, reason):
        f = self.failed.setdefault(stage, {})
        f[reason] = f.get(reason, 0) + 1

    def check(self, timeout_ms=0):
        """Notes the held sockets that got EOF or an error; returns how many."""
        n = 0
        now = time.monotonic()
        for fd, _ in self.poll.poll(timeout_ms):
            entry = self.socks.get(fd)
            if entry is None:
                continue
            sock, stage, opened_at = entry
            try:
                if isinstance(sock, ssl.SSLSocket):
                    data = sock.recv(4096)  # non-blocking socket
                else:
                    data = sock.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except ssl.SSLWantReadError:
                continue
            except (OSError, ssl.SSLError):
                data = b""
            if data:
                continue  # unexpected bytes (e.g. a TLS record): still open
            self.poll.unregister(fd)
            del self.socks[fd]
            self.closed.setdefault(stage, []).append(now - opened_at)
            try:
                sock.close()
            except OSError:
                pass
            n += 1
        return n

    def open_count(self, stage=None):
        return sum(1 for _, s, _ in self.socks.values() if stage is None or s == stage)

    def close_all(self):
        for sock, _, _ in list(self.socks.values()):
            try:
                sock.close()
            except OSError:
                pass
        self.socks.clear()


def source_for(i):
    return "127.0.0.%d" % (1 + i // PER_SOURCE)


def connect(port, source, timeout=5):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def read_head(s, deadline):
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def open_idle(held, stage, n, port, offset, budget):
    end = time.monotonic() + budget
    for i in range(n):
        if time.monotonic() > end:
            held.fail(stage, "stage time budget spent")
            continue
        try:
            s = connect(port, source_for(offset + i))
        except OSError as e:
            held.fail(stage, type(e).__name__)
            continue
        s.setblocking(False)
        held.add(s, stage, time.monotonic())
        if i % 500 == 499:
            held.check()


def open_tunnels(held, stage, n, port, uport, offset, budget, tls_ctx=None):
    end = time.monotonic() + budget
    req = ("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (uport, uport)).encode()
    for i in range(n):
        if time.monotonic() > end:
            held.fail(stage, "stage time budget spent")
            continue
        s = None
        try:
            s = connect(port, source_for(offset + i))
            opened_at = time.monotonic()
            s.sendall(req)
            head = read_head(s, time.monotonic() + 10)
            if not head.startswith(b"HTTP/1.1 200"):
                held.fail(stage, "CONNECT answer %r" % (head.split(b"\r\n")[0][:40] or b"EOF"))
                s.close()
                continue
            if tls_ctx is not None:
                s.settimeout(10)
                s = tls_ctx.wrap_socket(s, server_hostname="localhost")
        except (OSError, ssl.SSLError) as e:
            held.fail(stage, type(e).__name__)
            if s is not None:
                s.close()
            continue
        s.setblocking(False)
        held.add(s, stage, opened_at)
        if i % 100 == 99:
            held.check()


def summarize_closed(times):
    if not times:
        return {"at_once": 0, "later": 0}
    at_once = [t for t in times if t < 5.0]
    later = sorted(t for t in times if t >= 5.0)
    out = {"at_once": len(at_once), "later": len(later)}
    if later:
        out["later_min_s"] = round(later[0], 1)
        out["later_max_s"] = round(later[-1], 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/release/airlock")
    ap.add_argument("--oha", default=shutil.which("oha") or "/root/.cargo/bin/oha")
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--tunnels", type=int, default=1000)
    ap.add_argument("--tls-tunnels", type=int, default=0)
    ap.add_argument("--hold", type=float, default=100,
                    help="seconds to hold, counted from the first idle connection")
    ap.add_argument("--duration", type=float, default=5, help="seconds of each oha run")
    ap.add_argument("--limits", default=None, help="a policy `limits:` value, e.g. '{idle_timeout: 20s}'")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for name in ("conns", "tunnels", "tls_tunnels"):
        if not 0 <= getattr(args, name) <= 30000:
            ap.error("--%s must be within 0..30000" % name.replace("_", "-"))
    args.hold = min(max(args.hold, 0), 3600)
    args.duration = min(max(args.duration, 1), 120)
    total = args.conns + args.tunnels + args.tls_tunnels
    if total // PER_SOURCE + 1 > 254:
        ap.error("too many connections for 127.0.0.1..127.0.0.254")
    nofile = raise_nofile(max(NOFILE, total + 1024))
    if nofile < total + 256:
        print("warning: RLIMIT_NOFILE is %d, below the %d sockets asked for" % (nofile, total),
              file=sys.stderr)

    work = tempfile.mkdtemp(prefix="idle-conns-")
    procs = []
    held = Held()

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        make_pki(work)
        uport, port = free_port(), free_port()
        nginx = start_nginx(work, uport)
        procs.append(nginx)
        wait_port(uport, nginx, "nginx")
        command = [args.bin, "proxy", "--listen", "127.0.0.1:%d" % port,
                   "--ca-cert", os.path.join(work, "pca.crt"),
                   "--ca-key", os.path.join(work, "pca.key"),
                   "--upstream-ca", os.path.join(work, "uca.crt"),
                   "--allow", "GET localhost:%d/tiny" % uport,
                   "--resolve", "localhost:127.0.0.1",
                   "--log", os.path.join(work, "audit.jsonl")]
        if args.limits:
            policy = os.path.join(work, "limits.yaml")
            with open(policy, "w") as f:
                f.write("version: 1\nlimits: %s\n" % args.limits)
            command += ["--policy", policy]
        env = dict(os.environ, AIRLOCK_HOME=os.path.join(work, "home"))
        proxy = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                 stderr=open(os.path.join(work, "proxy.err"), "w"), env=env,
                                 preexec_fn=lambda: raise_nofile(max(NOFILE, 2 * total + 1024)))
        procs.append(proxy)
        wait_port(port, proxy, "airlock proxy")
        with open("/proc/%d/limits" % proxy.pid) as f:
            proxy_nofile = next(l.split()[3] for l in f if l.startswith("Max open files"))
        ca = os.path.join(work, "pca.crt")
        rows = []

        def row(stage, held_n=None, per=None, note=""):
            rss = rss_kib(proxy.pid)
            rows.append({"stage": stage, "rss_kib": rss, "proxy_fds": fd_count(proxy.pid),
                         "held_open": held.open_count() if held_n is None else held_n,
                         "note": note})
            return rss

        warm = oha(args, port, uport, ca)  # first handshakes, leaf minting, pools
        rss0 = settle_rss(proxy.pid, 1)
        row("idle (after a warm-up oha run)", 0)
        base = oha(args, port, uport, ca)
        rss_b = settle_rss(proxy.pid, 1)
        row("after S1c1 baseline", 0)

        t0 = time.monotonic()
        per = {}
        stages = [("idle TCP", args.conns), ("CONNECT, silent", args.tunnels),
                  ("CONNECT + TLS, silent", args.tls_tunnels)]
        offset = 0
        before = rss_b
        for stage, n in stages:
            if n == 0:
                continue
            started = time.monotonic()
            if stage == "idle TCP":
                open_idle(held, stage, n, port, offset, budget=120)
            elif stage == "CONNECT, silent":
                open_tunnels(held, stage, n, port, uport, offset, budget=120)
            else:
                ctx = ssl.create_default_context(cafile=ca)
                open_tunnels(held, stage, n, port, uport, offset, budget=300, tls_ctx=ctx)
            offset += n
            opened_s = time.monotonic() - started
            time.sleep(1.5)
            held.check()
            rss = settle_rss(proxy.pid, 0.5)
            held.check()
            still = held.open_count(stage)
            delta = (rss or 0) - (before or 0)
            per[stage] = round(delta / still, 1) if still else None
            row("+ %d %s (%d still open, opened in %.1fs)" % (n, stage, still, opened_s),
                note="%s KiB per open one" % per[stage])
            before = rss

        held.check()
        loaded = oha(args, port, uport, ca)
        held.check()
        row("after S1c1 with connections held")

        # Hold until t0 + hold, noting what the proxy closes.
        end = t0 + args.hold
        peak = rss_kib(proxy.pid) or 0
        while time.monotonic() < end and held.socks:
            held.check(timeout_ms=int(min(500, max(0, (end - time.monotonic()) * 1000))))
            peak = max(peak, rss_kib(proxy.pid) or 0)
        held.check()
        row("end of hold (%.0fs after the first idle connection)" % (time.monotonic() - t0),
            note="peak RSS during hold %d KiB" % peak)
        still_open = {s: held.open_count(s) for s, n in stages if n}
        held.close_all()
        time.sleep(2)
        row("all held connections closed by the client", 0)
        after = oha(args, port, uport, ca)

        # The proxy installs no tracing subscriber: its warnings (e.g. "connection limit
        # reached") are not printed anywhere; the audit log's reasons are counted instead.
        reasons = {}
        try:
            with open(os.path.join(work, "audit.jsonl")) as f:
                for line in f:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    key = "%s/%s" % (ev.get("kind", ev.get("type", "?")), ev.get("reason", "-"))
                    reasons[key] = reasons.get(key, 0) + int(ev.get("count", 1) or 1)
        except OSError:
            pass

        result = {
            "proxy_nofile": proxy_nofile, "script_nofile": nofile,
            "stages": rows,
            "per_conn_kib": per,
            "s1c1": {"warm_up": warm, "baseline": base, "held": loaded, "after_release": after},
            "opened": held.opened, "failed": held.failed,
            "closed_by_proxy": {s: summarize_closed(held.closed.get(s, [])) for s, n in stages if n},
            "open_at_end_of_hold": still_open,
            "audit_lines": reasons,
        }
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        print("proxy RLIMIT_NOFILE %s, script %d" % (proxy_nofile, nofile))
        print("\n%-70s %10s %9s %9s  %s" % ("stage", "RSS KiB", "proxy fds", "held", "note"))
        for r in rows:
            print("%-70s %10s %9s %9s  %s" % (r["stage"], r["rss_kib"], r["proxy_fds"],
                                              r["held_open"], r["note"]))
        print("\n%-28s %10s %9s %9s %8s  %s" % ("S1c1 (oha -c 1)", "200s/s", "p50 ms", "p99 ms",
                                               "200s", "errors"))
        for name, r in result["s1c1"].items():
            if "error" in r:
                print("%-28s %s" % (name, r["error"]))
                continue
            print("%-28s %10.0f %9.3f %9.3f %8d  %s" % (name, r["rps"] or 0, r["p50_ms"],
                                                        r["p99_ms"], r["ok"], r["errors"] or ""))
        print("\n%-24s %8s %8s %16s %14s  %s" % ("held stage", "asked", "opened",
                                                "closed at once", "closed later",
                                                "open at end / never opened"))
        for s, n in stages:
            if not n:
                continue
            c = result["closed_by_proxy"][s]
            later = "%d" % c["later"]
            if c["later"]:
                later += " (%.1f-%.1fs)" % (c["later_min_s"], c["later_max_s"])
            print("%-24s %8d %8d %16d %14s  %d / %s" % (s, n, held.opened.get(s, 0), c["at_once"],
                                                       later, still_open.get(s, 0),
                                                       held.failed.get(s, {})))
        print("\naudit lines (kind/reason: count):", reasons or "none")
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        held.close_all()
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
