"""The LSTM training step under a memory budget for its loop, against the store-everything step.

Why: ``tn.while_loop(..., memory_budget=B)`` differentiates a loop by recomputation from the
checkpoints its forward loop keeps online (``turnout.control_flow.checkpoints``,
``turnout.gradients.recompute``), so a training step over a sequence of any length holds at most ``B``
bytes of loop states where the store-everything gradient keeps every iteration's values on stacks.
This measures what that costs on the model of ``benchmarks/lstm.py`` (its ``build``, given the budget),
at lengths where storing everything fits the budget and where it does not. The issue's targets:
within 1.5 times of store-everything when recomputing with about ``sqrt(n)`` checkpoints, and runs at
lengths where storing everything does not fit the budget at all.

The model: batch 16, input 32, hidden 32 (sized for the CPU; ``--batch`` and ``--hidden`` change it).
One loop state (the int32 ``t``, ``h`` and ``c`` of ``[16, 32]`` float32, the float32 loss) is 4 104
bytes, a checkpoint slot 4 108 with its position; the store-everything gradient saves 20 524 bytes per
iteration (ten stacked tensors and their indices; ``tn.memory_report``). The configurations per
sequence length ``T``:

- ``store``: no budget, with gradient stacks of ``stack_chunk=T`` entries (``stack_ladder=False``), so
  its step is one fused call, as a budgeted step is (the default ``stack_chunk``, 1024, would send a
  longer run to the staged path, which drives the loops from the host a chunk at a time);
- ``16 MiB``, ``64 MiB``, ``256 MiB``: the loop's own budget;
- ``sqrt``: a budget of ``isqrt(2T)`` slots, the checkpoint count of the issue's 1.5x target (the
  budgets above hold thousands of this model's states).
- ``64 MiB unbounded``, ``256 MiB unbounded``: those budgets on the loop without its
  ``maximum_iterations`` (every other configuration has it), so that only the runs can tell how many
  slots it needs: the fast backend sizes them from the runs' trip counts (``turnout.slot_sizes``).
- ``run 16 MiB``, ``run sqrt``: the step built as ``store`` is (no budget where its gradient is built),
  the budget given to the run alone (``Session.run(..., memory_budget=)``): a run that outgrows the
  stacks is repeated on the gradient rebuilt to recompute under it (``turnout.rebuild``), as are the
  runs after it; where the stacks fit the budget they run on them.

Per length, in one process: each configuration's first step, then ``--repeat`` rounds of every step
in turn (``benchmarks.common.timed_interleaved``). Reported per configuration: the best step (ms) and
its time per iteration (µs), its ratio to ``store``'s best; the planner's action and slots
(``tn.memory_report(session).plan``) and the schedule's extra forward passes
(``checkpoint_schedule.cost(T, slots).overhead``); the saved bytes the backend reports
(``peak_device_stack_bytes`` and the checkpoint slots, ``checkpoint_bytes``: a recomputed loop's)
beside the plan's bound (``LoopPlan.peak_bytes(T)``); whether store-everything fits the budget (its
bytes per iteration times ``T``); the largest difference from ``store``'s gradients (relative to
their largest value) and whether they are ``allclose``. Per configuration, a fresh process (peak RSS
cannot be reset within one) builds the step, runs it twice and reports its peak resident memory,
beside an idle process that built the model and placed its inputs. ``store`` is left out where its
stacks would pass ``--store-limit-mib``.

The reference interpreter checks the gradients at ``--reference-length`` (1000; ``--quick``: 100):
``store``, ``16 MiB``, ``sqrt`` and ``run sqrt`` there, each ``allclose`` to its own ``store`` and to
the fast one.
(Larger budgets are slow there: with 256 MiB its forward loop had not passed 140 iterations after
10 s.)

Usage: ``bash scripts/py.sh benchmarks/lstm_budget.py [--quick] [--lengths 1000 10000 100000]
[--repeat 3] [--configs store sqrt "run sqrt"]``; writes ``benchmarks/results/lstm_budget.json`` and
``.md`` (untracked).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script: the repository's root, for ``benchmarks`` (last: the
    sys.path.append(ROOT)  # installed ``turnout`` comes first)

import numpy as np  # noqa: E402

import turnout as tn  # noqa: E402
from benchmarks.common import machine, timed_interleaved, write_report  # noqa: E402
from benchmarks.lstm import build  # noqa: E402
from turnout import checkpoint_schedule as cs  # noqa: E402

MIB = 2**20
#: the issue's budgets, in MiB
BUDGETS_MIB = (16, 64, 256)
#: the budgets also measured on the loop without ``maximum_iterations``, in MiB
UNBOUNDED_MIB = (64, 256)
#: the tolerances of ``allclose`` between two gradients of one backend, and between the backends
RTOL, RTOL_BACKENDS = 1e-5, 1e-3


def config_names() -> list[str]:
    """The configurations of one length, ``store`` first."""
    return ["store", *(f"{b} MiB" for b in BUDGETS_MIB), "sqrt", *(f"{b} MiB unbounded" for b in UNBOUNDED_MIB),
            *RUN_BUDGETS]


#: the configurations whose budget is the run's alone
RUN_BUDGETS = (f"run {BUDGETS_MIB[0]} MiB", "run sqrt")


def _saved(stats: dict[str, Any]) -> Optional[int]:
    """The bytes a run's loops saved, by the backend's own accounting: its stack buffers' peak and the
    checkpoint slots of the loops it recomputes (None where it reports neither)."""
    stacks, slots = stats.get("peak_device_stack_bytes"), stats.get("checkpoint_bytes")
    if stacks is None and slots is None:
        return None
    return int(stacks or 0) + sum((slots or {}).values())


def _plan_of(model: dict[str, Any], target: Any = None) -> Any:
    """The loop's plan (``turnout.memory_plan.LoopPlan``) for the step's fetches; ``target``: a
    session (what its last run held) or None (the graph)."""
    return tn.memory_report(target if target is not None else model["graph"],
                            [model["loss"], *model["grads"]]).plan.loop("lstm")


def sizes(batch: int, hidden: int) -> dict[str, int]:
    """The planner's sizes: ``slot`` bytes (a checkpoint of the loop state and its position) and the
    ``store`` bytes the store-everything gradient saves per iteration."""
    slot = _plan_of(build(batch, hidden, hidden, 1, memory_budget=MIB)).entry_bytes
    store = _plan_of(build(batch, hidden, hidden, 1)).entry_bytes
    return {"slot": int(slot), "store": int(store)}


def budget_of(name: str, T: int, slot: int) -> Optional[int]:
    """The loop's budget in bytes for configuration ``name`` at length ``T`` (None: store everything)."""
    if name == "store":
        return None
    name = name.removeprefix("run ")
    if name == "sqrt":
        return math.isqrt(2 * T) * slot
    return int(name.split()[0]) * MIB


