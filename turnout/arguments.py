"""Arguments of public functions checked against their annotations, at the call.

Why: a public function handed an argument of the wrong kind (a graph that is an int, a list of
values that is one object) used to fail deep inside with Python's own ``AttributeError`` or
``TypeError`` ("'int' object has no attribute 'nodes'"), naming nothing of the caller's. ``checked``
reads the annotations the function already declares and refuses an argument that cannot be of that
kind: one ``ArgumentError`` naming the function and the parameter (``checked`` says when).

Only kinds that can be told cheaply and surely are checked: classes (``Graph``, ``Tensor``,
``Placement``...), ``bool``, ``int``, ``float``, ``str``, callables, mappings, and collections (any
iterable but a string: a numpy array of sizes is a fine ``Sequence[int]``), through ``Optional`` and
unions. ``Any`` and what the annotation cannot say are left to the function.
"""

from __future__ import annotations

import collections.abc as abc
import contextvars
import functools
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar

import numpy as np

from turnout.errors import ArgumentError, GraphBuildError, TurnoutError

F = TypeVar("F", bound=Callable[..., Any])

#: a test of one kind: value -> whether it may be of that kind
Test = Callable[[Any], bool]

_COLLECTIONS = (abc.Sequence, abc.Collection, abc.Iterable, abc.Set, list, tuple, set, frozenset)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def positive_int(v: Any) -> bool:
    """Whether ``v`` is an int (Python's or numpy's, not a bool) of at least 1: what every count and
    byte budget of the API takes (``RunOptions``, ``FastOptions``, ``memory_budget=``), checked by
    this one test so each refuses the same values."""
    return _is_int(v) and bool(v >= 1)


def _is_iterable(v: Any) -> bool:
    return isinstance(v, abc.Iterable) and not isinstance(v, (str, bytes))


#: simple annotations -> their test
_SIMPLE: dict[Any, Test] = {
    bool: lambda v: isinstance(v, (bool, np.bool_)),
    int: _is_int,
    float: lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)),
    str: lambda v: isinstance(v, str),
}


def kind_test(annotation: Any) -> Optional[Test]:
    """The test of ``annotation``'s kind, or ``None`` when it says nothing checkable (``Any``, a type
    variable, a ``Literal``...)."""
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        tests = [kind_test(a) for a in typing.get_args(annotation)]
        if any(t is None for t in tests):
            return None
        return lambda v: any(t(v) for t in tests)  # type: ignore[misc]
    if annotation is type(None):
        return lambda v: v is None
    if origin in _COLLECTIONS or annotation in _COLLECTIONS:
        return _is_iterable
    if origin in (abc.Mapping, dict) or annotation in (abc.Mapping, dict):
        return lambda v: isinstance(v, abc.Mapping)
    if origin is abc.Callable or annotation is abc.Callable:
        return callable
    if inspect.isclass(annotation) and origin is None and annotation.__module__.startswith("turnout"):
        return lambda v: isinstance(v, annotation)
    return None


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s parameter annotations, evaluated by ``typing.get_type_hints``; none when one cannot be
    (a name imported for the type checker alone): that function's arguments are then left to it."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001  (NameError, or an annotation typing cannot read)
        return {}


