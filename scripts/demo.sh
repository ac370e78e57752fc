#!/usr/bin/env bash
# The main job: set up (scripts/setup.sh), then run the demo on the reference backend.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Issue 5 replaces this line with: python3 examples/lstm.py --backend fast "$@"
python3 examples/demo.py "$@"
