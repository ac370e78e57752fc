"""The application examples (examples/dqn.py, examples/seq2seq.py) in short configurations.

Each learning test asserts a level that an untrained model cannot reach: a CartPole agent whose
greedy policy is a fixed random network keeps the pole up for about 10 steps, and a random policy for
about 22; the trained agent must average 60. Runs that must agree across backends or drivers compare
the whole trajectory (the episode lengths, step by step) and the learned weights.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import turnout as tn

ROOT = Path(__file__).resolve().parent.parent


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_example", ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def dqn() -> ModuleType:
    return _example("dqn")


# ---- the in-graph random numbers --------------------------------------------------------------------
def test_hash_generator_is_uniform_and_uncorrelated(dqn: ModuleType) -> None:
    """400 steps x 32 lanes: the mean, the variance, and the correlations between lanes and between
    consecutive steps are those of independent uniform numbers (within 5 standard errors)."""
    g = tn.Graph()
    with g.as_default():
        t = tn.placeholder(tn.int32, [400, 1], name="t")  # 400 counters at once, by broadcasting
        u = dqn.hash_uniform(t, 1, 32)
    a = tn.Session(g, backend="reference").run(u, {t: np.arange(400, dtype=np.int32)[:, None]})
    assert a.shape == (400, 32)
    assert a.min() >= 0.0 and a.max() < 1.0
    se = 1 / np.sqrt(a.size)
    assert abs(a.mean() - 0.5) < 5 * np.sqrt(1 / 12) * se
    assert abs(a.var() - 1 / 12) < 0.005
    lanes = np.corrcoef(a.T)[~np.eye(32, dtype=bool)]
    assert np.abs(lanes).max() < 5 / np.sqrt(400)
    lag = [np.corrcoef(a[:-1, k], a[1:, k])[0, 1] for k in range(32)]
    assert np.abs(lag).max() < 5 / np.sqrt(400)


def test_hash_generator_agrees_across_backends(dqn: ModuleType) -> None:
    """Integer arithmetic only, every product below 2**31: the reference and fast backends give the
    same bits, including near the largest counter the docstring promises."""
    g = tn.Graph()
    with g.as_default():
        t = tn.placeholder(tn.int32, [], name="t")
        x = dqn.hash_ints(t, 5, 8)
    ref, fast = tn.Session(g, backend="reference"), tn.Session(g, backend="fast")
    for k in [0, 1, 2, 12345, 2**25 - 1]:
        got = ref.run(x, {t: k})
        np.testing.assert_array_equal(got, fast.run(x, {t: k}))
        assert got.min() >= 1 and got.max() <= 2**31 - 2


# ---- the agent ----------------------------------------------------------------------------------------
def test_dqn_learns_cartpole_in_graph_on_fast(dqn: ModuleType) -> None:
    """2000 steps, 500 per Session.run: the greedy policy keeps the pole up for 60+ steps on average
    (an untrained one: about 10)."""
    r = dqn.train("fast", steps=2000, mode="graph", steps_per_run=500, verbose=False)
    assert r["eval_before"] < 20
    assert r["eval_after"] >= 60, r["eval_after"]
    # and the episodes seen while training got longer too
    assert np.mean(r["episodes"][-5:]) > 2 * np.mean(r["episodes"][:5])


@pytest.fixture(scope="module")
def dqn_30(dqn: ModuleType) -> tuple[dict, tn.Session]:
    """A DQN graph with 30 steps per run (target copied every 10), and a fast session that ran one."""
    m = dqn.build(dqn.Config(target_every=10), steps_per_run=30)
    fast = tn.Session(m["graph"], backend="fast")
    m["fast_result"] = fast.run(m["train_loop"])
    return m, fast


def test_dqn_python_driven_is_the_same_agent(dqn_30: tuple[dict, tn.Session]) -> None:
    """One Session.run per step (the Python-driven agent) and 30 steps in one run (the in-graph
    loop) on the fast backend: the same episodes and the same Variables, bit for bit."""
    m, graph = dqn_30
    python = tn.Session(m["graph"], backend="fast")
    driven = np.array([python.run(m["train_step"])[0] for _ in range(30)])
    np.testing.assert_array_equal(m["fast_result"][0], driven)
    assert np.count_nonzero(driven) >= 1  # an episode ended
    for v in [*m["online"], *m["target"], *m["buffer"].values(), *m["state"].values()]:
        np.testing.assert_array_equal(graph.variables[v.name], python.variables[v.name], err_msg=v.name)


def test_dqn_reference_agrees_with_fast(dqn_30: tuple[dict, tn.Session]) -> None:
    """The reference interpreter (the oracle) runs the same 30 in-graph steps — an episode end,
    epsilon-greedy conds taking both branches, 30 Adam updates, three target copies — and agrees
    with the fast backend."""
    m, fast = dqn_30
    ref = tn.Session(m["graph"], backend="reference")
    a, b = ref.run(m["train_loop"]), m["fast_result"]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-4, atol=1e-6)
    for v in [*m["online"], *m["target"]]:
        np.testing.assert_allclose(ref.variables[v.name], fast.variables[v.name], rtol=1e-4, atol=1e-5,
                                   err_msg=v.name)
    # the target network was copied after steps 10, 20 and 30: it equals the online network now,
    # and it is no longer the initial network
    for v, u in zip(m["target"], m["online"]):
        np.testing.assert_array_equal(ref.variables[v.name], ref.variables[u.name])
    w1 = m["graph"].variables["target/w1"].attrs["initial_value"]
    assert not np.array_equal(ref.variables["target/w1"], w1)


# ---- sequence to sequence -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seq2seq_trained() -> tuple[ModuleType, dict]:
    """30 teacher-forcing steps on the reference interpreter, small sizes (lengths 2 to 5)."""
    s2s = _example("seq2seq")
    cfg = s2s.Config(batch=16, max_len=5, min_len=2, hidden=32, embed=8, learning_rate=0.02)
    return s2s, s2s.train("reference", steps=30, cfg=cfg, verbose=False, eval_every=30)


def test_seq2seq_learns_to_reverse_on_reference(seq2seq_trained: tuple[ModuleType, dict]) -> None:
    """A model that ignores its input gets at most the EOS tokens and a tenth of the digits right
    (under 0.35 of the tokens here) and almost no whole sequence; after 30 steps the greedy decoder
    gets 60% of the tokens and a quarter of the sequences exactly right."""
    _, r = seq2seq_trained
    (_, tok0, seq0), (_, tok, seq) = r["evals"][0], r["evals"][-1]
    assert tok0 < 0.35 and seq0 < 0.1
    assert tok >= 0.6 and seq >= 0.25, r["evals"]
    assert np.mean(r["losses"][-5:]) < 0.6 * np.mean(r["losses"][:5])


def test_greedy_decode_stops_when_every_sequence_has_ended(seq2seq_trained: tuple[ModuleType, dict]) -> None:
    """The decode loop's trip count is the data's: one past the last sequence's first EOS."""
    s2s, r = seq2seq_trained
    m, sess, data = r["model"], r["session"], r["held_out"]
    tokens, steps = sess.run([m["tokens"], m["steps"]], s2s.feeds(m, data, train=False))
    first_eos = [int(np.argmax(tokens[:, b] == s2s.EOS)) if (tokens[:, b] == s2s.EOS).any() else tokens.shape[0]
                 for b in range(tokens.shape[1])]
    assert steps == min(max(first_eos) + 1, tokens.shape[0])
    assert (tokens[steps:] == s2s.EOS).all()


