#!/usr/bin/env bash
# Everything CI checks: set up (scripts/setup.sh), the default test suite, the docs with warnings as
# errors, the linter and the type checker. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python3 -m pytest "$@"
python3 -m sphinx -W --keep-going -q -b html docs docs/_build/html
python3 -m ruff check .
python3 -m mypy turnout reference semantics fast devices