def step(name: str, T: int, batch: int, hidden: int, xs: Any, slot: int,
         backend: str = "fast") -> tuple[Any, dict[str, Any], Callable[[], Any]]:
    """A session of configuration ``name``, its model and a function running one training step."""
    per_run = name in RUN_BUDGETS
    budget = budget_of(name, T, slot)
    m = build(batch, hidden, hidden, T, memory_budget=None if per_run else budget, bounded="unbounded" not in name)
    options = {"stack_chunk": max(T, 1), "stack_ladder": False} if name == "store" and backend == "fast" else {}
    sess = tn.Session(m["graph"], backend=backend, **options)
    fetch, feed = [m["loss"], *m["grads"]], {m["xs"]: xs, m["T"]: T}
    opts: dict[str, Any] = {"memory_budget": budget} if per_run else {}
    if backend == "reference":
        return sess, m, lambda: sess.run(fetch, feed, max_seconds=None, **opts)
    return sess, m, lambda: sess.run(fetch, feed, **opts)


def inputs(T: int, batch: int, hidden: int, on_device: bool) -> Any:
    """The input sequence, ``sin(0.7 k)`` for its ``k``-th float, made on the device by one compiled
    call: a ``jax.Array`` for the fast backend (as ``benchmarks/lstm.py`` feeds it: no host-to-device
    copy per step), its numpy copy for the reference interpreter. Why not a random host array placed
    with ``jax.device_put``: it is held twice for a moment (and ``jax.random`` holds its bits beside
    the floats), which at ``T = 100 000`` (205 MB) would set the peak RSS of every small budget."""
    import jax
    import jax.numpy as jnp

    shape = (T, batch, hidden)
    xs = jax.jit(lambda: jnp.sin(0.7 * jax.lax.iota(jnp.float32, math.prod(shape))).reshape(shape))()
    return xs if on_device else np.asarray(xs)