def test_greedy_decode_python_driven_and_fast_agree(seq2seq_trained: tuple[ModuleType, dict]) -> None:
    """The in-graph decode loop, the Python-driven loop (one Session.run per token) and the fast
    backend's compiled loop decode the trained model alike."""
    s2s, r = seq2seq_trained
    m, ref, data = r["model"], r["session"], r["held_out"]
    in_graph = ref.run(m["tokens"], s2s.feeds(m, data, train=False))
    np.testing.assert_array_equal(s2s.decode_python(m, ref, data), in_graph)
    fast = tn.Session(m["graph"], backend="fast")
    fast.variables.update({k: v.copy() for k, v in ref.variables.items()})
    np.testing.assert_array_equal(fast.run(m["tokens"], s2s.feeds(m, data, train=False)), in_graph)


# ---- the tutorials show the graphs as they are ------------------------------------------------------------
@pytest.mark.parametrize("name", ["dqn", "seq2seq"])
def test_tutorial_frame_listing_is_current(name: str) -> None:
    """docs/tutorial_<name>.rst shows ``frame_summary`` of the example's graph; it must be what the
    code prints today (building the graph runs nothing)."""
    mod = sys.modules.get(f"{name}_example") or _example(name)
    text = (ROOT / "docs" / f"tutorial_{name}.rst").read_text(encoding="utf-8")
    shown = text.split(f"print({name}.frame_summary(", 1)[1].split(".. code-block:: text\n\n", 1)[1]
    lines = []
    for line in shown.splitlines():
        if line and not line.startswith("   "):
            break
        lines.append(line[3:])
    assert "\n".join(lines).strip("\n") == mod.frame_summary(mod.build()["graph"])