def _eager(annotation: Any) -> bool:
    """Whether an argument of this kind is checked before the body runs: a string, a flag, a mapping
    or a Turnout class, which a function takes as it comes (a name that is no string, a ``keepdims``
    that is no bool would be used as they are, silently). Numbers, callables and collections are
    checked by the functions themselves, with messages that say more (``reshape(x, 4)``: "write
    [4]"), so their kind is diagnosed only when the body fails with a built-in error."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] \
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) else [annotation]
    return all(a in (str, bool) or typing.get_origin(a) in (abc.Mapping, dict) or a in (abc.Mapping, dict)
               or (inspect.isclass(a) and a.__module__.startswith("turnout")) for a in args)


def checked(fn: F) -> F:
    """``fn`` with its arguments checked against its annotations (``kind_test``): a mismatch is an
    ``ArgumentError`` naming the function and the parameter. Strings, flags, mappings and Turnout
    objects are checked before the body runs (``_eager``); the other kinds only when the body fails
    with a built-in error (``TypeError``, ``AttributeError``...), which then becomes the
    ``ArgumentError`` of the argument of the wrong kind (a Turnout error from the body is its own
    say). The tests are made on the first call (annotations may name classes defined after ``fn``)."""
    sig = inspect.signature(fn)
    tests: Optional[tuple[dict[str, Test], dict[str, Test]]] = None
    # a constructor is named by its class (``Variable``), a method by its class too (``SGD.minimize``)
    label = fn.__qualname__.removesuffix(".__init__") if "." in fn.__qualname__ and "<" not in fn.__qualname__ \
        else fn.__name__

    def refuse(name: str, value: Any) -> ArgumentError:
        return ArgumentError(f"{label}: {name} must be {_say(sig.parameters[name])}, "
                             f"got {type(value).__name__} {_short(value)}")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal tests
        if tests is None:
            hints = _hints(fn)
            found = {p: (kind_test(hints[p]), _eager(hints[p])) for p in sig.parameters if p in hints}
            tests = ({p: t for p, (t, e) in found.items() if t is not None and e},
                     {p: t for p, (t, e) in found.items() if t is not None and not e})
        eager, lazy = tests
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{label}: {e}") from None
        for name, value in bound.arguments.items():
            test = eager.get(name)
            if test is not None and not test(value):
                raise refuse(name, value)
        node_name = bound.arguments.get("name")
        if isinstance(node_name, str):  # every checked function's ``name`` names the node(s) it makes
            check_node_name(node_name, label)
        depth = _DEPTH.set(_DEPTH.get() + 1)
        try:
            return fn(*args, **kwargs)
        except GraphBuildError as e:
            given = {k: v for k, v in bound.arguments.items() if k != "self"}
            named = _naming(label, e, given) if _DEPTH.get() == 1 else None
            if named is None:
                raise
            raise named from None
        except TurnoutError:
            raise
        except (TypeError, ValueError, AttributeError, KeyError, IndexError):
            for name, value in bound.arguments.items():
                test = lazy.get(name)
                if test is not None and not test(value):
                    raise refuse(name, value) from None
            raise
        finally:
            _DEPTH.reset(depth)

    return wrapper  # type: ignore[return-value]


def check_node_name(name: str, who: str) -> None:
    """Refuse a node name given by the user (``who``: the function it was given to) that holds a
    ``":"`` or starts with ``"^"``. Why: a tensor is named ``"node:index"`` and a control input
    ``"^node"``, in ``Graph.tensor``, in a GraphDef's inputs and in TensorFlow's checkpoints, so a
    Variable ``"a:b"`` would read back from an exported GraphDef as output ``b`` of a node ``a``, and
    under a key TensorFlow's ``Saver`` cannot restore into that graph. Applied by ``checked`` to every
    builder's ``name`` argument and by ``Graph.name_scope``. The names Turnout makes itself (the
    partitioner's ``"_send/add:0->cpu:1"``) live in graphs that are never exported to TensorFlow."""
    if ":" in name or name.startswith("^"):
        why = ("':' separates a node's name from an output index (\"node:0\")" if ":" in name
               else "a leading '^' marks a control input (\"^node\")")
        raise ArgumentError(f"{who}: node name {name!r} cannot be used: {why}, so the name would not read back "
                            "from an exported GraphDef or a TensorFlow checkpoint")


