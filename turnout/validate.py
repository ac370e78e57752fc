"""Validation: reject ill-formed graphs before they run, naming the node, its frame and the rule.

Why before running: an ill-formed graph does not fail cleanly at run time. A Merge whose back edge was
never bound waits forever, a fetch of a tensor inside a loop has one value per iteration rather than
one, and a Merge of mixed dtypes surfaces as a numpy error far from its cause. Each check below
implements one well-formedness rule of ``specs/semantics.rst`` (section "Well-formedness") and raises
``turnout.errors.ValidationError`` with that rule's name:

- ``[W-Cycle-Through-Next]``, ``[W-Frame-Consistent]``, ``[W-Exit-In-Frame]``, ``[W-Next-In-Frame]``
  and the ``parallel_iterations`` clause of ``[W-Frame-Name]`` come from ``turnout.frames.static_frames``;
- ``[W-Frame-Name]``: Enter attrs are well typed (a non-empty frame name, ``parallel_iterations >= 1``);
- ``[W-Next-In-Frame]``: a NextIteration feeds only Merge data inputs (it exists to close a loop's
  back edge), and a LoopCond lies inside a loop frame (the root frame has no iterations);
- ``[W-Merge-Bound]``: every back edge is bound, and a loop Merge's other inputs are non-constant
  Enters (its entry), so inputs arrive at iteration 0 only and back edges at iterations >= 1 only;
- ``[W-Types]``: every node's output specs are re-inferred on the final graph and compared with the
  recorded ones (equal dtypes, compatible shapes), Merge data inputs (back edges included) share a
  dtype, stack indices are int32 vectors, a stack op's handle comes from a StackNew and a Variable
  op's from a VarHandle;
- ``[W-Fetch-Root]``: fetched tensors belong to this graph and lie in the root frame.

``[W-Merge-Unique]`` is a condition on runs, not on graphs; the builders guarantee it and it is not
checked here. A frame that has NextIterations but no LoopCond is suspicious but legal.

Results are cached per graph and graph version, so repeated ``Session.run`` calls validate once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.arguments import checked
from turnout.errors import ArgumentError, ValidationError, describe_node
from turnout.frames import FrameAnalysis, static_frames
from turnout.graph import Graph, Node, Tensor, TensorSpec, fetched_tensor, sources

__all__ = ["validate", "clear_cache"]

#: Where a graph keeps its last validation result, ``(graph.version, analysis)``. It lives on the
#: graph itself: a module-level table, even a weak one, would keep every graph alive, because the
#: analysis refers to the graph's nodes and the nodes to their graph.
_CACHE_ATTR = "_turnout_validation"


def clear_cache(graph: Graph) -> None:
    """Forget the cached validation result of ``graph``."""
    graph.__dict__.pop(_CACHE_ATTR, None)


def frame_analysis(graph: Graph) -> FrameAnalysis:
    """The static frame analysis of ``graph``: the one its validation at this version cached, else
    computed now (``static_frames``). Why: a backend validates a graph and then raises it into
    regions, and both need the analysis; it walks every node, so it is made once per version."""
    cached = graph.__dict__.get(_CACHE_ATTR)
    if cached is not None and cached[0] == graph.version:
        return cached[1]  # type: ignore[no-any-return]
    return static_frames(graph)


@checked
def validate(graph: Graph, fetches: Iterable[Any] | None = None,
             feeds: Iterable[Any] | None = None) -> FrameAnalysis:
    """Check every well-formedness rule; return the static frame analysis of the graph.

    ``fetches`` (tensors or nodes) must belong to ``graph`` and lie in its root frame
    ([W-Fetch-Root]); ``feeds`` (tensors) must belong to ``graph``. Raises ValidationError naming the
    rule and the offending node. The graph part is cached per ``(graph, graph.version)``.
    """
    if not isinstance(graph, Graph):
        raise ArgumentError(f"validate expects a tn.Graph, got {type(graph).__name__}")
    cached = graph.__dict__.get(_CACHE_ATTR)
    if cached is not None and cached[0] == graph.version:
        analysis: FrameAnalysis = cached[1]
    else:
        analysis = _validate_graph(graph)
        graph.__dict__[_CACHE_ATTR] = (graph.version, analysis)
    for f in fetches or ():
        _check_fetch(graph, analysis, f)
    for f in feeds or ():
        if not isinstance(f, Tensor):
            raise ValidationError(f"feed {f!r} is not a tensor", "W-Fetch-Root")
        if not _owns(graph, f.node):
            raise ValidationError(f"feed {f.name} ({describe_node(f.node)}) belongs to another graph",
                                  "W-Fetch-Root", f.node)
    return analysis


# ---- the graph checks, in dependency order --------------------------------------------------------
def _validate_graph(graph: Graph) -> FrameAnalysis:
    for n in graph.nodes:
        _check_ownership(graph, n)
        _check_merge_bound(n)
        if n.op == "Enter":
            _check_enter_attrs(n)
    _check_next_iteration_consumers(graph)
    analysis = static_frames(graph)
    for n in graph.nodes:
        if n.op == "LoopCond" and not analysis.node_frame[n.id]:
            raise ValidationError(
                f"{describe_node(n)} is in the root frame; a loop predicate belongs inside the loop's frame "
                "(the root frame has no iterations)", "W-Next-In-Frame", n,
            )
        _check_types(n)
    return analysis


def _owns(graph: Graph, node: Node) -> bool:
    return node.graph is graph and node.id < len(graph.nodes) and graph.nodes[node.id] is node


def _check_ownership(graph: Graph, n: Node) -> None:
    """Inputs and control inputs are nodes of this graph (a hand-edited graph could break this)."""
    for t in n.raw_inputs:
        if isinstance(t, Tensor) and not _owns(graph, t.node):
            raise ValidationError(f"{describe_node(n)} reads {t.name}, which belongs to another graph",
                                  "W-Frame-Consistent", n)
    for c in n.control_inputs:
        if not _owns(graph, c):
            raise ValidationError(f"{describe_node(n)} has a control input {c.name!r} from another graph",
                                  "W-Frame-Consistent", n)


def _check_merge_bound(n: Node) -> None:
    """[W-Merge-Bound]: back edges are bound, and a loop Merge's other inputs are non-constant Enters."""
    if n.op != "Merge":
        return
    if n.has_pending_back_edge:
        slots = [i for i, t in enumerate(n.raw_inputs) if not isinstance(t, Tensor)]
        raise ValidationError(
            f"{describe_node(n)} has an unbound back edge (input slot {slots[0]}); bind it with "
            "tn.raw.close_back_edge(merge, next_iteration) once the NextIteration exists", "W-Merge-Bound", n,
        )
    ins = n.inputs
    if not any(t.node.op == "NextIteration" for t in ins):
        return
    entries = [t for t in ins if t.node.op != "NextIteration"]
    if not entries:
        raise ValidationError(
            f"{describe_node(n)} is a loop Merge whose inputs all come from NextIteration nodes; it needs an "
            "entry input from an Enter, or the loop can never start", "W-Merge-Bound", n,
        )
    for t in entries:
        if t.node.op != "Enter" or t.node.attrs.get("is_constant"):
            what = "a constant Enter" if t.node.op == "Enter" else describe_node(t.node)
            raise ValidationError(
                f"{describe_node(n)} is a loop Merge (it has a NextIteration input) but its input {t.name} comes "
                f"from {what}; the other inputs of a loop Merge must be non-constant Enter nodes",
                "W-Merge-Bound", n,
            )


