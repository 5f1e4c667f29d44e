#!/usr/bin/env bash
# h2 instructions per request (issue 37's "no higher"; docs/benchmarks.md, "h2 instructions
# per request"): `BIN proxy --threads 1` under `valgrind --tool=callgrind`, bench/nginx.sh's
# upstream, and one `curl --http2 -K` with N URLs (one client connection, one CONNECT
# tunnel, N h2 streams in turn) through it, for N = 100 and N = 1100. Prints the whole
# process's instruction count for each and (Ir(1100) − Ir(100)) / 1000 per request.
# Instruction counts do not depend on the machine's load.
#
#   bench/h2_instructions.sh BIN [RUNS=2] [PROTO=h2] [secret]
#
# PROTO h1 sends the same requests as HTTP/1.1 on one keep-alive client connection (the
# path of the harness's S1c1: the client connection's own upstream leg). `secret` gives
# the proxy a secret for the upstream's host and sends its placeholder in `Authorization`,
# as the harness does (the swap, the foreign-credential check and the response scrub run).
#
# Needs valgrind, nginx, curl and openssl. Loopback only; the proxy listens on 18082.
set -euo pipefail
bin=$1 runs=${2:-2} proto=${3:-h2} secret=${4:-}
secret_args=() header_args=()
if [[ $secret == secret ]]; then
  secret_args=(--secret "BENCH_KEY=PLACEHOLDER_BENCH_7f3a=sk-bench-REAL-0123456789abcdef@localhost")
  header_args=(-H "Authorization: Bearer PLACEHOLDER_BENCH_7f3a")
elif [[ -n $secret ]]; then echo "the fourth argument is 'secret' or nothing" >&2; exit 2; fi
case $proto in h2) curl_proto=--http2;; h1) curl_proto=--http1.1;; *) echo "PROTO is h1 or h2" >&2; exit 2;; esac
here=$(cd "$(dirname "$0")" && pwd)
d=${BENCH_STATE:-$PWD/target/bench}/c1
pki=$("$here/nginx.sh" "$d")
out=$d/${proto}ir
mkdir -p "$out"

count() { # N RUN → the process's total Ir
  local n=$1 run=$2 file="$out/callgrind.$1.$2"
  local urls="$out/urls.$n"
  for _ in $(seq "$n"); do printf 'url = "https://localhost:18443/"\noutput = "/dev/null"\n'; done >"$urls"
  valgrind --tool=callgrind --callgrind-out-file="$file" "$bin" proxy --listen 127.0.0.1:18082 \
    --threads 1 --ca-cert "$pki/proxy-ca.crt" --ca-key "$pki/proxy-ca.key" \
    --upstream-ca "$pki/upstream-ca.crt" --allow "localhost:18443/" \
    --resolve localhost:127.0.0.1 "${secret_args[@]}" >"$out/proxy.log" 2>&1 &
  local pid=$!
  local ready=
  for _ in $(seq 600); do
    if curl -s -o /dev/null 127.0.0.1:18082; then ready=1; break; fi
    sleep 0.1
  done
  [[ -n $ready ]] || { kill "$pid"; echo "the proxy did not start (see $out/proxy.log)" >&2; exit 1; }
  curl -s "$curl_proto" "${header_args[@]}" --cacert "$pki/client-trust.pem" -x http://127.0.0.1:18082 -K "$urls" \
    -w '%{http_code}\n' | sort | uniq -c >"$out/codes.$n"
  grep -qx "\s*$n 200" "$out/codes.$n" || { kill "$pid"; cat "$out/codes.$n" >&2; exit 1; }
  kill -TERM "$pid"
  wait "$pid" || true
  awk '/^summary:/ { print $2 }' "$file"
}

for run in $(seq "$runs"); do
  small=$(count 100 "$run")
  large=$(count 1100 "$run")
  echo "run $run: Ir(100) $small, Ir(1100) $large, per $proto request $(( (large - small) / 1000 ))"
done
