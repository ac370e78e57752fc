"""Nested structures of tensors: flatten and pack back.

Builders take and return nested tuples, lists, dicts (keys sorted) and namedtuples. Leaves are
tensors, TensorArrays, Variables and Python/numpy values.
"""

from __future__ import annotations

from typing import Any

from turnout.errors import ArgumentError, GraphBuildError


def sorted_keys(d: dict[Any, Any], what: str = "") -> list[Any]:
    """The keys of dict ``d`` in the order its leaves are flattened: sorted, as TensorFlow's ``nest``
    sorts them, so that two dicts of the same keys flatten alike whatever order they were built in.
    Keys that cannot be ordered (``1`` and ``"b"``) are an ``ArgumentError`` naming two of them, after
    ``what`` (the function and argument that held the dict, where the caller says). Why here: Python's
    ``TypeError`` of the sort reached the user from ``Session.run``, the builders and ``tn.gradients``,
    naming no argument."""
    try:
        return sorted(d)
    except TypeError:
        keys = list(d)
        a, b = next(((a, b) for a in keys for b in keys if not _ordered(a, b)), (keys[0], keys[-1]))
        where = f"{what}: " if what else ""
        raise ArgumentError(f"{where}a dict of keys {a!r} and {b!r} cannot be ordered; Turnout takes a dict's "
                            "values in the order of its sorted keys, so give its keys one kind (all str, or all "
                            "int)") from None


def _ordered(a: Any, b: Any) -> bool:
    try:
        sorted([a, b])
        sorted([b, a])
    except TypeError:
        return False
    return True


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def is_nested(x: Any) -> bool:
    """True for a list, tuple (namedtuples too) or dict: a structure ``flatten`` enters, not a leaf."""
    return isinstance(x, (list, tuple, dict))


def flatten(x: Any, what: str = "") -> list[Any]:
    """The leaves of ``x`` in order (a dict's by its sorted keys); ``what`` names the function and
    argument ``x`` is, for the error of a dict whose keys cannot be ordered (``sorted_keys``)."""
    if isinstance(x, dict):
        return [leaf for k in sorted_keys(x, what) for leaf in flatten(x[k], what)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in flatten(v, what)]
    return [x]


def pack_as(structure: Any, flat: list[Any]) -> Any:
    """Inverse of flatten: rebuild ``structure`` with the leaves of ``flat``."""
    it = iter(flat)

    def build(s: Any) -> Any:
        if isinstance(s, dict):
            return {k: build(s[k]) for k in sorted_keys(s)} if not hasattr(s, "__class__") or type(s) is dict else \
                type(s)((k, build(s[k])) for k in sorted_keys(s))
        if _is_namedtuple(s):
            return type(s)(*[build(v) for v in s])
        if isinstance(s, tuple):
            return tuple(build(v) for v in s)
        if isinstance(s, list):
            return [build(v) for v in s]
        return next(it)

    out = build(structure)
    rest = list(it)
    if rest:
        raise GraphBuildError(f"pack_as: {len(rest)} leaves left over")
    return out


def structure_signature(x: Any) -> Any:
    """A hashable description of the structure (lists and tuples are treated alike)."""
    if isinstance(x, dict):
        return ("dict", tuple((k, structure_signature(x[k])) for k in sorted_keys(x)))
    if _is_namedtuple(x):
        return (type(x).__name__, tuple(structure_signature(v) for v in x))
    if isinstance(x, (list, tuple)):
        return ("seq", tuple(structure_signature(v) for v in x))
    return "*"


def assert_same_structure(a: Any, b: Any, what: str) -> None:
    """Raise ``GraphBuildError`` (``what`` names the caller) unless ``a`` and ``b`` have the same structure, lists
    and tuples alike."""
    sa, sb = structure_signature(a), structure_signature(b)
    if sa != sb:
        raise GraphBuildError(f"{what}: structures differ: {_show(a)} vs {_show(b)}")


def _show(x: Any) -> str:
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {_show(v)}" for k, v in ((k, x[k]) for k in sorted_keys(x))) + "}"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_show(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    return type(x).__name__


def map_structure(fn: Any, x: Any) -> Any:
    """``x`` with ``fn`` applied to every leaf."""
    return pack_as(x, [fn(v) for v in flatten(x)])
