"""The 8-layer LSTM split across two tasks of a Ray cluster, against the same model on one task.

Usage: ``python benchmarks/ray_lstm.py [--layers 8] [--seq 8] [--batch 8] [--hidden 16] [--repeat 3]
[--executor reference|fast|both] [--quick]`` (needs the ``ray`` extra). Starts a local two-node cluster
on 127.0.0.1 (``LocalCluster``), writes ``benchmarks/results/ray_lstm.json`` and prints a table. Not
part of ``benchmarks/run.py``: it starts processes of its own.

The model is the paper's model-parallel example: a stack of LSTM layers unrolled by one
``tn.while_loop`` over time, whose body runs layer ``l`` on task ``l mod 2`` (the layer's cell, its
Variables and its loop variables ``h_l``, ``c_l``; the backward ops follow their forward ops). A
training step is the forward loop, the backward loop ``tn.gradients`` builds (stacks on the task of
the ops that push them) and an SGD update of every Variable on its task. Every iteration, each layer's
output crosses to the other task. Because the loop's iterations may overlap (``parallel_iterations``),
layer ``l + 1`` at time ``t`` can run on one task while layer ``l`` runs at time ``t + 1`` on the
other: the split is a pipeline of two stages. The single-task side runs the same graph with every node
on task 0. Both sides run interleaved, one training step per timed call; the first step of each is
checked against the unpartitioned reference interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import timed_interleaved  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")


def build(layers: int, seq: int, batch: int, hidden: int, task_of_layer: Any, devices: list[str],
          seed: int = 0) -> dict[str, Any]:
    """The stacked LSTM's training step, layer ``l`` placed on ``task_of_layer(l)`` (a device name of
    ``devices``). Returns the graph, the fed input, the loss, the update op and the soft requests that
    put each layer's loop variables with the layer."""
    import numpy as np

    import turnout as tn

    rng = np.random.default_rng(seed)
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [seq, batch, hidden], name="xs")
        weights = []
        for layer in range(layers):
            with tn.device(task_of_layer(layer)):
                w0 = (rng.normal(size=(2 * hidden, 4 * hidden)) * 0.1).astype(np.float32)
                W = tn.Variable(w0, name=f"W{layer}")
                b = tn.Variable(np.zeros(4 * hidden, np.float32), name=f"b{layer}")
                weights.append((W, b, W.read(), b.read()))

        def cell(layer: int, x: Any, h: Any, c: Any) -> tuple[Any, Any]:
            _, _, w, bb = weights[layer]
            H = hidden
            z = tn.matmul(tn.concat([x, h], 1), w) + bb
            i, f = tn.sigmoid(z[:, 0:H]), tn.sigmoid(z[:, H:2 * H])
            o, gg = tn.sigmoid(z[:, 2 * H:3 * H]), tn.tanh(z[:, 3 * H:])
            c2 = f * c + i * gg
            return o * tn.tanh(c2), c2

        def body(t: Any, *state: Any) -> tuple[Any, ...]:
            *hc, loss = state
            x = xs[t]
            out = []
            for layer in range(layers):
                with tn.device(task_of_layer(layer)):
                    x, c = cell(layer, x, hc[2 * layer], hc[2 * layer + 1])
                out += [x, c]
            with tn.device(task_of_layer(layers - 1)):
                loss = loss + tn.reduce_mean(x * x)
            return (t + 1, *out, loss)

        zeros = tn.zeros([batch, hidden], tn.float32)
        init = [tn.constant(0)] + [zeros] * (2 * layers) + [tn.constant(0.0)]
        _, *rest = tn.while_loop(lambda t, *s: t < seq, body, init, name="lstm", parallel_iterations=seq)
        loss = rest[-1]
        variables = [v for W, b, _, _ in weights for v in (W, b)]
        step = tn.train.SGD(0.01).minimize(loss, var_list=variables)
    return {"graph": g, "xs": xs, "loss": loss, "step": step, "requests": loop_variables_follow_body(g, devices)}


