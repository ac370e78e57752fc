# Sourced by scripts/demo.sh and scripts/test.sh: install Turnout with its test, docs and lint tools.
#
# Uses a virtual environment in .venv when python3 can make one, so a system Python is left alone.
# Where no venv can be made (python3 without its venv module), it installs into the current Python,
# telling pip to accept a distribution-managed one (PEP 668): that is what a bare CI machine needs.
# Set TURNOUT_NO_VENV=1 to always use the current Python (for instance inside an existing environment).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${TURNOUT_NO_VENV:-}" ]; then
    if [ -x .venv/bin/python3 ] || python3 -m venv .venv >/dev/null 2>&1; then
        # shellcheck disable=SC1091
        . .venv/bin/activate
    else
        rm -rf .venv  # a half-made venv (no pip in it) would be picked up next time
        export PIP_BREAK_SYSTEM_PACKAGES=1
    fi
fi
python3 -m pip install -q -e ".[dev]"
