"""A documented, versioned JSON format for graphs: ``dumps`` / ``loads`` / ``save`` / ``load``.

Why JSON and not pickle: a saved graph is data that other tools (and other people) hand you. Loading
it must never run code, so the format is plain typed JSON, every field is checked before anything is
built, and a loaded graph is rebuilt through ``Graph.create_node`` (so shape inference runs again),
its recorded output specs are compared with the inferred ones, and the finished graph is validated
(``turnout.validate``) before it is returned. The format is described in ``docs/serialization.rst``
and, for other tools, by the JSON Schema ``turnout/schema/graph.schema.json``.

Layout (version 1)::

    {"format": "turnout-graph", "version": 1, "nodes": [
      {"name": "x", "op": "Placeholder", "inputs": [], "control_inputs": [], "attrs": {...},
       "device": null, "outputs": [{"dtype": "float32", "shape": [], "elem_dtype": null, "elem_shape": null}]},
      ...]}

Nodes are listed in creation order, so every input names an earlier node (``"name:index"``), except the
back edge of a loop ``Merge``, which names the later ``NextIteration``; ``"^BACK_EDGE"`` is a back-edge
slot that was never bound. Attribute values are JSON scalars, lists and objects, plus three tagged
one-key objects: ``{"ndarray": {"dtype", "shape", "data"}}`` (``data`` flat in C order, non-finite
floats as the strings ``"nan"``, ``"inf"``, ``"-inf"``), ``{"float": "nan" | "inf" | "-inf"}`` and
``{"dict": {...}}`` (a plain object whose single key happens to be one of these tags).

Builder metadata (``graph.contexts``), Variable objects and source lines are not serialized: a loaded
graph runs on the dataflow executors (reference, fast), but gradients and the structured evaluator
need the builder-made graph.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout import primitives
from turnout import shapes as sh
from turnout.devices.names import parse as parse_device
from turnout.errors import ArgumentError, PlacementError, SerializationError, TurnoutError, ValidationError
from turnout.files import file_path
from turnout.graph import BACK_EDGE, Graph, Node, Tensor, TensorSpec, _PendingBackEdge
from turnout.memory_plan import PER_LOOP
from turnout.shape_rules import infer
from turnout.validate import spec_mismatch
from turnout.validate import validate as _validate

__all__ = [
    "FORMAT", "VERSION", "MAX_TEXT_CHARS", "MAX_NODES", "MAX_ARRAY_ELEMENTS", "MAX_DEPTH", "MAX_RANK",
    "MAX_NAME_CHARS", "dumps", "loads", "save", "load",
]

FORMAT = "turnout-graph"
#: The format version this module writes and the only one it reads. Any change to the format bumps it.
VERSION = 1

#: Limits checked on load, so a hostile file cannot exhaust memory or the stack.
MAX_TEXT_CHARS = 256 * 2**20  # the serialized text (characters, or bytes for a file)
MAX_NODES = 1_000_000  # nodes in one graph
MAX_ARRAY_ELEMENTS = 2**24  # elements in one ndarray attribute
MAX_DEPTH = 16  # nesting of lists / objects inside one attribute value
MAX_RANK = 32  # dimensions of a shape
MAX_NAME_CHARS = 4096  # node names, frame names, devices and other strings used as names

BACK_EDGE_REF = "^BACK_EDGE"
_NODE_FIELDS = ("name", "op", "inputs", "control_inputs", "attrs", "device", "outputs")
_SPEC_FIELDS = ("dtype", "shape", "elem_dtype", "elem_shape")
_TAGS = ("ndarray", "float", "dict")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class _Fail(Exception):
    """Internal: a check failed; the caller adds where (node index and name, field)."""


# ==== encoding =======================================================================================
def dumps(graph: Graph) -> str:
    """Serialize ``graph`` to text (deterministic: ``dumps(loads(dumps(g))) == dumps(g)``).

    Raises SerializationError for an attribute value that has no JSON form (an arbitrary Python
    object) or a graph that cannot be listed in creation order.
    """
    if not isinstance(graph, Graph):
        raise SerializationError(f"dumps expects a tn.Graph, got {type(graph).__name__}")
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    lines = [json.dumps(_encode_node(n, i, pos), allow_nan=False, separators=(", ", ": "))
             for i, n in enumerate(graph.nodes)]
    head = f'{{"format": "{FORMAT}", "version": {VERSION}, "nodes": ['
    return head + ("\n" + ",\n".join(lines) + "\n" if lines else "") + "]}\n"


def save(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``dumps(graph)`` to ``path`` (UTF-8)."""
    text = dumps(graph)
    path = file_path(path, "save")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except (OSError, TypeError) as e:
        raise SerializationError(f"cannot write a serialized graph to {path!r}: {e}") from None


def _encode_node(n: Node, i: int, pos: dict[str, int]) -> dict[str, Any]:
    where = f'node {i} ("{n.name}")'
    inputs: list[str] = []
    for slot, t in enumerate(n.raw_inputs):
        if isinstance(t, _PendingBackEdge):
            inputs.append(BACK_EDGE_REF)
            continue
        if pos.get(t.node.name) != t.node.id or t.node.graph is not n.graph:
            raise SerializationError(f"{where}: input {slot} ({t.name}) is not a node of this graph")
        if t.node.id >= n.id and not (n.op == "Merge" and t.node.op == "NextIteration"):
            raise SerializationError(
                f"{where}: input {slot} ({t.name}) was created after the node and is not a NextIteration "
                "back edge of a Merge; such a graph cannot be listed in creation order")
        inputs.append(f"{t.node.name}:{t.index}")
    try:
        bad = [k for k in n.attrs if not isinstance(k, str) or not k or k.startswith("__")]
        if bad:
            raise _Fail(f"attr name {bad[0]!r} is not allowed (empty or starting with '__')")
        attrs = {k: _encode_value(n.attrs[k], 0) for k in sorted(n.attrs)}
    except _Fail as e:
        raise SerializationError(f"{where}, field 'attrs': {e}") from None
    return {
        "name": n.name, "op": n.op, "inputs": inputs, "control_inputs": [c.name for c in n.control_inputs],
        "attrs": attrs, "device": n.device, "outputs": [_encode_spec(t.spec) for t in n.outputs],
    }