def _check_enter_attrs(n: Node) -> None:
    """[W-Frame-Name]: the frame is named, and parallel_iterations is an integer >= 1."""
    name = n.attrs.get("frame_name")
    if not isinstance(name, str) or not name:
        raise ValidationError(f"{describe_node(n)} has frame_name {name!r}; it must be a non-empty string",
                              "W-Frame-Name", n)
    pi = n.attrs.get("parallel_iterations", 10)
    if not isinstance(pi, int) or isinstance(pi, bool) or pi < 1:
        raise ValidationError(f"{describe_node(n)} has parallel_iterations={pi!r}; it must be an integer >= 1",
                              "W-Frame-Name", n)
    if not isinstance(n.attrs.get("is_constant", False), bool):
        raise ValidationError(f"{describe_node(n)} has is_constant={n.attrs['is_constant']!r}; it must be a bool",
                              "W-Frame-Name", n)


def _check_next_iteration_consumers(graph: Graph) -> None:
    """[W-Next-In-Frame]: a NextIteration's output is a back edge, so only Merges may read it."""
    for n in graph.nodes:
        for t in n.raw_inputs:
            if isinstance(t, Tensor) and t.node.op == "NextIteration" and n.op != "Merge":
                raise ValidationError(
                    f"{describe_node(n)} reads {t.name}, the output of {describe_node(t.node)}; a NextIteration "
                    "may only feed a loop Merge (its back edge)", "W-Next-In-Frame", n,
                )
        for c in n.control_inputs:
            if c.op == "NextIteration":
                raise ValidationError(
                    f"{describe_node(n)} has a control input on {describe_node(c)}; a NextIteration may only "
                    "feed a loop Merge (its back edge)", "W-Next-In-Frame", n,
                )


