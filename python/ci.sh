#!/usr/bin/env bash
# The Python package's CI: a fresh virtual environment, `pip install .` at the repository
# root (maturin builds the release `airlock` binary with cargo and installs it with the
# pure-Python `airlock` module), pytest, and the suite in python/tests run against what was
# installed (never the source tree, never a binary from elsewhere).
#
#   python/ci.sh            # PYTHON=python3.9 python/ci.sh for another interpreter
#
# The cargo build shares the workspace's target directory (CARGO_TARGET_DIR, default
# ./target). pytest exiting 5 (nothing collected) is a failure. Needs network access to
# PyPI (maturin, pytest) and the cargo registry, or their caches. With
# AIRLOCK_TEST_REQUIRE=1 (.ci/run exports it) a test that cannot run here (no namespaces,
# no Docker engine, not root) fails instead of skipping (skip_or_fail in
# python/tests/conftest.py); pytest lists every skip with its reason (-rs) either way.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset AIRLOCK_BIN PYTHONPATH

venv="$(mktemp -d "${TMPDIR:-/tmp}/airlock-py-ci.XXXXXX")"
trap 'rm -rf "$venv"' EXIT
"$python" -m venv "$venv"

echo "== pip install . (builds the release binary)"
started=$SECONDS
timeout "${AIRLOCK_PY_BUILD_TIMEOUT:-3600}" "$venv/bin/pip" install --quiet "$root"
echo "pip install . took $((SECONDS - started)) s"
timeout 600 "$venv/bin/pip" install --quiet pytest

# The command landed on the venv's PATH, and the module imported is the installed one.
PATH="$venv/bin:$PATH" command -v airlock | grep -qx "$venv/bin/airlock"
"$venv/bin/airlock" --version
(cd / && "$venv/bin/python" -c '
import airlock, sys
assert airlock.__file__.startswith(sys.prefix), airlock.__file__
assert airlock.find_binary().startswith(sys.prefix), airlock.find_binary()
print("airlock module:", airlock.__file__)
')

echo "== pytest python/tests"
started=$SECONDS
status=0
(cd / && timeout "${AIRLOCK_PY_TEST_TIMEOUT:-1800}" "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs \
  --rootdir "$root/python/tests" "$root/python/tests") || status=$?
echo "pytest took $((SECONDS - started)) s"
if [[ $status -eq 5 ]]; then
  echo "python/ci.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
