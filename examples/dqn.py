"""Deep Q-learning on CartPole with the whole training loop inside the graph.

The paper motivates in-graph control flow with reinforcement learning: an agent's loop — act, step
the environment, store the transition, sample a minibatch, update the Q-network, now and then copy it
to the target network — is a program with data-dependent branches, and running it as Python calls
costs one round trip to the runtime per environment step. Here every part of that loop is graph ops:

* the environment: CartPole's equations of motion (Barto, Sutton & Anderson 1983, as in OpenAI
  Gym), as tensor arithmetic;
* acting: epsilon-greedy through ``tn.cond`` — the Q-network runs only on the greedy branch;
* the replay buffer: Variables, written in place of the oldest transition;
* randomness: a counter-based hash of the global step (no random op is needed, see ``hash_ints``);
* learning: the Huber TD loss, ``tn.gradients`` and Adam (``tn.train.Adam.apply_gradients``);
* the target network: copied from the online network every ``target_every`` steps under a ``tn.cond``.

``build`` makes one graph with two programs over the same Variables: ``train_loop`` runs N
environment steps in one ``tn.while_loop`` (one ``Session.run`` per N steps), ``train_step`` runs one
step (the same agent driven from Python: one ``Session.run`` per step). ``evaluate`` plays greedy
episodes in another ``while_loop`` whose trip count is decided by the data: it stops when every
episode has ended.

The verdict at the end compares the trained greedy policy with a random policy (``random_policy``:
the same CartPole in plain NumPy, actions by coin flip, which keeps the pole up for about 22 steps)
and with the untrained network; the agent has learned when its greedy episodes last at least twice
as long as the random policy's.

    python examples/dqn.py --steps 6000                        # the fast backend (the default)
    python examples/dqn.py --backend reference --steps 1500 --mode python
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import turnout as tn
from turnout.inspect import frame_summary as frame_summary  # the tutorial's listing

# ---- randomness without a random op ---------------------------------------------------------------
# A counter-based generator (in the spirit of Salmon et al.'s Philox, much weaker and much simpler):
# the random integers of step ``t`` are a hash of (t, stream, lane). It uses only int32 Add, Mul,
# Div and FloorMod, with every intermediate product below 2**31, so every backend computes exactly
# the same bits, and the only state is the step counter the loop carries anyway. Each round is a
# multiplication modulo a prime (Park & Miller's "minimal standard", evaluated with Schrage's trick
# so that nothing overflows) or a multiply-with-carry step (Marsaglia), which is a multiplication
# modulo a different prime, or a "square-mix" step that multiplies the low and high halves of the
# value, which makes the map nonlinear, so consecutive lanes and steps do not land on a lattice.
_M = 2**31 - 1


def _lehmer(x: tn.Tensor, a: int) -> tn.Tensor:
    """``a * x mod (2**31 - 1)`` for ``x`` in [1, 2**31 - 2], without overflowing int32."""
    q, r = _M // a, _M % a
    y = a * tn.mod(x, q) - r * (x // q)
    return tn.where(y < 0, y + _M, y)


def _mwc(x: tn.Tensor) -> tn.Tensor:
    """One multiply-with-carry step on a 31-bit value: ``18000 * low16 + high15`` (< 2**31)."""
    return 18000 * tn.mod(x, 65536) + x // 65536


def _square_mix(x: tn.Tensor) -> tn.Tensor:
    """``x + low16(x) * high15(x)`` modulo ``2**31 - 2``: the one nonlinear step. Without it every
    round would be linear modulo some prime, and two inputs a fixed distance apart would give
    outputs a (nearly) fixed distance apart: correlated lanes."""
    return tn.mod(x - (_M - 1) + tn.mod(x, 65536) * (x // 65536), _M - 1) + 1


def _mix(x: tn.Tensor) -> tn.Tensor:
    """Three rounds of (Lehmer, multiply-with-carry, square-mix), then a Lehmer round, whose output
    is uniform over [1, 2**31 - 2]. ``x`` must be in [1, 2**31 - 2]."""
    for a in (16807, 69621, 48271):
        x = _square_mix(tn.mod(_mwc(_lehmer(x, a)), _M - 1) + 1)
    return _lehmer(x, 48271)


def hash_ints(counter: tn.Tensor, stream: int, n: int) -> tn.Tensor:
    """``n`` pseudo-random int32 values in [1, 2**31 - 2] for step ``counter`` and ``stream`` (< 64).

    The key ``counter * 64 + stream`` is hashed; each lane adds its own constant offset (a fixed
    table, drawn once) to the hash and is hashed again, so lanes of one key and different keys give
    unrelated values. The key stays below 2**31 for the first 33 million steps.
    """
    h = _mix(tn.mod(counter * 64 + stream, _M - 1) + 1)
    offsets = np.random.default_rng(n).integers(1, _M - 1, n).astype(np.int32)
    x = tn.mod(h - (_M - 1) + tn.constant(offsets), _M - 1) + 1  # h + offset mod (M - 1), no overflow
    return _mix(x)


def to_uniform(x: tn.Tensor) -> tn.Tensor:
    """float32 values in [0, 1) from ``hash_ints`` output: its top 24 bits, exactly representable."""
    return tn.cast(x // 128, tn.float32) * (1.0 / 2**24)


def hash_uniform(counter: tn.Tensor, stream: int, n: int) -> tn.Tensor:
    """``n`` float32 values in [0, 1) for step ``counter`` and ``stream``."""
    return to_uniform(hash_ints(counter, stream, n))


# ---- the environment: CartPole as graph ops -------------------------------------------------------
GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360


def _sin_cos(th: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
    """Turnout has no Sin/Cos op. An episode ends once |theta| > 0.21 rad, so the angle never exceeds
    about 0.25 rad, where these Taylor polynomials are exact to float32 rounding (error < 1e-8)."""
    t2 = th * th
    return th * (1.0 - t2 * (1.0 / 6 - t2 * (1.0 / 120))), 1.0 - t2 * (0.5 - t2 * (1.0 / 24 - t2 * (1.0 / 720)))


def cartpole_step(s: tn.Tensor, a: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
    """One Euler step (0.02 s) of CartPole for states ``s`` [..., 4] (x, x_dot, theta, theta_dot)
    and int32 actions ``a`` [...] (0 pushes left, 1 right); returns the next state and whether the
    pole fell or the cart left the track."""
    x, x_dot, th, th_dot = (_col(s, k) for k in range(4))
    force = tn.cast(a, tn.float32) * (2 * FORCE) - FORCE
    sin, cos = _sin_cos(th)
    total = CART_MASS + POLE_MASS
    pml = POLE_MASS * HALF_LENGTH
    temp = (force + pml * th_dot * th_dot * sin) / total
    th_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos * cos / total))
    x_acc = temp - pml * th_acc * cos / total
    nxt = [x + TAU * x_dot, x_dot + TAU * x_acc, th + TAU * th_dot, th_dot + TAU * th_acc]
    s2 = tn.stack(nxt) if s.shape == (4,) else tn.transpose(tn.stack(nxt), [1, 0])
    fell = (tn.abs(nxt[0]) > X_LIMIT) | (tn.abs(nxt[2]) > THETA_LIMIT)
    return s2, fell


def _col(s: tn.Tensor, k: int) -> tn.Tensor:
    return s[k] if s.shape == (4,) else s[:, k]


def initial_states(u: tn.Tensor, n: int) -> tn.Tensor:
    """Gym's reset: each coordinate uniform in [-0.05, 0.05]; ``n`` states [n, 4] from ``4 n``
    uniform numbers ``u``."""
    return tn.reshape(u * 0.1 - 0.05, [n, 4])


# ---- the agent ------------------------------------------------------------------------------------
@dataclass
class Config:
    """Hyperparameters. The defaults learn CartPole in a few thousand steps."""

    hidden: int = 64
    gamma: float = 0.99
    learning_rate: float = 1e-3
    batch: int = 64
    capacity: int = 4096
    target_every: int = 250
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay_steps: int = 1000
    max_episode_steps: int = 200
    eval_episodes: int = 16
    seed: int = 0


def q_values(params: list[tn.Tensor], obs: tn.Tensor) -> tn.Tensor:
    """The Q-network: 4 -> hidden -> hidden -> 2, ReLU; ``obs`` [batch, 4] -> [batch, 2]."""
    w1, b1, w2, b2, w3, b3 = params
    h = tn.relu(tn.matmul(obs, w1) + b1)
    h = tn.relu(tn.matmul(h, w2) + b2)
    return tn.matmul(h, w3) + b3


def greedy(q: tn.Tensor) -> tn.Tensor:
    """argmax over CartPole's two actions (ties go to action 0), as int32."""
    return tn.cast(q[:, 1] > q[:, 0], tn.int32)


