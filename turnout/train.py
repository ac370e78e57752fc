"""Optimizers: ``SGD`` and ``Adam``, graph-building like TensorFlow 1's ``tf.train``.

``opt.minimize(loss)`` adds the gradient graph (``tn.gradients`` w.r.t. the trainable Variables) and
the update ops, and returns one op (a ``group``) to run per training step. Updates are
``AssignSubVariable`` ops; Adam's moment estimates and step count are Variables too, so the whole
optimizer state lives in the Session like any other Variable.

Ordering: each update carries control dependencies on the loss and on every gradient, so the step's
reads of a Variable (forward and backward) happen before the Variable is written: the program is
race-free in the sense of the semantics' [T1-Confluence].
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from turnout import ops
from turnout.arguments import checked
from turnout.errors import ArgumentError, GradientError
from turnout.graph import Node, Tensor
from turnout.variables import Variable, trainable_variables

#: the largest float (a Python float: comparing a huge int with numpy's overflows)
_FLOAT_MAX = float(np.finfo(np.float64).max)


def _rate(value: Any, what: str) -> float:
    """A hyperparameter as a float: a finite real number, or ``ArgumentError`` naming it."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    x = float(value) if ok and abs(value) <= _FLOAT_MAX else float("nan")
    if not np.isfinite(x):
        raise ArgumentError(f"{what} must be a finite number, got {type(value).__name__} {value!r:.60}")
    return x


def _variables(vs: Any, what: str) -> list[Variable]:
    """``vs`` as a list of Variables, or ``ArgumentError`` naming the first that is not one."""
    out = list(vs)
    for v in out:
        if not isinstance(v, Variable):
            raise ArgumentError(f"{what} must hold Variables, got {type(v).__name__} {v!r:.60}")
    return out


class Optimizer(ABC):
    """Base class: ``minimize`` = ``compute_gradients`` + ``apply_gradients``."""

    @checked
    def compute_gradients(self, loss: Tensor, var_list: Optional[Sequence[Variable]] = None,
                          memory_budget: Optional[int] = None) -> list[tuple[Tensor, Variable]]:
        """The (gradient, Variable) pairs of ``loss`` for ``var_list`` (every trainable Variable by
        default), those with a gradient; ``memory_budget`` bounds what the loops save for them, as
        ``tn.gradients``'s does."""
        from turnout.gradients import gradients

        vs = _variables(var_list, f"{type(self).__name__}: var_list") if var_list is not None \
            else trainable_variables(loss.graph)
        if not vs:
            raise GradientError("minimize: there are no trainable Variables to optimize")
        grads = gradients(loss, vs, memory_budget=memory_budget)
        pairs = [(g, v) for g, v in zip(grads, vs, strict=True) if g is not None]
        if not pairs:
            raise GradientError(f"minimize: the loss {loss.name} does not depend on any of {[v.name for v in vs]}")
        return pairs

    @checked
    def apply_gradients(self, grads_and_vars: Sequence[tuple[Tensor, Variable]], after: Sequence[Any] = ()) -> Node:
        """The op that updates each Variable by its gradient: one training step. Its updates wait on ``after`` and on
        the gradients, so that what is fetched alongside (``minimize`` passes the loss) is computed before any
        Variable changes."""
        what = f"{type(self).__name__}.apply_gradients: grads_and_vars"
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            raise ArgumentError(f"{what} is empty: there is nothing to update")
        for pair in grads_and_vars:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], Tensor)):
                raise ArgumentError(f"{what} must hold (gradient tensor, Variable) pairs, got {pair!r:.60}")
        _variables([v for _, v in grads_and_vars], what)
        g = grads_and_vars[0][1]._graph
        with g.control_dependencies([*after, *(gr for gr, _ in grads_and_vars)]):
            updates = self._updates(grads_and_vars)
        return ops.group(*updates, name=f"{type(self).__name__}/update")

    @checked
    def minimize(self, loss: Tensor, var_list: Optional[Sequence[Variable]] = None,
                 memory_budget: Optional[int] = None) -> Node:
        """One training step: the op to run. Fetch ``loss`` alongside it to watch it decrease.
        ``memory_budget``: the bytes the step's loops may save for its gradient (``tn.gradients``)."""
        return self.apply_gradients(self.compute_gradients(loss, var_list, memory_budget), after=[loss])

    @abstractmethod
    def _updates(self, grads_and_vars: Sequence[tuple[Tensor, Variable]]) -> list[Tensor]:
        """The assign ops of one step, one per variable (SGD, Adam define them)."""


class SGD(Optimizer):
    """Plain gradient descent: ``v -= lr * g``."""

    def __init__(self, learning_rate: float) -> None:
        self.lr = _rate(learning_rate, "SGD: learning_rate")

    def _updates(self, grads_and_vars: Sequence[tuple[Tensor, Variable]]) -> list[Tensor]:
        return [v.assign_sub(ops.multiply(gr, self.lr)) for gr, v in grads_and_vars]


GradientDescentOptimizer = SGD


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015), with slots ``m``, ``v`` and the step count ``t`` as Variables.

    The update, per variable::

        t += 1; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2
        var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8) -> None:
        self.lr, self.beta1, self.beta2, self.eps = (_rate(v, f"Adam: {n}") for v, n in (
            (learning_rate, "learning_rate"), (beta1, "beta1"), (beta2, "beta2"), (epsilon, "epsilon")))
        self.slots: dict[str, tuple[Variable, Variable]] = {}
        self.step: Optional[Variable] = None

    def _slot_pair(self, v: Variable) -> tuple[Variable, Variable]:
        if v.name not in self.slots:
            z = np.zeros(v.shape, v.dtype.numpy)
            self.slots[v.name] = (Variable(z, name=f"{v.name}/adam_m", trainable=False),
                                  Variable(z, name=f"{v.name}/adam_v", trainable=False))
        return self.slots[v.name]

    def _updates(self, grads_and_vars: Sequence[tuple[Tensor, Variable]]) -> list[Tensor]:
        dtype = grads_and_vars[0][1].dtype
        if self.step is None:
            self.step = Variable(np.zeros((), dtype.numpy), name="adam_step", trainable=False)
        t = self.step.assign_add(np.ones((), dtype.numpy))
        out = []
        for gr, v in grads_and_vars:
            m, s = self._slot_pair(v)
            m_new = m.assign(ops.add(ops.multiply(m.read(), self.beta1), ops.multiply(gr, 1 - self.beta1)))
            s_new = s.assign(ops.add(ops.multiply(s.read(), self.beta2), ops.multiply(ops.square(gr), 1 - self.beta2)))
            tt = ops.cast(t, v.dtype)
            correction = ops.divide(ops.sqrt(ops.subtract(1.0, ops.pow(ops.constant(self.beta2, v.dtype), tt))),
                                    ops.subtract(1.0, ops.pow(ops.constant(self.beta1, v.dtype), tt)))
            step = ops.divide(ops.multiply(m_new, ops.multiply(correction, self.lr)),
                              ops.add(ops.sqrt(s_new), self.eps))
            out.append(v.assign_sub(step))
        return out


AdamOptimizer = Adam