def test_beam_search_of_width_one_is_greedy_and_beams_are_ranked(seq2seq_trained: tuple[ModuleType, dict]) -> None:
    """Beam search with one beam makes the greedy choices; with three, the returned scores are
    log-probabilities (at most 0) sorted best first, and its best sequence scores at least as high
    as the second and third beams."""
    s2s, r = seq2seq_trained
    m, ref, data = r["model"], r["session"], r["held_out"]
    feed = s2s.feeds(m, data, train=False)
    greedy_tokens, greedy_steps = ref.run([m["tokens"], m["steps"]], feed)
    scores = ref.run(m["beam_scores"], feed)
    assert m["beam_width"] == 3 and (scores <= 1e-6).all()
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    one = s2s.build(m["config"], beam_width=1)
    s1 = tn.Session(one["graph"], backend="reference")
    s1.variables.update({k: v.copy() for k, v in ref.variables.items()})
    tokens, steps = s1.run([one["beam_tokens"], one["beam_steps"]], s2s.feeds(one, data, train=False))
    np.testing.assert_array_equal(tokens, greedy_tokens)
    assert steps == greedy_steps


# ---- what each example says: its task and backend first, its verdict last ----------------------------------
EXAMPLES = ["demo", "dqn", "lstm", "seq2seq"]
#: short runs (a few seconds each on the reference interpreter): too short to learn anything
SHORT_RUNS = {
    "demo": ["--backend", "reference", "6", "7"],
    "dqn": ["--backend", "reference", "--steps", "10", "--steps-per-run", "10"],
    "lstm": ["--backend", "reference", "--steps", "2"],
    "seq2seq": ["--backend", "reference", "--steps", "1"],
}