def option_fields(cls: type, args: Sequence[Any], fields: Any, what: str) -> None:
    """Refuse a call of the options dataclass ``cls`` (``RunOptions``, ``FastOptions``) that names a
    field it does not have or passes more positional values than it has fields: an ``ArgumentError``
    naming the misspelt options (``what``: how a message calls one, "run option"). Why here and not
    the dataclass's own ``TypeError``: every options class refuses a misspelt option alike, by name,
    as a ``checked`` function refuses a misspelt argument. Called from the class's ``__new__``."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(cls)}
    unknown = [k for k in fields if k not in known]
    if unknown:
        raise ArgumentError(f"unknown {what}(s) {unknown}; {cls.__name__} has {sorted(known)}")
    if len(args) > len(known):
        raise ArgumentError(f"{cls.__name__} takes at most {len(known)} options, got {len(args)}")


def check_arity(fn: Callable[..., Any], args: Sequence[Any], where: str, what: str) -> None:
    """Refuse a function the user handed a builder (``what``: its role in ``where``, such as ``body``
    in ``while_loop "while"``) that cannot take ``args``: an ``ArgumentError`` naming the builder and
    the role. Why from the signature, before the call: a body that takes one parameter for two loop
    variables is a mismatch of structures, which reached the user as Python's ``TypeError`` from the
    builder's call, while a ``TypeError`` raised inside ``fn`` is the user's own and must pass
    unchanged. Why the builder then calls ``fn`` itself: no frame is added between a builder and the
    user's function, whose nesting (a cond in a cond's branch) is Python recursion. A callable whose
    signature Python cannot read (some built-ins) passes."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*args)
    except TypeError as e:
        n = len(args)
        raise ArgumentError(f"{where}: {what} is called with {n} positional argument{'s' if n != 1 else ''}, "
                            f"which it cannot take ({e})") from None


def session_argument(session: Any, who: str) -> None:
    """Refuse a ``session`` argument that is no ``tn.Session`` (anything without its ``graph`` and
    ``variables``), naming ``who``. Why: the checkpoint functions read both at once, and ``None`` or a
    path passed first reached the user as Python's ``AttributeError``."""
    if not (hasattr(session, "graph") and hasattr(session, "variables")):
        raise ArgumentError(f"{who}: session must be a tn Session, got {type(session).__name__}")


def name_list(names: Any, who: str, param: str) -> list[str]:
    """``names`` as a list of strings, or an ``ArgumentError`` naming ``who`` and ``param``: an int is
    no list, and one string would be read as the list of its characters (``"wv"`` as ``["w", "v"]``)."""
    if isinstance(names, (str, bytes)) or not isinstance(names, abc.Iterable):
        raise ArgumentError(f"{who}: {param} must be a list of names, got {type(names).__name__} {_short(names)}")
    out = list(names)
    bad = next((n for n in out if not isinstance(n, str)), None)
    if bad is not None:
        raise ArgumentError(f"{who}: {param} must be a list of names, got {type(bad).__name__} {_short(bad)} "
                            "among them")
    return out


#: how many checked functions the current call is inside: an error names the argument of the
#: outermost one, the function the user called (``tn.tanh(obj)``, not the ``tn.constant`` it calls)
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("turnout_checked_depth", default=0)


def _naming(fn: str, e: GraphBuildError, arguments: dict[str, Any]) -> Optional[GraphBuildError]:
    """``e`` again, with the parameter that held the value it refuses named, when its message names
    no parameter but shows the value of exactly one argument (a builder converting its operands
    says "constant: <object ...> is a Python object"; which argument that was is the caller's
    question). ``None`` when ``e`` already says, or cannot be tied to one argument."""
    msg = str(e)
    if type(e).__init__ is not GraphBuildError.__init__ or "(argument " in msg:
        return None
    shown = [name for name, v in arguments.items()
             if not isinstance(v, (bool, int, float, str, type(None))) and len(repr(v)) >= 8 and repr(v) in msg]
    if len(shown) != 1:
        return None
    return type(e)(f"{msg} (argument {shown[0]} of {fn})")


#: how a message names the simple kinds
_WORDS = {"bool": "True or False", "str": "a string", "int": "an int", "float": "a number"}


def _say(p: inspect.Parameter) -> str:
    a = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
    return _WORDS.get(a, f"of the kind {a}")


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."