def difference(got: list[Any], want: list[Any], rtol: float) -> tuple[float, bool]:
    """The largest difference over the step's outputs, relative to their largest value, and
    whether every output is ``allclose`` (``rtol``, an ``atol`` of ``rtol`` times that value)."""
    worst, close = 0.0, True
    for a, b in zip(got, want, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        scale = float(np.max(np.abs(b))) + 1e-30
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
        close = close and bool(np.allclose(a, b, rtol=rtol, atol=rtol * scale))
    return worst, close


def measure(T: int, batch: int, hidden: int, repeat: int, size: dict[str, int], store_limit: int,
            only: Optional[list[str]] = None) -> dict[str, Any]:
    """Every configuration (those in ``only``, when given) at length ``T`` in this process, their
    steps interleaved."""
    xs = inputs(T, batch, hidden, on_device=True)
    names = [n for n in config_names() if (n != "store" or size["store"] * T <= store_limit)
             and (only is None or n in only)]
    sessions, calls, got = {}, {}, {}
    for name in names:
        print(f"  T={T} {name}: first step", file=sys.stderr, flush=True)
        sess, model, calls[name] = step(name, T, batch, hidden, xs, size["slot"])
        sessions[name] = (sess, model)
        got[name] = calls[name]()
    times = timed_interleaved(calls, repeat)
    row: dict[str, Any] = {"T": T, "store_bytes": size["store"] * T, "configs": {}}
    for name in names:
        sess, model = sessions[name]
        plan, budget = _plan_of(model, sess), budget_of(name, T, size["slot"])
        rebuilt = sess.last_result.stats.get("rebuilt_gradients")
        if rebuilt:  # (a run budget's: the plan of the rebuilt gradient the session runs)
            plan = next(lp for lp in tn.memory_report(model["graph"]).plan.loops if lp.slots is not None)
        out = {"budget": budget, **times[name], "us_per_iteration": 1e6 * times[name]["min_s"] / T,
               "action": plan.action, "slots": plan.slots, "plan_bytes": plan.peak_bytes(T),
               "extra_forward_passes": None if plan.slots is None else cs.cost(T, plan.slots).overhead,
               "backend_saved_bytes": _saved(sess.last_result.stats),
               "fused": sess.last_result.stats.get("fused"), "rebuilt": bool(rebuilt),
               "store_fits": None if budget is None else size["store"] * T <= budget}
        if "store" in got:
            out["ratio"] = times[name]["min_s"] / times["store"]["min_s"]
            out["max_rel_diff"], out["allclose"] = difference(got[name], got["store"], RTOL)
        row["configs"][name] = out
    return row


def reference_check(T: int, batch: int, hidden: int, size: dict[str, int]) -> dict[str, Any]:
    """The reference interpreter's gradients of ``store``, ``16 MiB`` and ``sqrt`` at length ``T``,
    against its own ``store`` and the fast backend's."""
    _, _, fast = step("store", T, batch, hidden, inputs(T, batch, hidden, on_device=True), size["slot"])
    want_fast = fast()
    xs = inputs(T, batch, hidden, on_device=False)
    out: dict[str, Any] = {"T": T, "configs": {}}
    want = None
    for name in ("store", f"{BUDGETS_MIB[0]} MiB", "sqrt", "run sqrt"):
        print(f"  reference T={T} {name}", file=sys.stderr, flush=True)
        _, _, run = step(name, T, batch, hidden, xs, size["slot"], backend="reference")
        t0 = time.perf_counter()
        got = run()
        took = time.perf_counter() - t0
        want = got if want is None else want
        diff, close = difference(got, want, RTOL)
        diff_fast, close_fast = difference(got, want_fast, RTOL_BACKENDS)
        out["configs"][name] = {"s": took, "max_rel_diff": diff, "allclose": close,
                                "max_rel_diff_fast": diff_fast, "allclose_fast": close_fast}
    return out


def _peak_rss() -> int:
    """This process's peak resident memory in bytes: Linux's ``VmHWM``, the high-water mark of its
    memory map since its ``exec``. Why not ``getrusage``'s ``ru_maxrss``: Linux carries that over
    ``fork`` and ``exec``, so a child of a large parent reports the parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:  # pragma: no cover - not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def child(name: str, T: int, batch: int, hidden: int) -> dict[str, Any]:
    """One configuration in this (fresh) process: two steps, then the peak RSS; ``idle``: the model
    built and its inputs placed, no step."""
    xs = inputs(T, batch, hidden, on_device=True)
    slot = sizes(batch, hidden)["slot"]
    if name == "idle":
        build(batch, hidden, hidden, T, bounded=True)
        return {"peak_rss": _peak_rss(), "step_s": []}
    _, _, run = step(name, T, batch, hidden, xs, slot)
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return {"peak_rss": _peak_rss(), "step_s": times}


def peak_rss(T: int, batch: int, hidden: int, names: list[str]) -> dict[str, Any]:
    """``child`` of each configuration (and ``idle``) at length ``T``, each in its own process."""
    out = {}
    for name in ["idle", *names]:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, str(T), str(batch), str(hidden)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  T={T} {name}: peak RSS {out[name]['peak_rss'] / MIB:.0f} MiB", file=sys.stderr, flush=True)
    return out


def _mib(b: Optional[float]) -> str:
    return "n/a" if b is None else f"{b / MIB:.1f}"


def table(res: dict[str, Any]) -> list[str]:
    """The report: one line per length and configuration, then the reference interpreter's check."""
    a = res["args"]
    lines = [f"# LSTM training step under a memory budget (fast backend, batch {a['batch']}, input and hidden "
             f"{a['hidden']}; best of {a['repeat']} after the first, configurations interleaved)", "",
             "| T | config | budget (MiB) | store-everything fits | plan (slots) | extra passes | best step (ms) "
             "| µs / iteration | ratio to store | backend saved peak (MiB) | plan bound (MiB) | peak RSS (MiB) "
             "| max rel diff (allclose) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in res["rows"]:
        rss = row.get("rss", {})
        for name, c in row["configs"].items():
            fits = "" if c["store_fits"] is None else (
                f"{'yes' if c['store_fits'] else 'no'} ({row['store_bytes'] / MIB:.0f})")
            slots = "" if c["slots"] is None else f" ({c['slots']})"
            extra = "" if c["extra_forward_passes"] is None else f"{c['extra_forward_passes']:.2f}"
            ratio = f"**{c['ratio']:.2f}**" if "ratio" in c else "n/a"
            diff = f"{c['max_rel_diff']:.1e} ({c['allclose']})" if "ratio" in c else "n/a"
            peak = _mib(rss[name]["peak_rss"]) if name in rss else "n/a"
            lines.append(f"| {row['T']} | {name} | {_mib(c['budget'])} | {fits} | {c['action']}{slots} | {extra} | "
                         f"{1e3 * c['min_s']:.1f} | {c['us_per_iteration']:.1f} | {ratio} | "
                         f"{_mib(c['backend_saved_bytes'])} | {_mib(c['plan_bytes'])} | {peak} | {diff} |")
        if "idle" in rss:
            lines.append(f"| {row['T']} | idle process | | | | | | | | | | {_mib(rss['idle']['peak_rss'])} | |")
    ref = res.get("reference")
    if ref:
        lines += ["", f"Reference interpreter at T = {ref['T']} (max rel diff to its store / to the fast store, "
                      "allclose):", "", "| config | s | to its store | to fast store |", "|---|---|---|---|"]
        for name, c in ref["configs"].items():
            lines.append(f"| {name} | {c['s']:.1f} | {c['max_rel_diff']:.1e} ({c['allclose']}) | "
                         f"{c['max_rel_diff_fast']:.1e} ({c['allclose_fast']}) |")
    return lines


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="T = 1000 only, 2 rounds, the reference check at T = 100")
    ap.add_argument("--lengths", type=int, nargs="+", default=None, help="default 1000 10000 100000")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32, help="input and hidden size")
    ap.add_argument("--repeat", type=int, default=None, help="interleaved rounds (default 3; --quick: 2)")
    ap.add_argument("--reference-length", type=int, default=None, help="0: no reference check (default 1000)")
    ap.add_argument("--store-limit-mib", type=int, default=4096, help="leave out store where its stacks pass this")
    ap.add_argument("--no-rss", action="store_true", help="no peak-RSS processes")
    ap.add_argument("--configs", nargs="+", default=None, choices=config_names(),
                    help="only these configurations (default: all)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        name, T, batch, hidden = args.child
        print(json.dumps(child(name, int(T), int(batch), int(hidden))))
        return
    args.lengths = args.lengths or ([1000] if args.quick else [1000, 10000, 100000])
    args.repeat = args.repeat or (2 if args.quick else 3)
    ref_t = args.reference_length if args.reference_length is not None else (100 if args.quick else 1000)
    size = sizes(args.batch, args.hidden)
    rows = []
    for T in args.lengths:
        row = measure(T, args.batch, args.hidden, args.repeat, size, args.store_limit_mib * MIB, args.configs)
        if not args.no_rss:
            row["rss"] = peak_rss(T, args.batch, args.hidden, list(row["configs"]))
        rows.append(row)
    res: dict[str, Any] = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "args": vars(args), "sizes": size, "rows": rows}
    if ref_t:
        res["reference"] = reference_check(ref_t, args.batch, args.hidden, size)
    write_report("lstm_budget", res, table(res))


if __name__ == "__main__":
    main()
