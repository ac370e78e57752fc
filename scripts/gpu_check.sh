#!/usr/bin/env bash
# The fast backend on a GPU: its tests, then the benchmarks that compare it with JAX there.
#
#   bash scripts/gpu_check.sh                  # every section, on a machine whose JAX sees a GPU
#   bash scripts/gpu_check.sh tests memory     # the sections named (of: host_loop tests quick memory
#                                              # lstm first_run compile), in that order
#
# CI has no GPU, so nothing here is part of the test run. Where Turnout is not installed (a bare GPU
# machine with JAX but no network), the script runs a copy of the repository laid out as the
# installed package (fast/, reference/, semantics/, devices/ under turnout/). Logs and result files go
# to $OUT (default benchmarks/results/gpu, untracked). The figures of one such run on an H100 are in
# benchmarks/recorded/gpu.md and docs/benchmarks.rst.
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
# Several test processes share the GPU where pytest-xdist is there: none may take most of its memory.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
XDIST=()
if "$PY" -c "import xdist" >/dev/null 2>&1; then XDIST=(-n 8); fi

host_loop() {
    echo "== a stack in host memory inside one compiled program (plain JAX: device, host made inside, host argument)"
    timeout 240 "$PY" benchmarks/host_memory_loop.py > "$OUT/host_memory_loop.txt" 2>&1
    grep -E "^\||^h <-" "$OUT/host_memory_loop.txt"
}
tests() {
    echo "== tests of the fast backend"
    timeout 240 "$PY" -m pytest -q -rf -o addopts="" -p no:cacheprovider --maxfail=30 "${XDIST[@]}" \
        tests/test_fast_device_feeds.py tests/test_fast.py tests/test_fast_gradients.py tests/test_fast_lane.py \
        tests/test_fast_fused.py tests/test_fast_no_hidden_recompile.py tests/test_fast_stack_pointers.py \
        tests/test_fast_memory.py tests/test_fast_run_overhead.py tests/test_fast_repeated_runs.py \
        tests/test_fast_positional_stacks.py tests/test_fast_packing.py tests/test_fast_inside_stacks.py \
        tests/test_fast_counted_nests.py tests/test_fast_ranges.py tests/test_error_parity.py \
        tests/test_fast_plumbing.py tests/test_fast_host_stacks.py tests/test_swap_memory.py > "$OUT/tests.txt" 2>&1
    grep -E "passed|failed|FAILED|Error" "$OUT/tests.txt" | tail -40
}
quick() {
    echo "== quick sizes of the LSTM and the fixed cost of a run"
    timeout 300 "$PY" benchmarks/run.py --quick --only lstm run_overhead > "$OUT/bench_quick.txt" 2>&1
    grep -E "^\||^With" "$OUT/bench_quick.txt"
}
memory() {
    echo "== the paper's memory experiment: swap_memory on and off"
    timeout 300 "$PY" benchmarks/paper/memory.py --repeat 9 > "$OUT/memory.txt" 2>&1
    tail -9 "$OUT/memory.txt"
}
lstm() {
    echo "== LSTM (full sizes)"
    timeout 300 "$PY" benchmarks/run.py --only lstm > "$OUT/lstm_full.txt" 2>&1
    grep -E "^\||^Recompil|^With" "$OUT/lstm_full.txt"
}
first_run() {
    echo "== the first run of a new program, each side in fresh processes"
    timeout 300 "$PY" benchmarks/first_run.py --quick > "$OUT/first_run.txt" 2>&1
    grep "^|" "$OUT/first_run.txt"
}
compile() {
    echo "== compile time against nesting (quick sizes)"
    timeout 300 "$PY" benchmarks/compile_time.py --quick --shapes loops,conds --repeat 2 > "$OUT/compile.txt" 2>&1
    grep "^|" "$OUT/compile.txt"
}

SECTIONS=(host_loop tests quick memory lstm first_run compile)
for section in "${SECTIONS[@]}"; do
    if [ $# -eq 0 ] || [[ " $* " == *" $section "* ]]; then
        "$section"
    fi
done
