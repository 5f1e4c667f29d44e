#!/usr/bin/env bash
# Soak and fault suite for `airlock proxy` (docs/reliability.md, "Soak and fault suite").
# Not part of `cargo test`. Loopback only; needs root for scenario f (a 1 MiB tmpfs).
#
#   bench/soak/run.sh [--bin target/release/airlock] [--only a,b,c,d,e,f,g] [--json FILE]
#
# a 10,000 concurrent connections   b slowloris heads + bodies   c HTTP/2 stream floods
# d upstream resets mid-body        e policy replaced 100+100 times under load
# f audit log on a full disk (one client), then space freed: service must return
# g the same with 8 concurrent clients
# Prints a markdown table (scenario, served, lost, peak RSS, peak fds, notes); exits 1 if a
# scenario lost a request or failed its check. State: $SOAK_STATE (default target/soak).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${SOAK_STATE:-$PWD/target/soak}
mkdir -p "$STATE"
command -v openssl >/dev/null || { echo "run.sh: needs openssl" >&2; exit 2; }
# h2 (the HTTP/2 flood client) in a venv of our own; nothing else beyond the standard library.
if [[ ! -x $STATE/venv/bin/python ]] || ! "$STATE/venv/bin/python" -c 'import h2' 2>/dev/null; then
  python3 -m venv "$STATE/venv"
  "$STATE/venv/bin/pip" install -q 'h2==4.*'
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-soak.XXXXXX")
cleanup() {
  # Scenario f mounts a tmpfs here; unmount it whatever happened, then remove the rest.
  if mountpoint -q "$work/auditfs" 2>/dev/null; then umount "$work/auditfs" || umount -l "$work/auditfs"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$STATE/venv/bin/python" "$HERE/soak.py" --work "$work" "$@"
