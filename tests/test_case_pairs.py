"""``tn.case``'s predicate form (TensorFlow's ``tf.case``) and ``tn.assert_true``, on every backend.

The predicate form takes ``(predicate, fn)`` pairs and runs the first whose predicate holds, else the
default; ``exclusive=True`` makes two true predicates an error, and without a default the last pair
runs when no other holds but must itself hold. It is built as the index form over the first true
predicate's index, with ``tn.assert_true`` checks, so every backend runs the same program. Cases
follow the behaviour TensorFlow's own case tests pin (first true wins, the exclusive and no-default
errors), written here from that behaviour.
"""

from __future__ import annotations

from typing import Any

import pytest

import turnout as tn
from turnout.errors import DTypeError, GraphBuildError, KernelError

pytest.importorskip("jax")

BACKENDS = ["reference", "fast", "smallstep"]


def model() -> dict[str, Any]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        f = tn.placeholder(tn.float32, [], name="f")
        pairs = [(tn.less(x, 0), lambda: f * -1.0), (tn.less(x, 10), lambda: f * 10.0)]
        first = tn.case(pairs, default=lambda: f * 100.0)
        exclusive = tn.case(pairs, default=lambda: f * 100.0, exclusive=True)
        no_default = tn.case(pred_fn_pairs={tn.equal(x, 1): lambda: f + 1.0, tn.equal(x, 2): lambda: f + 2.0})
        (grad,) = tn.gradients(first * first, [f])
    return {"g": g, "x": x, "f": f, "first": first, "exclusive": exclusive, "no_default": no_default, "grad": grad}