def loop_variables_follow_body(graph: Any, devices: list[str]) -> dict[str, str]:
    """Soft requests that put the machinery of every loop variable (Enter, Merge, Switch, Identity,
    NextIteration, Exit), forward and backward, on the device of the body op that computes its next
    value. Without them placement's defaults would leave it on the first device (a Merge follows its
    first input, the Enter from outside the loop), and task 0 would carry every loop variable of the
    backward loop."""
    from turnout.devices import place

    placement = place(graph, devices)
    consumers: dict[int, list[Any]] = {}
    for n in graph.nodes:
        for t in n.inputs:
            consumers.setdefault(t.node.id, []).append(n)
    requests: dict[str, str] = {}
    for nxt in graph.nodes:
        if nxt.op != "NextIteration":
            continue
        device = placement[nxt.inputs[0].node]
        for merge in consumers.get(nxt.id, []):
            chain = [nxt, merge, merge.inputs[0].node]
            for sw in consumers.get(merge.id, []):
                if sw.op == "Switch":
                    chain += [sw, *consumers.get(sw.id, [])]
            requests.update((n.name, device) for n in chain if n.op in ("Enter", "Merge", "Switch", "Identity",
                                                                         "NextIteration", "Exit"))
    return requests


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=8, help="time steps of the loop")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3, help="timed steps of each side (interleaved)")
    ap.add_argument("--executor", choices=("reference", "fast", "both"), default="both",
                    help="the partition executor of the tasks (both: side by side)")
    ap.add_argument("--quick", action="store_true", help="4 time steps, 2 repeats")
    args = ap.parse_args(argv)
    if args.quick:
        args.seq, args.repeat = 4, 2
    executors = ["reference", "fast"] if args.executor == "both" else [args.executor]

    import numpy as np
    import ray  # noqa: F401 - the extra must be installed

    import turnout as tn
    from turnout.devices.local_cluster import LocalCluster

    shape = (args.seq, args.batch, args.hidden)
    xs_value = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    with LocalCluster(nodes=2, num_cpus=1) as lc:
        spec = lc.spec(tasks=2, devices=1)
        t0, t1 = spec.tasks[0].devices[0], spec.tasks[1].devices[0]
        sizes = (args.layers, args.seq, args.batch, args.hidden)
        models = {"split": build(*sizes, lambda layer: (t0, t1)[layer % 2], spec.devices),
                  "single": build(*sizes, lambda layer: t0, spec.devices)}
        want = tn.Session(models["split"]["graph"]).run(models["split"]["loss"], {models["split"]["xs"]: xs_value})
        sessions = {}
        for e in executors:
            for layout, m in models.items():
                sess = tn.Session(m["graph"], cluster=spec, requests=m["requests"], partition_executor=e)
                got = sess.run(m["loss"], {m["xs"]: xs_value})
                np.testing.assert_allclose(got, want, rtol=1e-5)
                sessions[f"{layout}/{e}"] = (sess, m)
        stats: dict[str, Any] = {}

        def step(name: str) -> Any:
            sess, m = sessions[name]
            out = sess.run([m["loss"], m["step"]], {m["xs"]: xs_value})
            stats[name] = dict(sess.backend.last_stats)
            return out

        times = timed_interleaved({name: (lambda name=name: step(name)) for name in sessions}, args.repeat)
        for sess, _ in sessions.values():
            sess.close()
    res: dict[str, Any] = {
        "layers": args.layers, "seq": args.seq, "batch": args.batch, "hidden": args.hidden, "repeat": args.repeat,
        "load_avg": os.getloadavg(), "executors": executors,
    }
    for name, t in times.items():
        st = stats[name]
        res[name] = {**t, "tasks": st["tasks"], "firings": st["firings"],
                     "firings_per_device": st["firings_per_device"],
                     "tokens_between_tasks": st["messages_between_tasks"],
                     "deliver_calls_between_tasks": st["deliver_calls_between_tasks"],
                     "credit_calls_between_tasks": st["credit_calls_between_tasks"],
                     "busy_s_per_task": st["busy_s_per_task"], "wait_s_per_task": st["wait_s_per_task"],
                     **{k: st[k] for k in ("compiled_calls", "interpreted_calls", "compiles") if k in st}}
    for e in executors:
        res[f"speedup_split_over_single/{e}"] = times[f"single/{e}"]["median_s"] / times[f"split/{e}"]["median_s"]
    if len(executors) == 2:
        for layout in models:
            res[f"fast_over_reference/{layout}"] = (times[f"{layout}/reference"]["median_s"]
                                                    / times[f"{layout}/fast"]["median_s"])
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "ray_lstm.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(f"{args.layers}-layer LSTM training step, {args.seq} time steps, batch {args.batch}, hidden {args.hidden} "
          f"(median of {args.repeat}, interleaved, load {res['load_avg'][0]:.1f})")
    for e in executors:
        sp, si = res[f"split/{e}"], res[f"single/{e}"]
        print(f"partition executor {e!r}:")
        print(f"  split over 2 tasks: {sp['median_s'] * 1e3:8.0f} ms per step ({sp['firings']} firings, "
              f"{sp['tokens_between_tasks']} tokens in {sp['deliver_calls_between_tasks']} deliver and "
              f"{sp['credit_calls_between_tasks']} credit messages between tasks; first step "
              f"{sp['first_s']:.1f} s)")
        for t in sorted(sp["busy_s_per_task"]):
            print(f"    {t}: busy {sp['busy_s_per_task'][t]:.2f} s, waiting {sp['wait_s_per_task'][t]:.2f} s")
        print(f"  one task          : {si['median_s'] * 1e3:8.0f} ms per step ({si['firings']} firings)")
        print(f"  split / one task  : {res[f'speedup_split_over_single/{e}']:.2f}x the single-task rate")
    if len(executors) == 2:
        print(f"fast / reference executor: {res['fast_over_reference/split']:.2f}x the rate split over 2 tasks, "
              f"{res['fast_over_reference/single']:.2f}x on one task")
    return res


if __name__ == "__main__":
    main()
