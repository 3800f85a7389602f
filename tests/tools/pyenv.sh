#!/usr/bin/env bash
# tests/tools/pyenv.sh - prints a Python that imports every MODULE named, or fails with the reason on
# stderr (the caller then skips, exit 77). Tried in order: $DTRAIN_TEST_PYTHON, python3, then a
# virtual environment this script makes once under $DTRAIN_PYENV (default: the build tree's
# tests/.pyenv) and fills with `pip install PACKAGE...` from PyPI, which is reused by later runs.
# usage: PY=$(tests/tools/pyenv.sh "import tensorboard" tensorboard) || skip
set -u
imports=$1; shift
for p in "${DTRAIN_TEST_PYTHON:-}" python3; do
  [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 && "$p" -c "$imports" 2>/dev/null && { command -v "$p"; exit 0; }
done
[ $# -gt 0 ] || { echo "no python here can: $imports" >&2; exit 1; }
dir=${DTRAIN_PYENV:-$(pwd)/tests/.pyenv}
py=$dir/bin/python
if [ ! -x "$py" ]; then
  python3 -m venv "$dir" >"$dir.log" 2>&1 || { echo "cannot make a venv in $dir (python3-venv missing?): $(tail -1 "$dir.log")" >&2; rm -rf "$dir"; exit 1; }
fi
"$py" -c "$imports" 2>/dev/null && { echo "$py"; exit 0; }
# one installer at a time: tests run in parallel under make -j
exec 9>"$dir.lock"
flock 9
"$py" -c "$imports" 2>/dev/null && { echo "$py"; exit 0; }
if ! timeout 600 "$py" -m pip install -q --disable-pip-version-check "$@" >"$dir.log" 2>&1; then
  echo "pip install $* failed (no network?): $(tail -1 "$dir.log")" >&2; exit 1
fi
"$py" -c "$imports" 2>/dev/null || { echo "installed $* but still cannot: $imports" >&2; exit 1; }
echo "$py"
