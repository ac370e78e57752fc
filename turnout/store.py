"""``session.variables``: the Variables a session holds, a mapping from name to numpy array that
checks every value put in it.

Why checks: a value set from outside (``sess.variables["w"] = value``, a restored checkpoint) enters
the program without passing through an op, so nothing else checks it. Before this store, a value of
the wrong shape failed deep in numpy on the reference interpreter and deep in JAX on the fast
backend, an int32 array given to a float32 Variable stayed int32 on one backend and became float32
on the other (two different answers), and ``None`` ran on one backend and failed on the other. The
store converts a value by the rules every value entering a graph follows (``dtypes.as_checked_array``,
the same as for feeds: no string, no float into an integer Variable, no value that would change on
conversion) and refuses one that does not fit the Variable's dtype and shape with a ``FeedError``
naming the Variable, at the assignment, whichever backend the session runs.

A backend whose Variables live elsewhere gives the session its own mapping: the fast backend's
(``turnout.fast.variable_store``) extends this one and keeps a run's new values on the device until
they are read; a cluster's reads and writes them on its tasks.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.errors import FeedError, NotFoundError
from turnout.graph import Graph


def check_variable(graph: Graph, name: str, value: Any) -> Any:
    """``value`` as Variable ``name`` of ``graph`` holds it: converted to its dtype by the feed rules
    (``dtypes.as_checked_array``; a float for an integer Variable is refused, as for a placeholder),
    or ``FeedError`` naming the Variable when the conversion would change the value or the shape is
    not the declared one. A name no Variable of the graph has gets ``value`` back as it is. Shared
    by every ``session.variables``."""
    node = graph.variables.get(name)
    if node is None:
        return value
    dtype, shape = np.dtype(node.attrs["dtype"]), tuple(node.attrs["shape"])
    if type(value) is np.ndarray and value.dtype == dtype and value.shape == shape:
        return value  # (every write a run makes, and most of the user's)
    what = f"setting Variable {name!r} ({dtype.name}{list(shape)})"
    if dtype.kind == "i" and _floating(value):  # (Turnout has no unsigned dtype)
        raise FeedError(f"{what}: a floating value for an integer Variable; cast it first")
    try:
        arr = dt.as_checked_array(value, dt.as_dtype(dtype), what)
    except ValueError as e:
        raise FeedError(str(e)) from None
    if arr.shape != shape:
        raise FeedError(f"{what}: a value of shape {list(arr.shape)} does not fit it")
    return arr


class VariableStore(MutableMapping[str, np.ndarray]):
    """``session.variables``: name -> the Variable's value, checked against the Variable's declared
    dtype and shape when it is set (see the module docstring). A name no Variable of the graph has
    is kept as given: no run reads it."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._slots: dict[str, Any] = {}

    def checked(self, name: str, value: Any) -> Any:
        """``value`` as Variable ``name`` holds it (``check_variable``)."""
        return check_variable(self.graph, name, value)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._slots[name]  # type: ignore[no-any-return]
        except (KeyError, TypeError):  # (TypeError: a key that cannot be a name, a list)
            raise self.missing(name) from None

    def missing(self, name: str) -> NotFoundError:
        """The ``KeyError`` for a name with no value here, saying why: a Variable holds a value in a
        session once a run has read or assigned it (its initial value on first use), and a name no
        Variable of the graph has never does. A ``NotFoundError``, so still a ``KeyError``: ``get`` and
        ``in`` rely on it."""
        if isinstance(name, str) and name in self.graph.variables:
            return NotFoundError(f"Variable {name!r} holds no value in this session yet: no run has read or "
                                 f"assigned it (sess.run(v) reads it, giving its initial value)")
        return NotFoundError(f"no Variable of this graph is named {name!r}")

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self._slots[name] = owned(self.checked(name, value))

    def __delitem__(self, name: str) -> None:
        if not isinstance(name, str) or name not in self._slots:
            raise self.missing(name)
        del self._slots[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._slots

    def clear(self) -> None:
        """Forget every value (``Session.close``)."""
        self._slots.clear()

    def snapshot(self) -> dict[str, Any]:
        """The entries as they are held, for ``restore``: what ``Session.run`` keeps while a run
        runs, so that a run that raises changes no Variable (a shallow copy: no run changes an
        array in place, each assignment stores a new one)."""
        return dict(self._slots)

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Put back the entries a ``snapshot`` took, unchecked (they were checked when set)."""
        self._slots = dict(snapshot)

    def copy(self) -> dict[str, np.ndarray]:
        """A plain dict of the values, as ``dict.copy`` gives."""
        return {name: self[name] for name in self._slots}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.copy()!r})"


def owned(value: Any) -> Any:
    """``value`` as the store keeps it: an array nobody else can write, so that the Variable changes only
    by an assignment (a run's, or ``session.variables[name] = ...``). A read-only array that is no view
    of another array (a run's value read back from JAX) is kept as it is; any other array is copied,
    and the copy made read-only.

    Why: the store kept the user's array itself, and handed its entries out as they were held. Writing
    into such an array in place (the one set, one read back, or a fed array a run assigned) changed
    the Variable on the interpreters, while the fast backend's device copy, matched to the entry by
    identity, kept the old value: one session's runs and its ``session.variables`` disagreed without a
    word, and so did the routes. An entry that cannot be written in place is read-only for every
    reader, as a fast run's fetched values are."""
    if type(value) is not np.ndarray or (not value.flags.writeable and not isinstance(value.base, np.ndarray)):
        return value
    kept = np.array(value, copy=True)
    kept.flags.writeable = False
    return kept


def _floating(value: Any) -> bool:
    """Whether ``value`` is a float or holds floats by its dtype: refused for an integer Variable, as
    ``session.check_feed`` refuses it for an integer placeholder (a list of whole floats converts)."""
    if isinstance(value, float):
        return True
    kind = getattr(value, "dtype", None)
    return kind is not None and np.dtype(kind).kind == "f"