# ---- [W-Types] -------------------------------------------------------------------------------------
def _fmt_spec(s: TensorSpec) -> str:
    out = f"{s.dtype.name}{sh.fmt(s.shape)}"
    if s.elem_dtype is not None:
        out += f" of {s.elem_dtype.name}{sh.fmt(s.elem_shape)}"
    return out


def _types_error(n: Node, what: str) -> ValidationError:
    return ValidationError(f"{describe_node(n)}: {what}", "W-Types", n)


def _check_merge_types(n: Node) -> None:
    """All data inputs, back edges included, share the Merge's dtype and fit its shape (the loop
    variable's shape invariant); value_index is an int32 scalar."""
    if len(n.outputs) != 2:
        raise _types_error(n, f"a Merge has 2 outputs (value, value_index), this one has {len(n.outputs)}")
    out, idx = n.outputs[0].spec, n.outputs[1].spec
    if idx.dtype != dt.int32 or idx.shape != ():
        raise _types_error(n, f"value_index must be an int32 scalar, got {_fmt_spec(idx)}")
    for t in n.inputs:
        if t.dtype != out.dtype:
            others = ", ".join(f"{u.name}: {u.dtype.name}" for u in n.inputs)
            raise _types_error(n, f"data inputs have different dtypes ({others}); all inputs of a Merge must "
                                  "share one dtype (use tn.cast on one branch)")
        back = t.node.op == "NextIteration"
        if not (sh.fits_invariant(out.shape, t.shape) if back else sh.compatible(out.shape, t.shape)):
            raise _types_error(n, f"input {t.name} has shape {sh.fmt(t.shape)}, which does not fit the Merge's "
                                  f"shape {sh.fmt(out.shape)}")


def _check_stack_index(n: Node) -> None:
    """Stack indices are int32 vectors of the enclosing loops' iteration counters."""
    idx = n.inputs[1].spec if len(n.inputs) > 1 else None
    if idx is None or idx.dtype != dt.int32 or (idx.shape is not None and len(idx.shape) != 1):
        got = "nothing" if idx is None else _fmt_spec(idx)
        raise _types_error(n, f"the stack index must be an int32 vector, got {got}")


#: the ops a resource handle passes through unchanged (to the frame, branch or iteration that uses
#: it), and whether from every data input (a Merge) rather than input 0 (``graph.sources``)
HANDLE_CARRIERS = {"Enter": False, "Exit": False, "Identity": False, "Switch": False, "Merge": True,
                   "NextIteration": False}
#: the source each handle-reading op needs, and the kind of handle it makes
_HANDLE_SOURCE = {"StackNew": "a stack's", "VarHandle": "a Variable's"}
_HANDLE_READERS = {"StackPush": "StackNew", "StackPop": "StackNew", "ReadVariable": "VarHandle",
                   "AssignVariable": "VarHandle", "AssignAddVariable": "VarHandle", "AssignSubVariable": "VarHandle"}