# Streams of the hash generator: training steps and evaluations never share random numbers.
S_TRAIN, S_EVAL = 1, 2


def build(cfg: Config | None = None, steps_per_run: int = 500) -> dict[str, Any]:
    """The graph: Variables for the networks, the replay buffer and the agent's carried state, and
    the programs ``train_loop`` (``steps_per_run`` steps), ``train_step`` (one) and ``evaluate``.

    ``steps_per_run`` is fixed when building because the per-step log is a TensorArray, whose size
    the fast backend must know when compiling."""
    cfg = cfg or Config()
    rng = np.random.default_rng(cfg.seed)
    H, C = cfg.hidden, cfg.capacity

    def init(shape: tuple[int, ...]) -> np.ndarray:  # He-uniform weights, zero biases
        if len(shape) == 1:
            return np.zeros(shape, np.float32)
        lim = np.sqrt(6.0 / shape[0])
        return rng.uniform(-lim, lim, shape).astype(np.float32)

    shapes = [(4, H), (H,), (H, H), (H,), (H, 2), (2,)]
    names = ["w1", "b1", "w2", "b2", "w3", "b3"]
    g = tn.Graph()
    with g.as_default():
        inits = [init(s) for s in shapes]
        online = [tn.Variable(x, name=f"q/{n}") for x, n in zip(inits, names)]
        target = [tn.Variable(x, name=f"target/{n}", trainable=False) for x, n in zip(inits, names)]
        buf = {
            "obs": tn.Variable(np.zeros((C, 4), np.float32), name="replay/obs", trainable=False),
            "action": tn.Variable(np.zeros(C, np.int32), name="replay/action", trainable=False),
            "next_obs": tn.Variable(np.zeros((C, 4), np.float32), name="replay/next_obs", trainable=False),
            "terminal": tn.Variable(np.zeros(C, np.float32), name="replay/terminal", trainable=False),
        }
        # The agent's carried state, kept between runs: the global step t (which is also the
        # random generator's counter), the current observation, and the episode's length so far.
        state = {
            "t": tn.Variable(np.zeros((), np.int32), name="agent/t", trainable=False),
            "obs": tn.Variable(np.full(4, 0.01, np.float32), name="agent/obs", trainable=False),
            "ep_len": tn.Variable(np.zeros((), np.int32), name="agent/ep_len", trainable=False),
        }
        opt = tn.train.Adam(cfg.learning_rate)
        rows = tn.constant(np.arange(C, dtype=np.int32))

        def copy_target() -> tn.Tensor:
            with tn.control_dependencies([v.assign(u.read()) for v, u in zip(target, online)]):
                return tn.constant(1)

        def agent_step(t: tn.Tensor, obs: tn.Tensor, ep_len: tn.Tensor) -> tuple[Any, ...]:
            """One environment step and one learning step. Returns the new (t, obs, ep_len) and the
            length of the episode that ended at this step (0 if none did).

            Ordering: Variables are read once, after ``t`` arrives; the returned ``t`` is made after
            every write of this step. Inside a loop, where iteration i + 1 may start before
            iteration i has finished, this chain is what keeps iteration i + 1's reads after
            iteration i's writes (without it the program would race, and different schedules could
            give different results)."""
            with tn.control_dependencies([t]):
                w = [v.read() for v in online]
                w_target = [v.read() for v in target]
                mem = {k: v.read() for k, v in buf.items()}
            # this step's random numbers, from one hash: [explore?, random action, reset state (4),
            # minibatch indices (batch)]
            r = hash_ints(t, S_TRAIN, 6 + cfg.batch)
            # act: epsilon-greedy, the network runs only on the greedy branch
            frac = tn.minimum(tn.cast(t, tn.float32) * (1.0 / cfg.eps_decay_steps), 1.0)
            eps = cfg.eps_start + (cfg.eps_end - cfg.eps_start) * frac
            explore = to_uniform(r[0]) < eps
            action = tn.cond(explore,
                             lambda: tn.mod(r[1], 2),
                             lambda: greedy(q_values(w, tn.reshape(obs, [1, 4])))[0],
                             name="epsilon_greedy")
            # the environment
            nxt, fell = cartpole_step(obs, action)
            ep_len2 = ep_len + 1
            timeout = ep_len2 >= cfg.max_episode_steps
            done = fell | timeout
            # store (obs, action, next_obs, fell) in the slot of the oldest transition; a time-out
            # is not a terminal state (the pole is still up), so it bootstraps like any other step
            slot = tn.cast(tn.equal(rows, tn.mod(t, C)), tn.float32)
            mask = tn.expand_dims(slot, 1)
            new = {
                "obs": buf["obs"].assign(mem["obs"] * (1.0 - mask) + mask * obs),
                "action": buf["action"].assign(tn.where(tn.equal(rows, tn.mod(t, C)), action * tn.ones_like(rows),
                                                       mem["action"])),
                "next_obs": buf["next_obs"].assign(mem["next_obs"] * (1.0 - mask) + mask * nxt),
                "terminal": buf["terminal"].assign(mem["terminal"] * (1.0 - slot) + slot * tn.cast(fell, tn.float32)),
            }
            # learn from a minibatch drawn uniformly from the filled part of the buffer
            filled = tn.minimum(t + 1, C)
            idx = tn.mod(r[6:], filled)
            o, a = tn.gather(new["obs"], idx), tn.gather(new["action"], idx)
            o2, term = tn.gather(new["next_obs"], idx), tn.gather(new["terminal"], idx)
            q2 = tn.reduce_max(q_values(w_target, o2), axis=1)
            y = tn.stop_gradient(1.0 + cfg.gamma * (1.0 - term) * q2)  # CartPole's reward is 1 per step
            onehot = tn.cast(tn.equal(tn.expand_dims(a, 1), tn.constant(np.arange(2, dtype=np.int32))), tn.float32)
            q = tn.reduce_sum(q_values(w, o) * onehot, axis=1)
            d = q - y
            huber = tn.where(tn.abs(d) < 1.0, 0.5 * d * d, tn.abs(d) - 0.5)
            loss = tn.reduce_mean(huber)
            grads = tn.gradients(loss, w)
            train = opt.apply_gradients(list(zip(grads, online)), after=[loss])
            # every target_every steps, copy the online network (as updated by this step) to the target
            with tn.control_dependencies([train]):
                copied = tn.cond(tn.equal(tn.mod(t + 1, cfg.target_every), 0), copy_target,
                                 lambda: tn.constant(0), name="copy_target")
            # the next episode starts where this one ended
            reset = tn.reshape(initial_states(to_uniform(r[2:6]), 1), [4])
            obs2 = tn.where(done, reset, nxt)
            finished = tn.where(done, ep_len2, 0)
            with tn.control_dependencies([train, copied, *new.values()]):
                t2 = tn.identity(t + 1)
            return t2, obs2, tn.where(done, 0, ep_len2), finished, loss

        # Program 1: N steps in one while_loop; the episode lengths of the steps go to a TensorArray.
        n_steps = tn.constant(steps_per_run, name="n_steps")
        log0 = tn.TensorArray(tn.int32, size=n_steps, element_shape=[])
        loss_log0 = tn.TensorArray(tn.float32, size=n_steps, element_shape=[])

        def body(i: Any, t: Any, obs: Any, ep_len: Any, log: Any, loss_log: Any) -> tuple[Any, ...]:
            t2, obs2, ep2, finished, loss = agent_step(t, obs, ep_len)
            return i + 1, t2, obs2, ep2, log.write(i, finished), loss_log.write(i, loss)

        s0 = [v.read() for v in state.values()]
        _, t_f, obs_f, ep_f, log, loss_log = tn.while_loop(
            lambda i, *_: i < n_steps, body, [tn.constant(0), *s0, log0, loss_log0], name="train_loop")
        save = [v.assign(x) for v, x in zip(state.values(), [t_f, obs_f, ep_f])]
        with tn.control_dependencies(save):
            episode_lengths = tn.identity(log.stack())
            losses = tn.identity(loss_log.stack())

        # Program 2: one step, driven from Python.
        s1 = [v.read() for v in state.values()]
        t1, obs1, ep1, finished1, loss1 = agent_step(*s1)
        save1 = [v.assign(x) for v, x in zip(state.values(), [t1, obs1, ep1])]
        with tn.control_dependencies(save1):
            step_finished = tn.identity(finished1)
            step_loss = tn.identity(loss1)

        # Program 3: greedy evaluation of E episodes at once, until every one has ended.
        eval_seed = tn.placeholder(tn.int32, [], name="eval_seed")
        E = cfg.eval_episodes
        w_eval = [v.read() for v in online]

        def eval_body(k: Any, s: Any, alive: Any, length: Any) -> tuple[Any, ...]:
            s2, fell = cartpole_step(s, greedy(q_values(w_eval, s)))
            alive_f = tn.cast(alive, tn.float32)
            return (k + 1, s2 * tn.expand_dims(alive_f, 1) + s * tn.expand_dims(1.0 - alive_f, 1),
                    alive & tn.logical_not(fell), length + tn.cast(alive, tn.int32))

        _, _, _, eval_lengths = tn.while_loop(
            lambda k, s, alive, length: (k < cfg.max_episode_steps) & (tn.reduce_max(tn.cast(alive, tn.int32)) > 0),
            eval_body,
            [tn.constant(0), initial_states(hash_uniform(eval_seed, S_EVAL, 4 * E), E), tn.constant(np.ones(E, bool)),
             tn.zeros([E], tn.int32)], name="evaluate")
    return {"graph": g, "config": cfg, "steps_per_run": steps_per_run, "train_loop": [episode_lengths, losses],
            "train_step": [step_finished, step_loss], "eval_seed": eval_seed, "evaluate": eval_lengths,
            "online": online, "target": target, "buffer": buf, "state": state}


