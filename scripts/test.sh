#!/usr/bin/env bash
# Everything CI checks: set up (scripts/setup.sh), the default test suite (the docs built with warnings
# as errors are one of its tests, tests/test_docs.py), the linter and the type checker. The suite runs
# in one worker process per core (pytest-xdist), a test file to a worker, so that the tests of one file
# share what they compile. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python3 -m pytest -n auto --dist loadfile "$@"
python3 -m ruff check .
python3 -m mypy turnout reference semantics fast devices