def value(sess: tn.Session, m: dict[str, Any], what: str, x: int) -> Any:
    try:
        return float(sess.run(m[what], {m["x"]: x, m["f"]: 2.0}))
    except KernelError as e:
        return str(e)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_first_true_predicate_wins_and_the_checks_name_the_mistake(backend: str) -> None:
    m = model()
    sess = tn.Session(m["g"], backend=backend)
    # x = -5: both predicates hold, the first wins; x = 5: only the second; x = 50: the default
    assert [value(sess, m, "first", x) for x in (-5, 5, 50)] == [-2.0, 20.0, 200.0]
    assert [value(sess, m, "grad", x) for x in (-5, 5, 50)] == [4.0, 400.0, 40000.0]  # d(r^2)/df = 2 r dr/df
    assert [value(sess, m, "exclusive", x) for x in (5, 50)] == [20.0, 200.0]
    assert "more than one predicate is true, and exclusive=True" in value(sess, m, "exclusive", -5)
    assert [value(sess, m, "no_default", x) for x in (1, 2)] == [3.0, 4.0]
    err = value(sess, m, "no_default", 7)
    assert "no predicate is true, and there is no default" in err and "case" in err


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_predicate_form_in_a_loop_body(backend: str) -> None:
    """A case of pairs in a while loop: its index chain and checks run in every iteration."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, acc: Any) -> Any:
            r = tn.mod(i, 3)
            step = tn.case([(tn.equal(r, 0), lambda: acc + 1.0), (tn.equal(r, 1), lambda: acc * 2.0)],
                           default=lambda: acc - 0.5, exclusive=True)
            return i + 1, step

        _, out = tn.while_loop(lambda i, acc: i < n, body, [tn.constant(0), tn.constant(0.0)])
    want = 0.0
    for i in range(7):
        want = want + 1.0 if i % 3 == 0 else want * 2.0 if i % 3 == 1 else want - 0.5
    assert float(tn.Session(g, backend=backend).run(out, {n: 7})) == want


def test_bad_pairs_are_refused_when_built() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [])
        with pytest.raises(GraphBuildError, match="pair 0 must be a"):
            tn.case([tn.less(x, 0)])
        with pytest.raises(GraphBuildError, match="not callable"):
            tn.case([(tn.less(x, 0), 3.0)])
        with pytest.raises(DTypeError, match="predicate of pair 0 must be a bool scalar"):
            tn.case([(x, lambda: x)])
        with pytest.raises(GraphBuildError, match="at least one"):
            tn.case([])
        with pytest.raises(GraphBuildError, match="default must be a callable"):
            tn.case([(tn.less(x, 0), lambda: x)], default=x)
        with pytest.raises(GraphBuildError, match="default must be a callable"):
            tn.case(x, [lambda: x], default=x)
        with pytest.raises(GraphBuildError, match="not both"):
            tn.case(x, pred_fn_pairs=[(tn.less(x, 0), lambda: x)])
        with pytest.raises(GraphBuildError, match="exclusive applies to the predicate form"):
            tn.case(x, [lambda: x, lambda: x], exclusive=True)
        p0, p1 = tn.less(x, 0), tn.less(x, 5)
        before = len(g.nodes)
        with pytest.raises(GraphBuildError):  # a branch that fails leaves the graph as it was
            tn.case([(p0, lambda: tn.constant(1.0)), (p1, lambda: None)])
        assert len(g.nodes) == before
        assert float(tn.Session(g).run(tn.case([], default=lambda: tn.constant(4.0)))) == 4.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_assert_true_passes_its_value_or_raises_its_message(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.assert_true(tn.greater(x, 0.0), x * 2.0, "x must be positive")
        # in an untaken branch the check is dead: it never fails
        z = tn.cond(tn.greater(x, 0.0), lambda: tn.assert_true(tn.greater(x, 0.0), tn.sqrt(x), "never"),
                    lambda: tn.constant(-1.0))
        (dy,) = tn.gradients(y * y, [x])
    sess = tn.Session(g, backend=backend)
    assert [float(v) for v in sess.run([y, z, dy], {x: 4.0})] == [8.0, 2.0, 32.0]
    assert float(sess.run(z, {x: -4.0})) == -1.0
    where = r'Assert node "Assert" \(created at test_case_pairs.py:\d+\).*x must be positive'
    with pytest.raises(KernelError, match=where):
        sess.run(y, {x: -1.0})


def test_assert_true_is_checked_when_built() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [])
        with pytest.raises(DTypeError, match="Assert: the condition must be bool"):
            tn.assert_true(x, x, "m")
        with pytest.raises(tn.ShapeError, match="Assert: the condition must be a scalar"):
            tn.assert_true(tn.greater(tn.zeros([2]), 0.0), x, "m")
        with pytest.raises(GraphBuildError, match="message must be a non-empty string"):
            tn.assert_true(tn.greater(x, 0.0), x, "")


def test_a_graph_with_checks_saves_loads_and_exports() -> None:
    pytest.importorskip("google.protobuf")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        y = tn.case([(tn.less(x, 0), lambda: tn.constant(1.0)), (tn.less(x, 9), lambda: tn.constant(2.0))],
                    exclusive=True)
    g2 = tn.loads(tn.dumps(g))
    with pytest.raises(KernelError, match="exclusive"):
        tn.Session(g2).run(g2.tensor(y.name), {g2.tensor(x.name): -1})
    assert float(tn.Session(g2).run(g2.tensor(y.name), {g2.tensor(x.name): 3})) == 2.0
    from turnout.graphdef import export_graph_def

    exported = export_graph_def(g)
    ops = [nd.op for nd in exported.graph_def.node]
    assert ops.count("Assert") == 2  # the exclusive check and the no-default one


# ---- a property: the predicate form against its definition ---------------------------------------
_SESSIONS: dict[tuple[int, bool, bool, str], Any] = {}


def _pairs_session(k: int, has_default: bool, exclusive: bool, backend: str) -> Any:
    """A case of ``k`` fed predicates whose branch ``i`` returns ``10 * (i + 1) * s`` (the default
    ``-s``), with a session, made once per shape of case."""
    key = (k, has_default, exclusive, backend)
    if key not in _SESSIONS:
        g = tn.Graph()
        with g.as_default():
            preds = [tn.placeholder(tn.bool, [], name=f"p{i}") for i in range(k)]
            s = tn.placeholder(tn.float32, [], name="s")
            pairs = [(p, lambda i=i: s * float(10 * (i + 1))) for i, p in enumerate(preds)]
            y = tn.case(pairs, default=(lambda: -s) if has_default else None, exclusive=exclusive)
            (dy,) = tn.gradients(y, [s])
        _SESSIONS[key] = (tn.Session(g, backend=backend), preds, s, y, dy)
    return _SESSIONS[key]


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_the_predicate_form_is_first_true_else_default(backend: str) -> None:
    """For every truth assignment of 1 to 4 predicates, with and without a default and with and
    without ``exclusive``: the value (and its gradient) is the first true pair's, else the
    default's; two true under ``exclusive`` and none true without a default are the checks'
    errors, and nothing else is."""
    from itertools import product

    for k in range(1, 5):
        for has_default, exclusive in product([True, False], repeat=2):
            sess, preds, s, y, dy = _pairs_session(k, has_default, exclusive, backend)
            for truth in product([False, True], repeat=k):
                feed = {**dict(zip(preds, truth, strict=True)), s: 2.0}
                first = next((i for i, t in enumerate(truth) if t), None)
                if exclusive and sum(truth) > 1:
                    with pytest.raises(KernelError, match="more than one predicate is true"):
                        sess.run(y, feed)
                elif first is None and not has_default:
                    with pytest.raises(KernelError, match="no predicate is true"):
                        sess.run(y, feed)
                else:
                    scale = -1.0 if first is None else 10.0 * (first + 1)
                    got, grad = sess.run([y, dy], feed)
                    assert (float(got), float(grad)) == (2.0 * scale, scale), (k, has_default, exclusive, truth)
