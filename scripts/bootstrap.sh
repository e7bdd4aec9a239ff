#!/usr/bin/env bash
# Creates .venv (once) and installs the project with its test extras when pyproject.toml
# changed since the last install. Sourced by scripts/test and scripts/demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FW_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

command -v "$PYTHON" >/dev/null || { echo "error: $PYTHON not found; install Python >= 3.11" >&2; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "error: Python >= 3.11 is required ($PYTHON is $("$PYTHON" -V 2>&1))" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.fw-installed"
want="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[bootstrap] installing the project and its test dependencies (first time: pyspark is large)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
