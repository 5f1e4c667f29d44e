#!/usr/bin/env bash
# Bench adapter: `airlock proxy` with the outbound guard switched off, for the guard-on /
# guard-off comparison in docs/benchmarks.md ("Outbound guard"). It takes the harness's
# proxy contract (see ../shared/bench/proxies/airlock.sh), drops the `--secret` arguments
# (a configured secret's real value is always guarded) and adds a policy with
# `dlp: {credentials: off}`; the rest goes to the shared adapter, which execs the proxy
# (so the harness's PID is the proxy's).
#
#   ../shared/bench/run.sh --name airlock-guard-off --only S3ul ... bench/airlock-guard-off.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
adapter=${AIRLOCK_ADAPTER:-$here/../../shared/bench/proxies/airlock.sh}
state=${BENCH_STATE:-$PWD/target/bench}/guard-off
mkdir -p "$state"
printf 'version: 1\ndlp: {credentials: off}\n' > "$state/policy.yaml"
bin=$(realpath "${AIRLOCK_BIN:-./target/release/airlock}")
printf '#!/bin/sh\nexec %q "$@" --policy %q\n' "$bin" "$state/policy.yaml" > "$state/airlock"
chmod +x "$state/airlock"
args=()
while (($#)); do
  case $1 in
    --secret) shift 2;;
    *) args+=("$1"); shift;;
  esac
done
AIRLOCK_BIN=$state/airlock exec "$adapter" "${args[@]}"