def train(backend: str = "reference", steps: int = 3000, mode: str = "graph", steps_per_run: int = 500,
          cfg: Config | None = None, verbose: bool = True, eval_every: int = 500) -> dict[str, Any]:
    """Train for ``steps`` environment steps (rounded up to a multiple of ``steps_per_run`` in graph
    mode). ``mode="graph"``: ``steps_per_run`` steps per ``Session.run`` (the in-graph loop);
    ``mode="python"``: one ``Session.run`` per step. Every ``eval_every`` steps (a multiple of
    ``steps_per_run`` in graph mode) the greedy policy is evaluated, outside the timed training.

    Returns the lengths of the episodes in the order they ended, the step at which each ended, the
    evaluations as (step, mean length), and the training time: ``train_s`` in all, ``first_run_s``
    for the first run (which includes compiling on the fast backend)."""
    m = build(cfg, steps_per_run)
    sess = tn.Session(m["graph"], backend=backend)
    evals = [(0, evaluate(m, sess))]
    episodes: list[int] = []
    ended_at: list[int] = []
    t = 0
    train_s = first_s = 0.0
    while t < steps:
        t0 = time.perf_counter()
        if mode == "graph":
            n = steps_per_run
            lengths, _ = sess.run(m["train_loop"])
            for k in np.nonzero(lengths)[0]:
                episodes.append(int(lengths[k]))
                ended_at.append(t + int(k) + 1)
        elif mode == "python":
            n = 1
            finished, _ = sess.run(m["train_step"])
            if finished:
                episodes.append(int(finished))
                ended_at.append(t + 1)
        else:
            raise ValueError(f"mode must be 'graph' or 'python', got {mode!r}")
        dt = time.perf_counter() - t0
        train_s += dt
        first_s = first_s or dt
        t += n
        if t % eval_every == 0 or t >= steps:
            evals.append((t, evaluate(m, sess)))
            if verbose:
                recent = episodes[-10:]
                print(f"step {t:6d}  episodes {len(episodes):4d}  mean length of the last 10 "
                      f"{np.mean(recent) if recent else 0:6.1f}  greedy evaluation {evals[-1][1]:6.1f}  "
                      f"(training time {train_s:.1f} s)", flush=True)
    return {"backend": backend, "mode": mode, "steps": t, "episodes": episodes, "ended_at": ended_at,
            "evals": evals, "eval_before": evals[0][1], "eval_after": evals[-1][1], "train_s": train_s,
            "first_run_s": first_s}