def _check_handle_kind(n: Node) -> None:
    """A stack op's handle is a stack's and a Variable op's a Variable's: both are ``resource``
    tensors, which the dtypes cannot tell apart, so the handle is traced to what made it. A mix-up
    would otherwise fail at run time in the interpreters' stores, differently on each."""
    want = _HANDLE_READERS[n.op]
    for src in sources(n.inputs[0], HANDLE_CARRIERS):
        if src.op in _HANDLE_SOURCE and src.op != want:
            raise _types_error(n, f"its handle input {n.inputs[0].name} is {_HANDLE_SOURCE[src.op]} handle "
                                  f"(made by {describe_node(src)}), where it needs {_HANDLE_SOURCE[want]}")


def _check_stack_op(n: Node) -> None:
    _check_stack_index(n)
    _check_handle_kind(n)


#: extra type checks keyed by primitive, on top of re-running the shape rule.
_EXTRA_TYPE_CHECKS: dict[str, Callable[[Node], None]] = {
    "Merge": _check_merge_types,
    "StackPush": _check_stack_op,
    "StackPop": _check_stack_op,
    **{op: _check_handle_kind for op, src in _HANDLE_READERS.items() if src == "VarHandle"},
}


def _check_types(n: Node) -> None:
    """[W-Types]: re-infer the node's output specs on the final graph and compare with the recorded ones
    (``spec_mismatch``).

    Merge is the exception: a loop Merge's spec is its shape invariant, recorded at creation before
    its back edge existed, so it is checked against all of its inputs by ``_check_merge_types``.
    """
    from turnout.shape_rules import infer

    extra = _EXTRA_TYPE_CHECKS.get(n.op)
    if extra is not None:
        extra(n)
    if n.op == "Merge":
        return
    try:
        specs = infer(n.op, list(n.inputs), n.attrs)
    except Exception as e:  # any failure of the rule means it does not accept this node
        detail = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise _types_error(n, f"its inputs or attrs are not accepted by the {n.op} shape rule: {detail}") from e
    problem = spec_mismatch([t.spec for t in n.outputs], specs)
    if problem:
        raise _types_error(n, problem)


def spec_mismatch(recorded: list[TensorSpec], inferred: list[TensorSpec]) -> str | None:
    """Why a node's recorded output specs disagree with the ones its shape rule gives, or None.

    They agree when the dtypes (and TensorArray element dtypes) are equal and the shapes compatible.
    A recorded shape may be more precise or more general than the inferred one: a node created with
    explicit ``specs`` (a loop Merge's shape invariant, an op whose creator knew more) is well typed as
    long as some value fits both.
    """
    if len(recorded) != len(inferred):
        return f"the op produces {len(inferred)} outputs but the node records {len(recorded)}"
    for i, (got, want) in enumerate(zip(recorded, inferred, strict=True)):
        if (got.dtype, got.elem_dtype) != (want.dtype, want.elem_dtype) or not (
                sh.compatible(got.shape, want.shape) and sh.compatible(got.elem_shape, want.elem_shape)):
            return f"output {i} is recorded as {_fmt_spec(got)} but its inputs and attrs give {_fmt_spec(want)}"
    return None


# ---- fetches ---------------------------------------------------------------------------------------
def _check_fetch(graph: Graph, analysis: FrameAnalysis, f: Any) -> None:
    """[W-Fetch-Root]: a fetch has one value per run, so it must lie in the root frame of this graph."""
    if hasattr(f, "_as_tensor") and not isinstance(f, (Tensor, Node)):
        f = fetched_tensor(f)
    node = f.node if isinstance(f, Tensor) else f
    if not isinstance(node, Node):
        raise ValidationError(f"cannot fetch {f!r}: fetches are tensors or nodes", "W-Fetch-Root")
    what = f.name if isinstance(f, Tensor) else node.name
    if not _owns(graph, node):
        raise ValidationError(f"fetch {what} ({describe_node(node)}) belongs to another graph", "W-Fetch-Root", node)
    frame = analysis.node_frame[node.id]
    if frame:
        where = "/".join(frame)
        raise ValidationError(
            f"fetch {what} ({describe_node(node)}) lies inside loop frame {where!r}, where it has one value per "
            "iteration; return it from the loop (an Exit) and fetch that instead", "W-Fetch-Root", node,
        )
