"""Model parallelism: an 8-layer LSTM with layer l on device l mod D, step time and speedup against D.

The paper splits a deep LSTM layer by layer over devices and lets ``parallel_iterations`` pipeline the
time steps: device l may run time step t+1 of its layer while device l+1 runs step t. Here the model is
one ``tn.while_loop`` over time whose body runs the 8 layers, each under ``tn.device`` for device
``l mod D``; its weights are Variables on the same device, read once outside the loop. The forward step
(the top layer's last output) is timed for D = 1, 2, 4, 8 and the speedup is time(D=1) / time(D).

A training step (the gradient of the loss with respect to every layer's weights: a backward loop with
gradient stacks on each layer's device) is timed too. Both run on the fast partitioned executor
(``tn.Session(graph, backend="fast", devices=...)``) in its two ways of running a loop that spans
devices, side by side: driven from the host (``whole_program="never"``: per-device segments dispatched
asynchronously, so ``parallel_iterations`` pipelines the layers) and as one SPMD program
(``whole_program="always"``: every device runs each iteration in lockstep, so the layers of one step
run one after the other). With D = 1 the whole graph sits on one device and both run it as the
unpartitioned fast backend does. That backend's own step is the one-device baseline.

On forced host CPU devices of a 2-core machine no speedup is expected: the "devices" share the two
cores. On GPUs the paper's target is a speedup of at least 0.8 x D.
Usage: ``python benchmarks/paper/model_parallel.py [--quick] [--docs]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.paper.common import force_host_devices, pyplot, save_plot, write_results  # noqa: E402

NAME = "model_parallel"
DEVICE_COUNTS = (1, 2, 4, 8)
LAYERS = 8


def build(ndev: int, batch: int, hidden: int, steps: int, parallel_iterations: int = 32,
          seed: int = 0) -> dict[str, Any]:
    """The layered LSTM; returns the graph, the placeholders, the output and the weights."""
    import numpy as np

    import turnout as tn

    rng = np.random.default_rng(seed)
    H = hidden
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [steps, batch, H], name="xs")
        T = tn.placeholder(tn.int32, [], name="T")
        weights, reads, state0 = [], [], []
        for layer in range(LAYERS):
            with tn.device(f"cpu:{layer % ndev}"):
                W = tn.Variable((rng.normal(size=(2 * H, 4 * H)) * (0.5 / np.sqrt(H))).astype(np.float32),
                                name=f"W{layer}")
                b = tn.Variable(np.zeros(4 * H, np.float32), name=f"b{layer}")
                weights += [W, b]
                reads.append((W.read(), b.read()))
                zeros = tn.zeros([batch, H], tn.float32)
                state0 += [zeros, zeros]
        with tn.device("cpu:0"):
            t0 = tn.constant(0, name="t0")

        def body(t: Any, *state: Any) -> Any:
            out: list[Any] = []
            with tn.device("cpu:0"):
                x = xs[t]
            for layer in range(LAYERS):
                h, c = state[2 * layer], state[2 * layer + 1]
                w, bb = reads[layer]
                with tn.device(f"cpu:{layer % ndev}"):
                    z = tn.matmul(tn.concat([x, h], 1), w) + bb
                    i, f = tn.sigmoid(z[:, 0:H]), tn.sigmoid(z[:, H:2 * H])
                    o, gg = tn.sigmoid(z[:, 2 * H:3 * H]), tn.tanh(z[:, 3 * H:])
                    c2 = f * c + i * gg
                    x = o * tn.tanh(c2)
                out += [x, c2]
            with tn.device("cpu:0"):
                return (t + 1, *out)

        res = tn.while_loop(lambda t, *s: t < T, body, [t0, *state0], parallel_iterations=parallel_iterations)
        top = res[-2]
        with tn.device(f"cpu:{(LAYERS - 1) % ndev}"):
            loss = tn.reduce_mean(top * top)
        grads = tn.gradients(loss, weights)
    return {"graph": g, "xs": xs, "T": T, "top": top, "loss": loss, "grads": grads}


#: the two ways the fast partitioned executor can run a loop spanning devices (``whole_program``)
MODES = {"never": "host-driven, pipelined", "always": "SPMD, lockstep"}


def runners(m: dict[str, Any], ndev: int, mode: str) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Any]:
    """(forward(feeds), training step(feeds), session) on the fast partitioned executor: ``mode`` is its
    ``whole_program`` option — "never" drives the spanning loops from the host, dispatching per-device
    segments asynchronously so that ``parallel_iterations`` pipelines the layers; "always" compiles the
    program as one ``shard_map`` program whose devices run each iteration in lockstep."""
    import turnout as tn

    devs = [f"cpu:{k}" for k in range(ndev)]
    sess = tn.Session(m["graph"], backend="fast", devices=devs, whole_program=mode)
    return (lambda f: sess.run(m["top"], f)), (lambda f: sess.run(m["grads"], f)), sess


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: a small model on 1 and 2 devices, few repeats")
    ap.add_argument("--docs", action="store_true", help="also write the plot to docs/_static/paper/")
    args = ap.parse_args(argv)
    force_host_devices(max(DEVICE_COUNTS))
    import jax
    import numpy as np

    import turnout as tn
    from benchmarks.common import timed, timed_pair

    batch, hidden, steps = (4, 32, 6) if args.quick else (16, 128, 30)
    repeat = 2 if args.quick else 5
    xs = np.random.default_rng(1).normal(size=(steps, batch, hidden)).astype(np.float32)
    rows = []
    base_m = build(1, batch, hidden, steps)
    base = tn.Session(base_m["graph"], backend="fast")
    base_feeds = {base_m["xs"]: xs, base_m["T"]: steps}
    want = base.run(base_m["top"], base_feeds)
    want_grads = base.run(base_m["grads"], base_feeds)
    base_train = timed(lambda: base.run(base_m["grads"], base_feeds), repeat)
    counts = DEVICE_COUNTS[:2] if args.quick else DEVICE_COUNTS  # a smoke run compiles less
    for ndev in counts:
        m = build(ndev, batch, hidden, steps)
        feeds = {m["xs"]: xs, m["T"]: np.int32(steps)}
        for mode in MODES:
            fwd, train, sess = runners(m, ndev, mode)
            got = fwd(feeds)
            tier = sess.last_result.stats.get("tier")
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
            t, b = timed_pair(lambda f=fwd, fd=feeds: f(fd), lambda: base.run(base_m["top"], base_feeds), repeat)
            row: dict[str, Any] = {"devices": ndev, "mode": mode, "tier": tier, "forward": t, "fast_one_device": b,
                                   "forward_ms": 1e3 * t["median_s"], "fast_one_device_ms": 1e3 * b["median_s"]}
            for a, b_ in zip(train(feeds), want_grads, strict=True):
                np.testing.assert_allclose(np.asarray(a), b_, rtol=1e-3, atol=1e-5)
            row["train_tier"] = sess.last_result.stats.get("tier")
            tr = timed(lambda f=train, fd=feeds: f(fd), repeat)
            row["train"], row["train_ms"] = tr, 1e3 * tr["median_s"]
            rows.append(row)
            print(f"D={ndev} {MODES[mode]}: forward {row['forward_ms']:.1f} ms (tier {tier}); unpartitioned fast "
                  f"backend {row['fast_one_device_ms']:.1f} ms; training step {row['train_ms']:.1f} ms "
                  f"(tier {row['train_tier']})", flush=True)
    for r in rows:
        first = next(r1 for r1 in rows if r1["mode"] == r["mode"])
        r["speedup"] = first["forward_ms"] / r["forward_ms"]
        r["train_speedup"] = first["train_ms"] / r["train_ms"]
        r["target_speedup_gpu"] = 0.8 * r["devices"]
    res = {"name": NAME, "quick": args.quick, "layers": LAYERS, "batch": batch, "hidden": hidden, "steps": steps,
           "parallel_iterations": 32, "platform": jax.devices()[0].platform, "rows": rows,
           "fast_one_device_train": base_train, "fast_one_device_train_ms": 1e3 * base_train["median_s"]}
    print(f"unpartitioned fast backend training step: {res['fast_one_device_train_ms']:.1f} ms")
    res["results_path"] = write_results(NAME, res)
    res["plots"] = plot(rows, args.docs)
    return res


def plot(rows: list[dict[str, Any]], docs: bool) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    for mode, label in MODES.items():
        rs = [r for r in rows if r["mode"] == mode]
        ds = [r["devices"] for r in rs]
        a1.plot(ds, [r["forward_ms"] for r in rs], "o-", label=f"forward, {label}")
        a1.plot(ds, [r["train_ms"] for r in rs], "s--", label=f"training, {label}")
        a2.plot(ds, [r["speedup"] for r in rs], "o-", label=f"forward, {label}")
        a2.plot(ds, [r["train_speedup"] for r in rs], "s--", label=f"training, {label}")
    ds = sorted({r["devices"] for r in rows})
    a1.plot(ds, [rows[0]["fast_one_device_ms"]] * len(ds), "k:", label="forward, unpartitioned fast backend")
    a1.set_xlabel("devices D (layer l on device l mod D)")
    a1.set_ylabel("step time (ms)")
    a1.legend(fontsize=6)
    a2.plot(ds, [0.8 * d for d in ds], "--", color="gray", label="GPU target 0.8 x D")
    a2.set_xlabel("devices D")
    a2.set_ylabel("speedup time(1) / time(D)")
    a2.legend(fontsize=6)
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xticks(list(DEVICE_COUNTS), [str(d) for d in DEVICE_COUNTS])
        a.grid(True, alpha=0.3)
    fig.suptitle("8-layer LSTM, model parallel")
    paths = save_plot(fig, NAME, docs=docs)
    plt.close(fig)
    return paths


if __name__ == "__main__":
    main()