def plot(run: dict[str, Any], path: str, title: str = "") -> None:
    """The learning curve of a ``train`` result as a PNG: every episode's length at the step it
    ended, their moving average, and the greedy evaluations. Needs matplotlib (``pip install
    turnout[plots]``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ends, lengths = np.asarray(run["ended_at"]), np.asarray(run["episodes"], float)
    ax.scatter(ends, lengths, s=4, alpha=0.3, color="tab:blue", label="training episode (epsilon-greedy)")
    k = 10
    if len(lengths) >= k:
        ax.plot(ends[k - 1:], np.convolve(lengths, np.ones(k) / k, mode="valid"), color="tab:blue",
                label=f"moving average of {k} episodes")
    ev = np.asarray(run["evals"], float)
    ax.plot(ev[:, 0], ev[:, 1], "o-", color="tab:red", ms=3, label="greedy evaluation (16 episodes)")
    ax.set_xlabel("environment step")
    ax.set_ylabel("episode length (= return)")
    ax.set_ylim(0, 210)
    ax.set_title(title or f"DQN on CartPole, {run['backend']} backend, {run['mode']} mode")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def numpy_episode_lengths(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """CartPole in plain NumPy (the equations of ``cartpole_step``, in float64 with exact sine and
    cosine): the length of each episode from start ``states`` [E, 4] under ``actions`` [T, E] (0 left,
    1 right), capped at T."""
    x, x_dot, th, th_dot = np.asarray(states, float).T
    alive, length = np.ones(len(x), bool), np.zeros(len(x), int)
    total, pml = CART_MASS + POLE_MASS, POLE_MASS * HALF_LENGTH
    for a in actions:
        force = np.where(a == 1, FORCE, -FORCE)
        sin, cos = np.sin(th), np.cos(th)
        temp = (force + pml * th_dot * th_dot * sin) / total
        th_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos * cos / total))
        x_acc = temp - pml * th_acc * cos / total
        x, x_dot, th, th_dot = x + TAU * x_dot, x_dot + TAU * x_acc, th + TAU * th_dot, th_dot + TAU * th_acc
        length += alive
        alive &= (np.abs(x) <= X_LIMIT) & (np.abs(th) <= THETA_LIMIT)
        if not alive.any():
            break
    return length


def random_policy(episodes: int = 2000, max_steps: int = 200, seed: int = 0) -> float:
    """Mean episode length of a policy that pushes left or right by coin flip, from Gym's reset, on
    the NumPy CartPole (``numpy_episode_lengths``): the baseline the trained agent is judged against
    (about 22 steps)."""
    rng = np.random.default_rng(seed)
    states = rng.uniform(-0.05, 0.05, (episodes, 4))
    return float(numpy_episode_lengths(states, rng.integers(0, 2, (max_steps, episodes))).mean())


def verdict(result: dict[str, Any], baseline: float) -> str:
    """One line: has the greedy policy learned, judged against a random policy's ``baseline``?"""
    after, before = result["eval_after"], result["eval_before"]
    against = (f"a random policy keeps it up {baseline:.1f} steps (plain NumPy CartPole), "
               f"the untrained network {before:.1f}")
    if after >= 2 * baseline:
        return f"Verdict: learned: the greedy policy keeps the pole up {after:.1f} steps on average; {against}"
    return (f"Verdict: not learned yet: the greedy policy keeps the pole up {after:.1f} steps on average, under twice "
            f"a random policy's; {against}. Train longer (--steps)")


