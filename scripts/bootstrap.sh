#!/usr/bin/env bash
# Creates .venv (once), installs the project with its test extras when pyproject.toml changed
# since the last install, and activates .venv. Sourced by scripts/test and scripts/demo, and by
# hand (`source scripts/bootstrap.sh`): it changes nothing in the calling shell but what the
# virtualenv's activate does (PATH, VIRTUAL_ENV, deactivate), leaves the shell's options and
# variables as they were, and on a failure prints one line and returns 1 instead of exiting.
# pip's output is shown only when it fails.

_fw_bootstrap() {
  local root venv python stamp want log
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
  venv="${FW_VENV:-$root/.venv}"
  python="${PYTHON:-python3}"

  if ! command -v "$python" >/dev/null; then
    echo "error: $python not found; install Python >= 3.11 (or name it in PYTHON)" >&2
    return 1
  fi
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: Python >= 3.11 is required ($python is $("$python" -V 2>&1)); name another in PYTHON" >&2
    return 1
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "[bootstrap] creating virtualenv $venv"
    "$python" -m venv "$venv" || { echo "error: could not create the virtualenv $venv" >&2; return 1; }
  fi
  stamp="$venv/.fw-installed"
  want="$(sha256sum < "$root/pyproject.toml" | cut -d' ' -f1)" || return 1
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "[bootstrap] installing the project and its test dependencies (first time: pyspark is large)"
    log="$venv/.fw-install.log"
    if ! { "$venv/bin/python" -m pip install -q --upgrade pip &&
           "$venv/bin/python" -m pip install -q -e "$root[test]"; } >"$log" 2>&1; then
      cat "$log" >&2
      echo "error: installing the project into $venv failed (pip's output above, also in $log)" >&2
      return 1
    fi
    echo "$want" > "$stamp"
  fi
  # shellcheck disable=SC1091  # the virtualenv's own script: PATH, VIRTUAL_ENV, deactivate
  . "$venv/bin/activate"
}

if _fw_bootstrap; then
  unset -f _fw_bootstrap
else
  unset -f _fw_bootstrap
  return 1 2>/dev/null || exit 1  # sourced: back to the caller (a shell stays open); run: exit
fi
