#!/usr/bin/env bash
# The main job: set up (scripts/setup.sh), then train the LSTM example on the fast (JAX) backend.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# examples/demo.py (a while loop with a cond inside, traced on the reference backend) is the smaller tour.
python3 examples/lstm.py --backend fast "$@"