def evaluate(m: dict[str, Any], sess: Any, seed: int = 12345) -> float:
    """Mean length of ``eval_episodes`` greedy episodes (capped at ``max_episode_steps``)."""
    return float(np.mean(sess.run(m["evaluate"], {m["eval_seed"]: seed})))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["fast", "reference"], default="fast",
                    help="fast: compiled with JAX (default); reference: the interpreter, the oracle (much slower)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--mode", choices=["graph", "python"], default="graph",
                    help="graph: --steps-per-run steps in one Session.run (default); python: one run per step")
    ap.add_argument("--steps-per-run", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the run (episodes, evaluations, times) to this JSON file")
    ap.add_argument("--plot", help="write the learning curve to this PNG (needs matplotlib)")
    args = ap.parse_args()
    if args.steps < 1 or args.steps_per_run < 1:
        ap.error("--steps and --steps-per-run must be positive")
    how = (f"the training loop in the graph, {args.steps_per_run} steps per Session.run" if args.mode == "graph"
           else "driven from Python, one Session.run per step")
    print(f"Task: deep Q-learning on CartPole for {args.steps} environment steps, {how}; backend: {args.backend}",
          flush=True)
    result = train(args.backend, args.steps, args.mode, args.steps_per_run, Config(seed=args.seed))
    print(f"{result['steps']} steps in {result['train_s']:.1f} s ({result['first_run_s']:.1f} s in the first run); "
          f"greedy evaluation {result['eval_before']:.1f} before training, {result['eval_after']:.1f} after")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
        print(f"wrote the run to {args.json}")
    if args.plot:
        plot(result, args.plot)
        print(f"wrote the learning curve to {args.plot}")
    print(verdict(result, random_policy(max_steps=Config().max_episode_steps)))
