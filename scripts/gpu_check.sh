#!/usr/bin/env bash
# The fast backend on a GPU: its tests, then the benchmarks that compare it with JAX there.
#
#   bash scripts/gpu_check.sh            # on a machine whose JAX sees a GPU
#
# CI has no GPU, so nothing here is part of the test run. Where Turnout is not installed (a bare GPU
# machine with JAX but no network), the script runs a copy of the repository laid out as the
# installed package (fast/, reference/, semantics/, devices/ under turnout/). Logs and result files go
# to $OUT (default benchmarks/results/gpu, untracked). The figures of one such run on an H100 are in
# benchmarks/recorded/gpu_h100.md and docs/benchmarks.rst.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/benchmarks/results/gpu}"
mkdir -p "$OUT"
# The project's environment where there is one (as scripts/py.sh finds or makes it); a Python that
# already has JAX and pytest (a GPU image without network) as it is.
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python3 ]; then
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
if ! python3 -c "import jax, pytest" >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    source scripts/setup.sh
fi
PY=python3
if ! "$PY" -c "import turnout.fast" >/dev/null 2>&1; then
    rm -rf /tmp/turnout-gpu && cp -r . /tmp/turnout-gpu && cd /tmp/turnout-gpu || exit 1
    for m in fast reference semantics devices; do rm -rf "turnout/$m"; mv "$m" "turnout/$m"; done
    export PYTHONPATH=$PWD
fi
"$PY" -c "import jax, sys; print(sys.version.split()[0], 'jax', jax.__version__, jax.devices())" | tee "$OUT/env.txt"
echo "== tests of the fast backend"
timeout 600 "$PY" -m pytest -q -o addopts="" -p no:cacheprovider --maxfail=30 \
    tests/test_fast_device_feeds.py tests/test_fast.py tests/test_fast_gradients.py tests/test_fast_lane.py \
    tests/test_fast_fused.py tests/test_fast_no_hidden_recompile.py tests/test_fast_stack_pointers.py \
    tests/test_fast_memory.py tests/test_fast_run_overhead.py tests/test_fast_repeated_runs.py \
    tests/test_fast_positional_stacks.py tests/test_fast_packing.py tests/test_fast_inside_stacks.py \
    tests/test_fast_counted_nests.py tests/test_fast_ranges.py tests/test_error_parity.py > "$OUT/tests.txt" 2>&1
grep -E "passed|failed|FAILED" "$OUT/tests.txt" | tail -20
echo "== LSTM (full sizes), then quick sizes and the fixed cost of a run"
timeout 300 "$PY" benchmarks/run.py --only lstm > "$OUT/lstm_full.txt" 2>&1
grep -E "^\||^Recompil|^With" "$OUT/lstm_full.txt"
timeout 300 "$PY" benchmarks/run.py --quick --only lstm run_overhead > "$OUT/bench_quick.txt" 2>&1
grep -E "^\||^With" "$OUT/bench_quick.txt"
echo "== the paper's memory experiment: swap_memory on and off"
timeout 300 "$PY" benchmarks/paper/memory.py --repeat 9 > "$OUT/memory.txt" 2>&1
tail -9 "$OUT/memory.txt"
echo "== the first run of a new program, each side in fresh processes"
timeout 300 "$PY" benchmarks/first_run.py --quick > "$OUT/first_run.txt" 2>&1
grep "^|" "$OUT/first_run.txt"
echo "== compile time against nesting (quick sizes)"
timeout 300 "$PY" benchmarks/compile_time.py --quick --shapes loops,conds --repeat 2 > "$OUT/compile.txt" 2>&1
grep "^|" "$OUT/compile.txt"
