"""The paper's applications: a DQN training loop in the graph, and dynamic (greedy) decoding.

``dqn``: environment steps per second of ``examples/dqn.py`` on the fast backend, the whole loop in
one ``while_loop`` (``steps_per_run`` steps per ``Session.run``) against the same agent driven from
Python (one ``Session.run`` per step). The two are the same computation: both runs start from the
same Variables and their episodes are checked to agree.

``decode``: greedy decoding with ``examples/seq2seq.py``'s model on the fast backend (encoder and
decoder loops, the decoder stopping when every sequence has produced EOS) against the same model
written by hand with ``jax.lax.while_loop`` under ``jax.jit``, and against a decode loop driven from
Python (one ``Session.run`` per token). All three decode the same batch with the same weights and
must produce the same tokens.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from types import ModuleType
from typing import Any

import numpy as np

import turnout as tn
from benchmarks.common import timed_pair

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", os.path.join(ROOT, "examples", f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_dqn(quick: bool) -> dict[str, Any]:
    dqn = example("dqn")
    per_run, rounds = (200, 3) if quick else (1000, 5)
    m = dqn.build(dqn.Config(), steps_per_run=per_run)
    graph, python = tn.Session(m["graph"], backend="fast"), tn.Session(m["graph"], backend="fast")
    t0 = time.perf_counter()
    lengths = [graph.run(m["train_loop"])[0]]
    first_graph = time.perf_counter() - t0
    t0 = time.perf_counter()
    driven = [python.run(m["train_step"])[0] for _ in range(per_run)]
    first_python = time.perf_counter() - t0
    g_times, p_times = [], []
    for _ in range(rounds):  # interleaved: both see the same machine load
        t0 = time.perf_counter()
        lengths.append(graph.run(m["train_loop"])[0])
        g_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        driven += [python.run(m["train_step"])[0] for _ in range(per_run)]
        p_times.append(time.perf_counter() - t0)
    agree = bool(np.array_equal(np.concatenate(lengths), np.asarray(driven)))
    g_rate = per_run / float(np.median(g_times))
    p_rate = per_run / float(np.median(p_times))
    return {"steps_per_run": per_run, "rounds": rounds, "in_graph_steps_per_s": g_rate,
            "python_steps_per_s": p_rate, "speedup": g_rate / p_rate, "agree": agree,
            "first_run_s": {"in_graph": first_graph, "python": first_python}}


def jax_decoder(s2s: ModuleType, cfg: Any) -> Any:
    """The seq2seq model's greedy decoder written by hand in JAX: the same GRU, attention and
    stopping rule, with ``lax.while_loop`` for the encoder and the decoder."""
    import jax
    import jax.numpy as jnp

    H, T, U = cfg.hidden, cfg.max_len, cfg.max_len + 1

    def gru(w: Any, b: Any, x: Any, h: Any) -> Any:
        zr = jax.nn.sigmoid(jnp.concatenate([x, h], 1) @ w[:, :2 * H] + b[:2 * H])
        z, r = zr[:, :H], zr[:, H:]
        n = jnp.tanh(jnp.concatenate([x, r * h], 1) @ w[:, 2 * H:] + b[2 * H:])
        return (1 - z) * n + z * h

    def decode(p: dict[str, Any], src: Any, src_len: Any) -> Any:
        B = src.shape[1]
        valid = (jnp.arange(T)[:, None] < src_len[None, :]).astype(jnp.float32)

        def enc_step(c: Any) -> Any:
            t, h, outs = c
            h_new = gru(p["enc/w"], p["enc/b"], p["embedding"][src[t]], h)
            live = valid[t][:, None]
            return t + 1, live * h_new + (1 - live) * h, outs.at[t].set(live * h_new)

        _, h, enc = jax.lax.while_loop(lambda c: c[0] < jnp.max(src_len), enc_step,
                                       (0, jnp.zeros((B, H), jnp.float32), jnp.zeros((T, B, H), jnp.float32)))

        def dec_step(c: Any) -> Any:
            t, y, h, done, out = c
            h = gru(p["dec/w"], p["dec/b"], p["embedding"][y], h)
            scores = jnp.sum(enc * h[None], axis=2) + (valid - 1) * 1e9
            e = jnp.exp(scores - jnp.max(scores, axis=0, keepdims=True)) * valid
            ctx = jnp.sum(enc * (e / jnp.sum(e, axis=0, keepdims=True))[:, :, None], axis=0)
            logits = jnp.tanh(jnp.concatenate([h, ctx], 1) @ p["attn/w"]) @ p["out/w"] + p["out/b"]
            y = jnp.where(done, s2s.EOS, jnp.argmax(logits, axis=1).astype(jnp.int32))
            return t + 1, y, h, done | (y == s2s.EOS), out.at[t].set(y)

        init = (0, jnp.full((B,), s2s.GO, jnp.int32), h, jnp.zeros((B,), bool), jnp.full((U, B), s2s.EOS, jnp.int32))
        t, _, _, _, out = jax.lax.while_loop(lambda c: (c[0] < U) & ~jnp.all(c[3]), dec_step, init)
        return out, t

    return jax.jit(decode)


def run_decode(quick: bool) -> dict[str, Any]:
    import jax

    s2s = example("seq2seq")
    if quick:
        cfg, repeat = s2s.Config(), 5
    else:
        cfg, repeat = s2s.Config(batch=128, hidden=128, embed=32, max_len=20, min_len=10), 20
    m = s2s.build(cfg)
    sess = tn.Session(m["graph"], backend="fast")
    data = s2s.batch(np.random.default_rng(3), cfg)
    feed = s2s.feeds(m, data, train=False)
    params = {k: jax.device_put(v) for k, v in s2s.init_params(cfg).items()}
    hand = jax_decoder(s2s, cfg)
    src, src_len = jax.device_put(data["src"]), jax.device_put(data["src_len"])

    def turnout_decode() -> Any:
        return sess.run([m["tokens"], m["steps"]], feed)

    def jax_decode() -> Any:
        out, t = hand(params, src, src_len)
        return np.asarray(out), int(t)

    got, want = turnout_decode(), jax_decode()
    tt, jt = timed_pair(turnout_decode, jax_decode, repeat)
    py_first = time.perf_counter()
    py_tokens = s2s.decode_python(m, sess, data)
    py_first = time.perf_counter() - py_first
    py_times = []
    for _ in range(max(3, repeat // 4)):
        t0 = time.perf_counter()
        s2s.decode_python(m, sess, data)
        py_times.append(time.perf_counter() - t0)
    py = {"first_s": py_first, "median_s": float(np.median(py_times)), "repeat": len(py_times)}
    return {"batch": cfg.batch, "hidden": cfg.hidden, "max_len": cfg.max_len,
            "decode_steps": int(got[1]), "fast": tt, "jax_while_loop": jt, "python_driven": py,
            "fast_over_jax": tt["median_s"] / jt["median_s"], "python_over_fast": py["median_s"] / tt["median_s"],
            "agree": bool(np.array_equal(got[0], want[0]) and got[1] == want[1]
                          and np.array_equal(py_tokens, got[0]))}


def run(quick: bool) -> dict[str, Any]:
    print("  apps: dqn", flush=True)
    dqn = run_dqn(quick)
    print("  apps: decode", flush=True)
    return {"name": "apps", "dqn": dqn, "decode": run_decode(quick)}


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.apps [--quick]``: run both, write ``benchmarks/results/apps.json`` and
    ``apps.md`` (untracked), and print the tables."""
    import argparse
    import json

    from benchmarks.common import machine
    from benchmarks.run import summary

    ap = argparse.ArgumentParser(description="DQN in-graph vs Python-driven; greedy decoding vs JAX")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    res = {"quick": args.quick, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "load_average": os.getloadavg(), "machine": machine(), "benchmarks": {"apps": run(args.quick)}}
    out = os.path.join(ROOT, "benchmarks", "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "apps.json"), "w") as f:
        json.dump(res, f, indent=2)
    text = summary(res)
    with open(os.path.join(out, "apps.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    raise SystemExit(main())
