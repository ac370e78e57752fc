#!/usr/bin/env bash
# Run Python with Turnout installed, from a fresh shell: `bash scripts/py.sh examples/lstm.py`.
#
# Paths are relative to the repository root. The first call sets up (scripts/setup.sh: .venv with
# `pip install -e ".[dev]"`); later calls reuse .venv, or the current Python where no venv can be made.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${TURNOUT_NO_VENV:-}" ] && [ -x .venv/bin/python3 ]; then
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
if ! python3 -c "import turnout, pytest, tqdm" >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    source scripts/setup.sh
fi
exec python3 "$@"
