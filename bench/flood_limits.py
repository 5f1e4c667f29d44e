#!/usr/bin/env python3
"""Memory flood for docs/reliability.md: starts `airlock proxy` with a `json_deny` host
(whose bodies are read whole) and the given `limits:`, opens CONNS connections that each
send a POST announcing BODY bytes of JSON, send half of it, hold it HOLD seconds, send the
rest; then prints the answers by status and the proxy's peak RSS (VmHWM).

    bench/flood_limits.py [--bin target/release/airlock] [--limits '{buffer_memory: 64MiB}']
                          [--conns 400] [--body 921600] [--hold 5] [--heaptrack]
                          [--sources N]

--sources N spreads the connections over N loopback addresses (127.0.0.1, 127.0.0.2, ...),
so that more than `connections_per_client` (512) can be open at once.

Loopback only; the upstream (port 9) is never reached: refused or unreachable answers are
fine, what is measured is what the proxy holds while the bodies arrive.
"""
import argparse
import collections
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(port, body, hold, statuses, lock, source="127.0.0.1"):
    head = (
        "POST http://flood.test:9/v1 HTTP/1.1\r\nHost: flood.test:9\r\n"
        "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % body
    ).encode()
    payload = b"{" + b" " * (body - 2) + b"}"
    status = "error"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60,
                                      source_address=(source, 0)) as s:
            s.sendall(head + payload[: body // 2])
            time.sleep(hold)
            try:
                s.sendall(payload[body // 2 :])
            except OSError:
                pass
            answer = s.recv(64)
            status = answer.split(b" ")[1].decode() if answer else "closed"
    except OSError as e:
        status = type(e).__name__
    with lock:
        statuses[status] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/airlock")
    ap.add_argument("--limits", default="{}")
    ap.add_argument("--conns", type=int, default=400)
    ap.add_argument("--body", type=int, default=900 * 1024)
    ap.add_argument("--hold", type=float, default=5)
    ap.add_argument("--heaptrack", action="store_true")
    ap.add_argument("--sources", type=int, default=1)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="flood-")
    policy = os.path.join(work, "policy.yaml")
    with open(policy, "w") as f:
        f.write(
            "version: 1\ndlp: {credentials: off}\nlimits: %s\nnetwork:\n  allow:\n"
            "    - host: flood.test\n      ports: [9]\n      json_deny:\n"
            "        - path: /x\n" % args.limits
        )
    port = free_port()
    command = [args.bin, "proxy", "--listen", "127.0.0.1:%d" % port, "--policy", policy,
               "--log", os.path.join(work, "audit.jsonl"),
               "--resolve", "flood.test:127.0.0.1"]
    if args.heaptrack:
        command = ["heaptrack", "-o", os.path.join(work, "heaptrack")] + command
    env = dict(os.environ, AIRLOCK_HOME=os.path.join(work, "home"))
    proxy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=env)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    pid = proxy.pid
    if args.heaptrack:
        time.sleep(1)
        pid = int(subprocess.check_output(["pgrep", "-P", str(proxy.pid), "-n"]).split()[0]) \
            if subprocess.run(["pgrep", "-P", str(proxy.pid)], capture_output=True).stdout \
            else proxy.pid
    statuses, lock = collections.Counter(), threading.Lock()
    threads = [threading.Thread(target=client, args=(port, args.body, args.hold, statuses, lock,
                                                     "127.0.0.%d" % (1 + i % args.sources)))
               for i in range(args.conns)]
    started = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    hwm = "?"
    try:
        with open("/proc/%d/status" % pid) as f:
            hwm = next(l.split(":")[1].strip() for l in f if l.startswith("VmHWM"))
    except OSError:
        pass
    if pid != proxy.pid:
        os.kill(pid, signal.SIGTERM)  # the proxy under heaptrack: let it write its data
    else:
        proxy.terminate()
    proxy.wait(60)
    print("limits=%s conns=%d body=%d: %s in %.1fs; peak RSS (VmHWM) %s"
          % (args.limits, args.conns, args.body, dict(statuses), time.time() - started, hwm))
    if args.heaptrack:
        print("heaptrack data in", work)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
