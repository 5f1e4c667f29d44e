#!/usr/bin/env bash
# The c=1 exchange, per request (issue 37; docs/benchmarks.md, "Wakes inside the task"):
# nginx on loopback (TLS, h2 + http/1.1, `return 200 "tiny"`), `airlock proxy --threads N`
# in front of it, a Python `http.client` keep-alive client through CONNECT (N requests
# after 200 of warm-up), and `perf stat` on the proxy: its CPU, context switches, `futex`
# and `epoll_wait` per request.
#
#   bench/c1.sh BIN [REQUESTS=3000] [THREADS=2]
#
# Needs nginx (nginx-light), perf, openssl and python3; the upstream and its PKI come from
# bench/nginx.sh. Leaves nginx running for the next run (`kill $(cat
# target/bench/c1/nginx.pid)` stops it).
set -euo pipefail
bin=$1 n=${2:-3000} threads=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
d=${BENCH_STATE:-$PWD/target/bench}/c1
pki=$("$here/nginx.sh" "$d")
"$bin" proxy --listen 127.0.0.1:18080 --threads "$threads" --ca-cert "$pki/proxy-ca.crt" \
  --ca-key "$pki/proxy-ca.key" --upstream-ca "$pki/upstream-ca.crt" --allow "localhost:18443/" \
  --resolve localhost:127.0.0.1 >"$d/proxy.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
for _ in $(seq 200); do curl -s -o /dev/null 127.0.0.1:18080 && break; sleep 0.05; done
cat > "$d/client.py" <<PY
import http.client, ssl, sys, time
ctx = ssl.create_default_context(cafile="$pki/client-trust.pem")
c = http.client.HTTPSConnection("127.0.0.1", 18080, context=ctx)
c.set_tunnel("localhost", 18443)
def one():
    c.request("GET", "/"); r = c.getresponse(); assert r.status == 200, r.status; r.read()
for _ in range(200): one()
print("go", flush=True); sys.stdin.readline()
t = time.monotonic(); n = int(sys.argv[1])
for _ in range(n): one()
print(f"req/s {n/(time.monotonic()-t):.0f}", flush=True)
PY
coproc CLIENT { python3 "$d/client.py" "$n"; }
read -r _ <&"${CLIENT[0]}"
perf stat -x, -e task-clock,context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait \
  -p "$pid" -o "$d/perf.txt" &
perf_pid=$!
sleep 0.3
echo >&"${CLIENT[1]}"
read -r rate <&"${CLIENT[0]}"
kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
echo "$rate"
awk -F, -v n="$n" '/^[0-9.]/ { printf "%s per request: %.4f\n", $3, $1/n }' "$d/perf.txt"