def _run_example(name: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def test_the_examples_checked_here_are_every_example() -> None:
    """A new example under ``examples/`` gets the checks below: the list is the folder's."""
    assert sorted(EXAMPLES) == sorted(p.stem for p in (ROOT / "examples").glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_help_lists_the_backends_and_a_typo_is_a_usage_error(name: str) -> None:
    """``--help`` shows ``--backend {fast,reference}`` (in either order) and every other option's
    choices as its source gives them (``--mode {graph,python}``); a mistyped backend is an argparse
    usage error (exit status 2, the choices named), not a traceback."""
    out = _run_example(name, "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"--backend \{(fast,reference|reference,fast)\}", out.stdout), out.stdout
    source = (ROOT / "examples" / f"{name}.py").read_text(encoding="utf-8")
    options = re.findall(r'add_argument\(\s*"(--[\w-]+)",\s*choices=[\[(]([^\])]*)[\])]', source)
    assert any(flag == "--backend" for flag, _ in options), f"{name}: no --backend option with choices found"
    for flag, listed in options:
        names = re.findall(r"""['"]([^'"]+)['"]""", listed)
        shown = f"{flag} {{{','.join(names)}}}"
        assert shown in out.stdout, f"{name} --help does not show {shown}:\n{out.stdout}"
    bad = _run_example(name, "--backend", "fsat")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert "invalid choice: 'fsat'" in bad.stderr and "'fast'" in bad.stderr and "'reference'" in bad.stderr
    assert bad.stdout == ""  # nothing ran


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_says_its_task_and_backend_first_and_its_verdict_last(name: str, tmp_path: Path) -> None:
    """A short run on the reference backend: the first line names the task and the backend, the last
    is the verdict. Too short to learn, the learning examples must say so rather than claim success;
    the demo's verdict is its check against plain Python."""
    out = _run_example(name, *SHORT_RUNS[name])
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("Task: ") and lines[0].endswith("backend: reference"), lines[0]
    assert lines[-1].startswith("Verdict: "), lines[-1]
    if name == "demo":
        assert lines[-1].startswith("Verdict: correct: all 2 answers"), lines[-1]
    else:
        assert lines[-1].startswith("Verdict: not learned yet: "), lines[-1]


def test_lstm_example_says_where_its_event_file_went(tmp_path: Path) -> None:
    logdir = tmp_path / "runs"
    out = _run_example("lstm", "--backend", "reference", "--steps", "2", "--logdir", str(logdir))
    assert out.returncode == 0, out.stderr[-2000:]
    (written,) = re.findall(r"^wrote the loss and the graph to (\S+) ", out.stdout, re.M)
    assert Path(written).parent == logdir and Path(written).stat().st_size > 0
    assert out.stdout.strip().splitlines()[-1].startswith("Verdict: ")


# ---- the baselines the verdicts are judged against ----------------------------------------------------------
def test_dqn_random_policy_baseline_is_a_random_policy_on_the_graphs_cartpole(dqn: ModuleType) -> None:
    """The NumPy CartPole of the verdict's baseline is the graph's: the same start states and coin-flip
    actions give the same episode lengths (up to the float32 graph's rounding, a step now and then), and a
    random policy lasts about 22 steps."""
    E, steps = 64, 200
    rng = np.random.default_rng(3)
    s0 = rng.uniform(-0.05, 0.05, (E, 4)).astype(np.float32)
    actions = rng.integers(0, 2, (steps, E)).astype(np.int32)
    g = tn.Graph()
    with g.as_default():
        s = tn.placeholder(tn.float32, [E, 4], name="s")
        a = tn.placeholder(tn.int32, [E], name="a")
        nxt, fell = dqn.cartpole_step(s, a)
    sess = tn.Session(g, backend="reference")
    state, alive, graph_len = s0, np.ones(E, bool), np.zeros(E, int)
    for t in range(steps):
        state, f = sess.run([nxt, fell], {s: state, a: actions[t]})
        graph_len += alive
        alive &= ~f
        if not alive.any():
            break
    same = np.mean(graph_len == dqn.numpy_episode_lengths(s0, actions))
    assert same >= 0.9, same
    assert 15 < graph_len.mean() < 30
    assert 15 < dqn.random_policy() < 30
    assert abs(dqn.random_policy(episodes=4000, seed=1) - dqn.random_policy(episodes=4000, seed=2)) < 1.5


def test_lstm_input_blind_loss_is_the_targets_mean_square() -> None:
    lstm = _example("lstm")
    rng = np.random.default_rng(0)
    sq = []
    for _ in range(4000):
        n = int(rng.integers(3, 13))
        _, target = lstm.batch_for(rng, 8, 4, n)
        sq.append(float(np.mean(target ** 2)))
    assert abs(np.mean(sq) - lstm.constant_loss(3, 12)) < 0.05


def test_seq2seq_input_blind_bound_holds_for_a_model_that_ignores_its_input() -> None:
    """The best input-blind decoder: it guesses one digit everywhere and cannot know where EOS goes;
    granted every EOS anyway, it stays under ``blind_accuracy``."""
    s2s = _example("seq2seq")
    cfg = s2s.Config()
    data = s2s.batch(np.random.default_rng(7), cfg)
    bound = s2s.blind_accuracy(data)
    for guess in range(10):
        tokens = np.full_like(data["dec_out"], guess)
        for b, n in enumerate(data["src_len"]):
            tokens[n, b] = s2s.EOS  # told where every sequence ends
        assert s2s.accuracy(tokens, data)[0] <= bound + 0.05