def _encode_spec(s: TensorSpec) -> dict[str, Any]:
    return {
        "dtype": s.dtype.name, "shape": None if s.shape is None else list(s.shape),
        "elem_dtype": None if s.elem_dtype is None else s.elem_dtype.name,
        "elem_shape": None if s.elem_shape is None else list(s.elem_shape),
    }


def _nonfinite_name(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _encode_float(x: float) -> Any:
    return x if math.isfinite(x) else {"float": _nonfinite_name(x)}


def _encode_value(v: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise _Fail(f"value nested deeper than {MAX_DEPTH} levels")
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        if len(v) > MAX_NAME_CHARS:
            raise _Fail(f"string of {len(v)} characters exceeds the limit of {MAX_NAME_CHARS}")
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        if not _INT64_MIN <= int(v) <= _INT64_MAX:
            raise _Fail(f"integer {_short(v)} is outside the int64 range")
        return int(v)
    if isinstance(v, (float, np.floating)):
        return _encode_float(float(v))
    if isinstance(v, np.ndarray):
        return {"ndarray": _encode_array(v)}
    if isinstance(v, (list, tuple)):
        return [_encode_value(x, depth + 1) for x in v]
    if isinstance(v, dict):
        if not all(isinstance(k, str) and not k.startswith("__") for k in v):
            raise _Fail(f"dict keys must be strings not starting with '__', got {sorted(map(repr, v))}")
        out = {k: _encode_value(x, depth + 1) for k, x in v.items()}
        return {"dict": out} if len(out) == 1 and next(iter(out)) in _TAGS else out
    raise _Fail(f"a value of type {type(v).__name__} has no JSON form (only None, bool, int, float, str, "
                "lists, dicts and numpy arrays can be serialized)")


def _encode_array(a: np.ndarray) -> dict[str, Any]:
    try:
        d = dt.as_dtype(a.dtype)
    except TypeError as e:
        raise _Fail(str(e)) from None
    if a.size > MAX_ARRAY_ELEMENTS:
        raise _Fail(f"array of {a.size} elements exceeds the limit of {MAX_ARRAY_ELEMENTS}")
    flat = a.ravel(order="C").tolist()
    if d.is_floating and not np.all(np.isfinite(a)):
        flat = [x if math.isfinite(x) else _nonfinite_name(x) for x in flat]
    return {"dtype": d.name, "shape": list(a.shape), "data": flat}


# ==== decoding: JSON text ============================================================================
def _checked_max_chars(max_chars: Any, who: str) -> int:
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 1:
        raise ArgumentError(f"{who}: max_chars must be a positive int, got {max_chars!r}")
    return max_chars


def loads(text: str | bytes, *, validate: bool = True, origin: str | None = None,
          max_chars: int = MAX_TEXT_CHARS) -> Graph:
    """Rebuild a graph from ``dumps`` text. Checks every field and raises SerializationError naming the
    node (index and name) and the field at fault; nothing in the text is ever executed.

    With ``validate=False`` the well-formedness check is skipped, so a graph with unbound back edges
    (``"^BACK_EDGE"``) can be loaded for inspection; it will be rejected when it runs. ``origin`` (a
    file name) is recorded as each node's source, so later errors say where the node came from.
    ``max_chars`` bounds the text (characters, or bytes), checked before it is parsed: the memory a
    load may spend is the caller's to choose (default ``MAX_TEXT_CHARS``).
    """
    max_chars = _checked_max_chars(max_chars, "loads")
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_chars:
            raise SerializationError(f"serialized graph of {len(text)} bytes exceeds the limit of {max_chars}")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SerializationError(f"serialized graph is not UTF-8: {e}") from None
    if not isinstance(text, str):
        raise SerializationError(f"loads expects str or bytes, got {type(text).__name__}")
    if len(text) > max_chars:
        raise SerializationError(f"serialized graph of {len(text)} characters exceeds the limit of {max_chars}")
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant,
                         parse_float=_finite_float)
    except _Fail as e:
        raise SerializationError(f"invalid JSON: {e}") from None
    except RecursionError:
        raise SerializationError("invalid JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, and int literals over Python's digit limit
        raise SerializationError(f"invalid JSON: {e}") from None
    return _from_document(doc, validate, origin)


def load(path: str | os.PathLike[str], *, validate: bool = True, max_chars: int = MAX_TEXT_CHARS) -> Graph:
    """Read a graph written by ``save``; the file name appears in later error messages. A file that
    cannot be read (missing, a directory, no permission) is a ``SerializationError`` naming it. A file
    of more than ``max_chars`` bytes (default ``MAX_TEXT_CHARS``) is refused before it is read."""
    max_chars = _checked_max_chars(max_chars, "load")
    path = file_path(path, "load")
    try:
        size = os.path.getsize(path)
        if size > max_chars:
            raise SerializationError(f"{os.fspath(path)}: file of {size} bytes exceeds the limit of {max_chars}")
        with open(path, "rb") as f:
            data = f.read(max_chars + 1)
    except SerializationError:
        raise
    except (OSError, TypeError, ValueError) as e:  # (ValueError: a path with a NUL byte)
        raise SerializationError(f"cannot read a serialized graph from {path!r}: {e}") from None
    try:
        return loads(data, validate=validate, origin=os.path.basename(os.fspath(path)), max_chars=max_chars)
    except SerializationError as e:
        raise SerializationError(f"{os.fspath(path)}: {e}") from e.__cause__


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Fail(f"duplicate key {k!r} in a JSON object")
        out[k] = v
    return out


def _reject_constant(name: str) -> Any:
    raise _Fail(f"{name} is not valid JSON; non-finite floats are written as the strings \"nan\", \"inf\", \"-inf\"")


def _finite_float(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise _Fail(f"number {s[:40]} overflows a float")
    return x


# ==== decoding: the document =========================================================================
def _from_document(doc: Any, validate: bool, origin: str | None) -> Graph:
    if not isinstance(doc, dict):
        raise SerializationError(f"a serialized graph is a JSON object, got {_kind(doc)}")
    if doc.get("format") != FORMAT:
        raise SerializationError(f"field 'format' must be {FORMAT!r}, got {doc.get('format')!r}")
    version = doc.get("version")
    if not _is_int(version):
        raise SerializationError(f"field 'version' must be an integer, got {_kind(version)}")
    if version != VERSION:
        raise SerializationError(f"unsupported format version {version}; this Turnout reads version {VERSION}")
    _exact_keys(doc, ("format", "version", "nodes"), "the top-level object")
    nodes = doc["nodes"]
    if not isinstance(nodes, list):
        raise SerializationError(f"field 'nodes' must be a list, got {_kind(nodes)}")
    if len(nodes) > MAX_NODES:
        raise SerializationError(f"{len(nodes)} nodes exceed the limit of {MAX_NODES}")
    records = [_Record.parse(i, rec) for i, rec in enumerate(nodes)]
    return _Builder(records, origin).build(validate)


def _exact_keys(obj: dict[str, Any], fields: tuple[str, ...], where: str) -> None:
    missing = [f for f in fields if f not in obj]
    extra = sorted(k for k in obj if k not in fields)
    if missing:
        raise SerializationError(f"{where}: missing field {missing[0]!r}")
    if extra:
        raise SerializationError(f"{where}: unknown field {extra[0][:80]!r} (expected exactly {list(fields)})")


def _kind(v: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a bool", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(v), type(v).__name__)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_name(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v:
        raise _Fail(f"{what} must be a non-empty string, got {_kind(v)} {_short(v)}")
    if len(v) > MAX_NAME_CHARS:
        raise _Fail(f"{what} of {len(v)} characters exceeds the limit of {MAX_NAME_CHARS}")
    return v


def _check_device(v: str) -> str:
    """A node's device must be a name placement reads (``cpu:1``, ``/job:worker/task:1/device:CPU:0``),
    as ``tn.device`` requires of the graphs it builds."""
    try:
        parse_device(v)
    except PlacementError as e:
        raise _Fail(str(e)) from None
    return v


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _parse_dtype(v: Any, what: str, opaque_ok: bool = True) -> dt.DType:
    if not isinstance(v, str) or v not in dt.ALL:
        raise _Fail(f"{what} must be one of {sorted(dt.ALL)}, got {_short(v)}")
    d = dt.ALL[v]
    if d.is_opaque and not opaque_ok:
        raise _Fail(f"{what} must be a value dtype (bool, int32, int64, float32, float64), got {v!r}")
    return d


def _parse_shape(v: Any, what: str, unknown_dims: bool = True) -> sh.Shape:
    """null (unknown rank) or a list of dimensions: integers >= 0, or null for an unknown size."""
    if v is None:
        return None
    if not isinstance(v, list):
        raise _Fail(f"{what} must be a list of dimensions or null, got {_kind(v)} {_short(v)}")
    if len(v) > MAX_RANK:
        raise _Fail(f"{what} has rank {len(v)}, over the limit of {MAX_RANK}")
    for d in v:
        if d is None and unknown_dims:
            continue
        if not _is_int(d) or not 0 <= d <= _INT64_MAX:
            allowed = "an integer >= 0 or null" if unknown_dims else "an integer >= 0"
            raise _Fail(f"{what} has dimension {_short(d)}; each dimension must be {allowed}")
    return tuple(v)


def _known(shape: sh.Shape) -> tuple[int, ...]:
    """A shape parsed with ``unknown_dims=False``, typed as such; null (an unknown rank) is refused
    here, since only a value's shape is read through it and a value has one."""
    if shape is None or any(d is None for d in shape):
        raise _Fail("an ndarray's shape must be a list of dimensions, got null")
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]


def _parse_spec(v: Any, what: str) -> TensorSpec:
    if not isinstance(v, dict):
        raise _Fail(f"{what} must be an object, got {_kind(v)}")
    missing = [f for f in _SPEC_FIELDS if f not in v]
    extra = sorted(k for k in v if k not in _SPEC_FIELDS)
    if missing or extra:
        raise _Fail(f"{what} must have exactly the fields {list(_SPEC_FIELDS)}; "
                    + (f"missing {missing[0]!r}" if missing else f"unknown {extra[0][:80]!r}"))
    return TensorSpec(
        _parse_dtype(v["dtype"], f"{what}.dtype"),
        _parse_shape(v["shape"], f"{what}.shape"),
        None if v["elem_dtype"] is None else _parse_dtype(v["elem_dtype"], f"{what}.elem_dtype", False),
        _parse_shape(v["elem_shape"], f"{what}.elem_shape"),
    )


# ---- attribute values --------------------------------------------------------------------------------
def _decode_value(v: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise _Fail(f"value nested deeper than {MAX_DEPTH} levels")
    if _is_int(v) and not _INT64_MIN <= v <= _INT64_MAX:
        raise _Fail(f"integer {_short(v)} is outside the int64 range")
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        if len(v) > MAX_NAME_CHARS:
            raise _Fail(f"string of {len(v)} characters exceeds the limit of {MAX_NAME_CHARS}")
        return v
    if isinstance(v, list):
        return [_decode_value(x, depth + 1) for x in v]
    assert isinstance(v, dict)
    if len(v) == 1 and next(iter(v)) in _TAGS:
        tag, body = next(iter(v.items()))
        if tag == "ndarray":
            return _decode_array(body)
        if tag == "float":
            if body not in _NONFINITE:
                raise _Fail(f'{{"float": ...}} holds "nan", "inf" or "-inf", got {_short(body)}')
            return _NONFINITE[body]
        if not isinstance(body, dict):
            raise _Fail(f'{{"dict": ...}} holds an object, got {_kind(body)}')
        v = body
    for k in v:
        if k.startswith("__"):
            raise _Fail(f"object key {k[:80]!r} is reserved (keys may not start with '__')")
    return {k: _decode_value(x, depth + 1) for k, x in v.items()}


def _decode_array(body: Any) -> np.ndarray:
    if not isinstance(body, dict) or set(body) != {"dtype", "shape", "data"}:
        got = sorted(body) if isinstance(body, dict) else _kind(body)
        raise _Fail(f"an ndarray is an object with exactly the fields dtype, shape, data; got {got}")
    d = _parse_dtype(body["dtype"], "ndarray dtype", opaque_ok=False)
    shape = _known(_parse_shape(body["shape"], "ndarray shape", unknown_dims=False))
    n = math.prod(shape)
    if n > MAX_ARRAY_ELEMENTS:
        raise _Fail(f"ndarray of shape {list(shape)} has {n} elements, over the limit of {MAX_ARRAY_ELEMENTS}")
    data = body["data"]
    if not isinstance(data, list):
        raise _Fail(f"ndarray data must be a flat list, got {_kind(data)}")
    if len(data) != n:
        raise _Fail(f"ndarray data has {len(data)} elements but shape {list(shape)} needs {n}")
    check = _ELEMENT_CHECKS[d.name]
    for k, x in enumerate(data):
        if not check(x):
            raise _Fail(f"ndarray data[{k}] = {_short(x)} is not a valid {d.name} element")
    if d.is_floating:
        data = [_NONFINITE[x] if isinstance(x, str) else x for x in data]
    # an empty array may still declare huge dimensions beside its 0 ([2**40, 2**40, 0])
    why = sh.too_large_to_index(shape, np.dtype(d.numpy).itemsize)
    if why is not None:
        raise _Fail(f"ndarray shape {list(shape)} cannot be made: {why}")
    try:
        return np.array(data, dtype=d.numpy).reshape(shape)
    except (ValueError, OverflowError, MemoryError) as e:
        raise _Fail(f"ndarray of shape {list(shape)} cannot be made: {e}") from None


def _int_in(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda x: _is_int(x) and lo <= x <= hi


_ELEMENT_CHECKS: dict[str, Callable[[Any], bool]] = {
    "bool": lambda x: isinstance(x, bool),
    "int32": _int_in(-(2**31), 2**31 - 1),
    "int64": _int_in(_INT64_MIN, _INT64_MAX),
    # a finite number beyond float32's range would become an infinity: refused, as a feed is
    "float32": lambda x: _finite_in(x, float(np.finfo(np.float32).max)),
    "float64": lambda x: _finite_in(x, float(np.finfo(np.float64).max)),
}


def _finite_in(x: Any, largest: float) -> bool:
    """A float element: a JSON number within ``±largest``, or one of the names of the non-finite ones."""
    if isinstance(x, str):
        return x in _NONFINITE
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return abs(float(x)) <= largest
    except OverflowError:  # an int too large for any float
        return False


# ---- per-op attribute rules --------------------------------------------------------------------------
# A checker raises _Fail with what is wrong. Rules are keyed by primitive: (attr, required, checker).
Checker = Callable[[Any, str], None]


def _c_int(v: Any, what: str) -> None:
    if not _is_int(v):
        raise _Fail(f"{what} must be an integer, got {_kind(v)} {_short(v)}")


def _c_seed(v: Any, what: str) -> None:
    """A random op's seed: a 64-bit word, as TensorFlow's attrs (turnout.random_rules)."""
    if not _is_int(v) or not 0 <= v < 2**64:
        raise _Fail(f"{what} must be an integer in [0, 2**64), got {_short(v)}")


def _c_pos_int(v: Any, what: str) -> None:
    if not _is_int(v) or v < 1:
        raise _Fail(f"{what} must be an integer >= 1, got {_short(v)}")


def _c_bool(v: Any, what: str) -> None:
    if not isinstance(v, bool):
        raise _Fail(f"{what} must be a bool, got {_kind(v)} {_short(v)}")


def _c_budget_from(v: Any, what: str) -> None:
    if v not in PER_LOOP:
        raise _Fail(f"{what} must be 'loop' or 'gradient' (whose memory budget), got {_short(v)}")


def _c_name(v: Any, what: str) -> None:
    _check_name(v, what)


def _c_value_dtype(v: Any, what: str) -> None:
    _parse_dtype(v, what, opaque_ok=False)


def _c_opt_value_dtype(v: Any, what: str) -> None:
    if v is not None:
        _parse_dtype(v, what, opaque_ok=False)


def _c_shape(v: Any, what: str) -> None:
    _parse_shape(v, what)


def _c_known_shape(v: Any, what: str) -> None:
    if v is None:
        raise _Fail(f"{what} must be a fully known shape, got null")
    _parse_shape(v, what, unknown_dims=False)


def _c_ndarray(v: Any, what: str) -> None:
    if not isinstance(v, np.ndarray):
        raise _Fail(f'{what} must be an array ({{"ndarray": ...}}), got {_kind(v)} {_short(v)}')


def _c_int_list(lo: int | None) -> Checker:
    def check(v: Any, what: str) -> None:
        if not isinstance(v, list) or len(v) > MAX_RANK:
            raise _Fail(f"{what} must be a list of at most {MAX_RANK} integers, got {_kind(v)} {_short(v)}")
        for x in v:
            if not _is_int(x) or (lo is not None and x < lo):
                floor = "" if lo is None else f" >= {lo}"
                raise _Fail(f"{what} must hold integers{floor}, got {_short(x)}")

    return check


def _c_opt(check: Checker) -> Checker:
    def opt(v: Any, what: str) -> None:
        if v is not None:
            check(v, what)

    return opt


def _c_text(v: Any, what: str) -> None:
    if not isinstance(v, str):
        raise _Fail(f"{what} must be a string, got {_kind(v)} {_short(v)}")


def _c_shown(v: Any, what: str) -> None:
    if not isinstance(v, list) or not all(x is None or isinstance(x, str) for x in v):
        raise _Fail(f"{what} must be a list of strings and nulls (a datum shown), got {_kind(v)} {_short(v)}")


def _c_axis(v: Any, what: str) -> None:
    if v is None or _is_int(v):
        return
    _c_int_list(None)(v, what)


def _c_index_entry(v: Any, what: str, allow_none: bool) -> None:
    if v is None and allow_none or _is_int(v):
        return
    if isinstance(v, dict) and set(v) == {"input"} and _is_int(v["input"]) and v["input"] >= 0:
        return
    raise _Fail(f'{what} must be an integer{", null" if allow_none else ""} or {{"input": k}}, got {_short(v)}')


def _c_getitem_spec(v: Any, what: str) -> None:
    if not isinstance(v, list) or len(v) > MAX_RANK:
        raise _Fail(f"{what} must be a list of at most {MAX_RANK} index entries, got {_kind(v)}")
    for k, e in enumerate(v):
        w = f"{what}[{k}]"
        if not isinstance(e, dict) or e.get("kind") not in ("index", "slice"):
            raise _Fail(f'{w} must be an object with "kind": "index" or "slice", got {_short(e)}')
        fields = {"kind", "value"} if e["kind"] == "index" else {"kind", "start", "stop", "step"}
        if set(e) != fields:
            raise _Fail(f"{w} ({e['kind']}) must have exactly the fields {sorted(fields)}, got {sorted(e)}")
        if e["kind"] == "index":
            _c_index_entry(e["value"], f"{w}.value", False)
        else:
            _c_index_entry(e["start"], f"{w}.start", True)
            _c_index_entry(e["stop"], f"{w}.stop", True)
            if not (e["step"] is None or _is_int(e["step"]) and e["step"] != 0):
                raise _Fail(f"{w}.step must be a non-zero integer or null, got {_short(e['step'])}")


AttrRules = dict[str, tuple[bool, Checker]]
_REDUCE: AttrRules = {"axis": (False, _c_axis), "keepdims": (False, _c_bool)}
_VAR_OP: AttrRules = {"dtype": (True, _c_value_dtype), "shape": (False, _c_shape), "var_name": (False, _c_name)}
#: Send and Recv (made by turnout.devices.partition): the edge they cut, its two devices, the credit
#: of the edge (parallel_iterations of its frame) and whether it stands for a control edge.
_TRANSFER: AttrRules = {"edge": (True, _c_name), "src_device": (True, _c_name), "dst_device": (True, _c_name),
                        "credit": (True, _c_pos_int), "control": (True, _c_bool)}


def _c_any_dtype(v: Any, what: str) -> None:
    _parse_dtype(v, what, opaque_ok=True)


#: the window ops (turnout.windows): two ints each and the padding's name, which the shape rule checks
_CONV: AttrRules = {"strides": (True, _c_int_list(1)), "dilations": (True, _c_int_list(1)), "padding": (True, _c_text),
                    "groups": (False, _c_pos_int)}
_POOL: AttrRules = {"ksize": (True, _c_int_list(1)), "strides": (True, _c_int_list(1)), "padding": (True, _c_text)}

ATTR_RULES: dict[str, AttrRules] = {
    "Const": {"value": (True, _c_ndarray), "dtype": (True, _c_value_dtype), "gradient_filler": (False, _c_bool),
              "gradient_shape": (False, _c_bool)},
    "PreventGradient": {"message": (False, _c_text)},
    "Assert": {"message": (True, _c_text), "shown": (False, _c_shown), "summarize": (False, _c_int)},
    "Placeholder": {"dtype": (True, _c_value_dtype), "shape": (False, _c_shape)},
    "Enter": {"frame_name": (True, _c_name), "is_constant": (True, _c_bool),
              "parallel_iterations": (True, _c_pos_int)},
    "Reshape": {"shape": (True, _c_int_list(-1))},
    "Cast": {"dtype": (True, _c_value_dtype)},
    "Sum": _REDUCE, "Prod": _REDUCE, "Mean": _REDUCE, "Max": _REDUCE, "Min": _REDUCE, "All": _REDUCE, "Any": _REDUCE,
    "Concat": {"axis": (True, _c_int)},
    "Cumsum": {"axis": (True, _c_int), "exclusive": (False, _c_bool), "reverse": (False, _c_bool)},
    "Cumprod": {"axis": (True, _c_int), "exclusive": (False, _c_bool), "reverse": (False, _c_bool)},
    "ExpandDims": {"axis": (True, _c_int)},
    "Gather": {"axis": (False, _c_int)},
    "ScatterAddLike": {"axis": (False, _c_int)},
    "Transpose": {"perm": (False, _c_opt(_c_int_list(0)))},
    "Tile": {"multiples": (True, _c_int_list(0))},
    "ArgMax": {"axis": (True, _c_int)}, "ArgMin": {"axis": (True, _c_int)},
    "TopK": {"k": (True, _c_int)},
    "ReverseSequence": {"seq_axis": (True, _c_int), "batch_axis": (True, _c_int)},
    "MatMul": {"transpose_a": (False, _c_bool), "transpose_b": (False, _c_bool)},
    "MatrixInverse": {"adjoint": (False, _c_bool)}, "Cholesky": {},
    "MatrixTriangularSolve": {"lower": (False, _c_bool), "adjoint": (False, _c_bool)},
    "MatrixSolve": {"adjoint": (False, _c_bool)}, "MatrixDeterminant": {}, "LogMatrixDeterminant": {},
    "Conv2D": _CONV, "Conv2DBackpropInput": _CONV, "Conv2DBackpropFilter": _CONV,
    "MaxPool": _POOL, "MaxPoolGrad": _POOL, "AvgPool": _POOL, "AvgPoolGrad": _POOL,
    "GetItem": {"spec": (True, _c_getitem_spec)},
    "GetItemGrad": {"spec": (True, _c_getitem_spec)},
    "VarHandle": {"var_name": (True, _c_name), "dtype": (True, _c_value_dtype), "shape": (True, _c_known_shape),
                  "initial_value": (True, _c_ndarray)},
    "ReadVariable": _VAR_OP, "AssignVariable": _VAR_OP, "AssignAddVariable": _VAR_OP, "AssignSubVariable": _VAR_OP,
    "TensorArrayNew": {"dtype": (True, _c_value_dtype), "element_shape": (False, _c_shape),
                       "dynamic_size": (False, _c_bool), "ragged_list": (False, _c_bool)},
    "TensorArrayStack": {"static_size": (False, _c_int), "unwritten_zeros": (False, _c_bool),
                         "element_shape": (False, _c_known_shape)},
    "TensorArrayWrite": {"overwrite": (False, _c_bool), "ragged": (False, _c_bool)},
    "StackNew": {"dtype": (False, _c_opt_value_dtype), "shape": (False, _c_shape),
                 "elem_dtype": (False, _c_opt_value_dtype), "elem_shape": (False, _c_shape),
                 "memory_budget": (False, _c_pos_int), "budget_from": (False, _c_budget_from)},
    "RandomDraw": {"distribution": (True, _c_text), "dtype": (True, _c_value_dtype), "seed": (True, _c_seed),
                   "seed2": (True, _c_seed)},
    "Send": _TRANSFER,
    "Recv": {**_TRANSFER, "dtype": (True, _c_any_dtype), "shape": (False, _c_shape),
             "elem_dtype": (False, _c_opt_value_dtype), "elem_shape": (False, _c_shape)},
    "StackPop": {"dtype": (True, _c_value_dtype), "shape": (False, _c_shape),
                 "elem_dtype": (False, _c_opt_value_dtype), "elem_shape": (False, _c_shape)},
}
#: Attributes checked on every op that has them and no rule of its own for them.
_GENERIC_RULES: AttrRules = {
    "dtype": (False, _c_value_dtype), "elem_dtype": (False, _c_opt_value_dtype), "shape": (False, _c_shape),
    "element_shape": (False, _c_shape), "elem_shape": (False, _c_shape),
}


def _dyn_count(spec: list[dict[str, Any]]) -> list[int]:
    refs = []
    for e in spec:
        for key in ("value", "start", "stop"):
            if isinstance(e.get(key), dict):
                refs.append(e[key]["input"])
    return refs


def _check_getitem_inputs(attrs: dict[str, Any], n_inputs: int, first_dyn: int) -> None:
    refs = _dyn_count(attrs["spec"])
    if sorted(refs) != list(range(n_inputs - first_dyn)):
        raise _Fail(f"attr spec refers to tensor indices {sorted(refs)} but the node has {n_inputs - first_dyn} "
                    "index inputs; each must be referred to exactly once")


def _check_shown(attrs: dict[str, Any], n_inputs: int) -> None:
    shown = attrs.get("shown")
    data = n_inputs - 2
    if shown is not None and shown.count(None) != data:
        raise _Fail(f"attr shown shows {shown.count(None)} data but the node has {data} data inputs after its "
                    "condition and value")


def _check_array_attr(attrs: dict[str, Any], arr_key: str, shape_key: str | None) -> None:
    arr = attrs[arr_key]
    if arr.dtype != np.dtype(dt.ALL[attrs["dtype"]].numpy):
        raise _Fail(f"attr {arr_key} holds {arr.dtype} values but attr dtype says {attrs['dtype']}")
    if shape_key is not None and list(arr.shape) != list(attrs[shape_key]):
        raise _Fail(f"attr {arr_key} has shape {list(arr.shape)} but attr {shape_key} says {attrs[shape_key]}")


#: Checks that relate attrs to each other or to the number of inputs, keyed by primitive.
NODE_RULES: dict[str, Callable[[dict[str, Any], int], None]] = {
    "Const": lambda a, n: _check_array_attr(a, "value", None),
    "Assert": _check_shown,
    "VarHandle": lambda a, n: _check_array_attr(a, "initial_value", "shape"),
    "GetItem": lambda a, n: _check_getitem_inputs(a, n, 1),
    "GetItemGrad": lambda a, n: _check_getitem_inputs(a, n, 2),
}


def _check_attrs(op: str, attrs: dict[str, Any], n_inputs: int) -> None:
    rules = {**{k: r for k, r in _GENERIC_RULES.items() if k in attrs}, **ATTR_RULES.get(op, {})}
    for key, (required, check) in rules.items():
        if key not in attrs:
            if required:
                raise _Fail(f"{op} needs attr {key!r}")
            continue
        check(attrs[key], f"attr {key}")
    node_rule = NODE_RULES.get(op)
    if node_rule is not None:
        node_rule(attrs, n_inputs)


# ---- one node record ----------------------------------------------------------------------------------
class _Record:
    """One node as read from the document, with every field checked but nothing built yet."""

    def __init__(self, index: int, name: str, op: str, inputs: list[str], control_inputs: list[str],
                 attrs: dict[str, Any], device: str | None, outputs: list[TensorSpec]) -> None:
        self.index, self.name, self.op = index, name, op
        self.inputs, self.control_inputs = inputs, control_inputs
        self.attrs, self.device, self.outputs = attrs, device, outputs

    @property
    def where(self) -> str:
        return f'node {self.index} ("{self.name}", {self.op})'

    @staticmethod
    def parse(i: int, rec: Any) -> _Record:
        if not isinstance(rec, dict):
            raise SerializationError(f"node {i}: a node is a JSON object, got {_kind(rec)}")
        name_hint: str = rec["name"] if isinstance(rec.get("name"), str) else "?"
        where = f'node {i} ("{name_hint[:80]}")'
        _exact_keys(rec, _NODE_FIELDS, where)
        field = "name"
        try:
            name = _check_name(rec["name"], "the node name")
            field = "op"
            op = rec["op"]
            if not isinstance(op, str) or op not in primitives.PRIMITIVES:
                raise _Fail(f"unknown op {_short(op)}; known ops are the primitives of turnout.primitives")
            field = "inputs"
            inputs = _string_list(rec["inputs"], "inputs")
            field = "control_inputs"
            control = _string_list(rec["control_inputs"], "control_inputs")
            if len(set(control)) != len(control):
                raise _Fail("a control input is listed twice")
            field = "device"
            device = rec["device"]
            if device is not None:
                _check_device(_check_name(device, "device"))
            field = "outputs"
            if not isinstance(rec["outputs"], list) or len(rec["outputs"]) > 64:
                raise _Fail(f"outputs must be a list of output specs, got {_kind(rec['outputs'])}")
            outputs = [_parse_spec(s, f"outputs[{k}]") for k, s in enumerate(rec["outputs"])]
            field = "attrs"
            raw = rec["attrs"]
            if not isinstance(raw, dict):
                raise _Fail(f"attrs must be an object, got {_kind(raw)}")
            attrs = {}
            for k, v in raw.items():
                if k.startswith("__") or not k:
                    raise _Fail(f"attr name {k[:80]!r} is not allowed (empty or starting with '__')")
                try:
                    attrs[k] = _decode_value(v, 0)
                except _Fail as e:
                    raise _Fail(f"attr {k}: {e}") from None
            _check_attrs(op, attrs, len(inputs))
        except _Fail as e:
            raise SerializationError(f"{where}, field '{field}': {e}") from None
        return _Record(i, name, op, inputs, control, attrs, device, outputs)


def _string_list(v: Any, what: str) -> list[str]:
    if not isinstance(v, list):
        raise _Fail(f"{what} must be a list of strings, got {_kind(v)}")
    for k, x in enumerate(v):
        if not isinstance(x, str):
            raise _Fail(f"{what}[{k}] must be a string, got {_kind(x)} {_short(x)}")
    return v


def _parse_ref(ref: str) -> tuple[str, int]:
    name, sep, idx = ref.rpartition(":")
    if not sep or not name or not idx.isdigit() or not idx.isascii() or len(idx) > 4:
        raise _Fail(f"input {_short(ref)} must be 'node_name:output_index' or {BACK_EDGE_REF!r}")
    return name, int(idx)


# ---- rebuilding -------------------------------------------------------------------------------------------
class _Builder:
    """Rebuild the graph through ``Graph.create_node``, so shape inference checks every node again."""

    def __init__(self, records: list[_Record], origin: str | None) -> None:
        self.records = records
        self.origin = origin
        self.position: dict[str, _Record] = {}
        for r in records:
            if r.name in self.position:
                first = self.position[r.name]
                raise SerializationError(f"{r.where}, field 'name': duplicate node name (node {first.index} "
                                         "has the same name)")
            self.position[r.name] = r
        self.graph = Graph()
        self.back_edges: list[tuple[Node, int, _Record, str, int]] = []

    def build(self, validate: bool) -> Graph:
        g = self.graph
        with g._no_capture():
            for r in self.records:
                self._create(r)
        for merge, slot, r, name, idx in self.back_edges:
            try:
                merge.close_back_edge(g.node(name).outputs[idx], slot)
            except TurnoutError as e:
                raise SerializationError(f"{r.where}, field 'inputs'[{slot}]: cannot bind back edge {name}:{idx}: "
                                         f"{e}") from e
        if validate:
            try:
                _validate(g)
            except ValidationError as e:
                raise SerializationError(f"the loaded graph is not well-formed: {e}") from e
        return g

    def _inputs(self, r: _Record) -> tuple[list[Tensor | _PendingBackEdge], list[tuple[int, str, int]]]:
        """The node's inputs, with forward back edges left pending, and those pending (slot, name, index)."""
        ins: list[Tensor | _PendingBackEdge] = []
        forward: list[tuple[int, str, int]] = []
        for slot, ref in enumerate(r.inputs):
            if ref == BACK_EDGE_REF:
                if r.op != "Merge":
                    raise _Fail(f"input {slot} is {BACK_EDGE_REF!r}, but only a Merge has back-edge slots")
                ins.append(BACK_EDGE)
                continue
            name, idx = _parse_ref(ref)
            src = self.position.get(name)
            if src is None:
                raise _Fail(f"input {slot} refers to unknown node {name[:80]!r}")
            if idx >= len(src.outputs):
                raise _Fail(f"input {slot} refers to output {idx} of {name!r}, which has {len(src.outputs)} outputs")
            if src.index < r.index:
                ins.append(self.graph.node(name).outputs[idx])
            elif r.op == "Merge" and src.op == "NextIteration":
                forward.append((slot, name, idx))
                ins.append(BACK_EDGE)
            else:
                what = "itself" if src is r else f"node {src.index}, which comes later"
                raise _Fail(f"input {slot} ({ref}) refers to {what}; only a Merge may refer forward, to the "
                            "NextIteration of its back edge")
        return ins, forward

    def _create(self, r: _Record) -> None:
        g = self.graph
        field = "inputs"
        try:
            ins, forward = self._inputs(r)
            field = "control_inputs"
            ctrl = []
            for c in r.control_inputs:
                src = self.position.get(c)
                if src is None or src.index >= r.index:
                    raise _Fail(f"control input {c[:80]!r} is " + ("unknown" if src is None else "not an earlier node"))
                ctrl.append(g.node(c))
            field = "outputs"
            specs = self._merge_specs(r, ins) if r.op == "Merge" else self._checked_specs(r, ins)
            with g.device(r.device):
                try:
                    node = g.create_node(r.op, ins, r.attrs, name=r.name, control_inputs=ctrl, specs=specs)
                except Exception as e:  # whatever the shape rule trips on, the document is at fault
                    raise _Fail(f"the {r.op} shape rule rejects the inputs or attrs: {_msg(e)}") from None
            if node.name != r.name:
                raise _Fail(f"the graph renamed the node to {node.name!r}")
            node.source = f"{self.origin or 'serialized graph'} node {r.index}"
            self.back_edges.extend((node, slot, r, name, idx) for slot, name, idx in forward)
            if r.op == "VarHandle":
                vname = r.attrs["var_name"]
                if vname in g.variables:
                    raise _Fail(f"variable {vname!r} is declared twice (also by {g.variables[vname].name!r})")
                g.variables[vname] = node
        except _Fail as e:
            raise SerializationError(f"{r.where}, field '{field}': {e}") from None

    def _checked_specs(self, r: _Record, ins: list[Tensor | _PendingBackEdge]) -> list[TensorSpec]:
        """Run the shape rule and check the recorded specs against it (``[W-Types]``: equal dtypes,
        compatible shapes); the node keeps its recorded specs, so the text round-trips exactly."""
        try:
            inferred = infer(r.op, [t for t in ins if isinstance(t, Tensor)], r.attrs)
        except Exception as e:  # whatever the shape rule trips on, the document is at fault
            raise _Fail(f"the {r.op} shape rule rejects the inputs or attrs: {_msg(e)}") from None
        problem = spec_mismatch(r.outputs, inferred)
        if problem:
            raise _Fail(problem)
        return r.outputs

    def _merge_specs(self, r: _Record, ins: list[Tensor | _PendingBackEdge]) -> list[TensorSpec]:
        """A Merge keeps its recorded spec (a loop variable's shape invariant may be more general than
        its entry's shape), once checked against its bound inputs."""
        bound = [t for t in ins if isinstance(t, Tensor)]
        try:
            inferred = infer("Merge", bound, r.attrs)
        except Exception as e:  # whatever the rule trips on, the document is at fault
            raise _Fail(f"the Merge shape rule rejects the inputs: {_msg(e)}") from None
        if len(r.outputs) != 2:
            raise _Fail(f"a Merge has 2 outputs, the record lists {len(r.outputs)}")
        out, idx = r.outputs
        want = inferred[0]
        if (out.dtype, out.elem_dtype, out.elem_shape) != (want.dtype, want.elem_dtype, want.elem_shape):
            raise _Fail(f"outputs[0] is recorded as {_fmt(out)} but the inputs give {_fmt(want)}")
        for t in bound:
            if not sh.compatible(out.shape, t.shape):
                raise _Fail(f"outputs[0] has shape {sh.fmt(out.shape)}, incompatible with input {t.name} of shape "
                            f"{sh.fmt(t.shape)}")
        if idx != inferred[1]:
            raise _Fail(f"outputs[1] (value_index) must be an int32 scalar, got {_fmt(idx)}")
        return [out, idx]


def _msg(e: BaseException) -> str:
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)


def _fmt(s: TensorSpec) -> str:
    out = f"{s.dtype.name}{sh.fmt(s.shape)}"
    if s.elem_dtype is not None or s.elem_shape is not None:
        out += f" (elements {s.elem_dtype.name if s.elem_dtype else '?'}{sh.fmt(s.elem_shape)})"
    return out
