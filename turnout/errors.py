"""Every error Turnout raises, in one module.

Why: users (and the tests of every backend) must be able to catch the same error type for the same
mistake whichever executor ran the program, and every message names the op, its frame and, where
known, the user's source line that created it.
"""

from __future__ import annotations

from typing import Any, Optional


class TurnoutError(Exception):
    """Base class of all Turnout errors."""


def describe_node(node: Any) -> str:
    """'op Add "add_3" (created at model.py:12)': the standard way an error names a node."""
    if node is None:
        return "<no node>"
    where = f" (created at {node.source})" if getattr(node, "source", None) else ""
    return f'{node.op} node "{node.name}"{where}'


def dead_fetch_message(name: str, node: Any, note: str = "") -> str:
    """A fetched tensor that is dead: the one message every backend gives (``note`` adds what the
    backend knows besides, such as the nodes a stalled run left waiting), so that a user who catches
    ``DeadFetchError`` reads the same words whichever executor ran the graph."""
    return (f"fetched tensor {name} is dead: {describe_node(node)} lies on a branch that was not taken in "
            f"this run{note}")


def prevent_gradient_message(node: Any) -> str:
    """A gradient through a ``PreventGradient``: the one message ``tn.gradients`` and a JAX derivative
    of the compiled graph give, naming the op and quoting the reason its author wrote."""
    reason = node.attrs.get("message") or "(no reason given)"
    return f"{describe_node(node)}: its gradient is explicitly disabled: {reason}"


def merge_conflict_message(node: Any, tag: str) -> str:
    """[E-Merge-Conflict]: the one message every interpreter gives, whichever input came first, so
    that the outcome of a conflicting run does not depend on the schedule."""
    return (f"[E-Merge-Conflict] {describe_node(node)} received two live data inputs at tag {tag}; a Merge "
            "takes at most one live input per tag ([W-Merge-Unique]), otherwise its value would depend on "
            "the schedule. Route the values through Switches on one predicate (tn.cond does)")


class GraphBuildError(TurnoutError, ValueError):
    """A builder or op constructor was called with arguments it cannot accept."""


class ShapeError(GraphBuildError):
    """Static shapes are incompatible (build-time shape inference)."""


class DTypeError(GraphBuildError, TypeError):
    """Static dtypes are incompatible."""


class ValidationError(TurnoutError):
    """A graph is ill-formed and is rejected before it runs. ``rule`` names the well-formedness rule."""

    def __init__(self, message: str, rule: str = "", node: Any = None) -> None:
        self.rule = rule
        self.node = node
        prefix = f"[{rule}] " if rule else ""
        super().__init__(prefix + message)


class ExecutionError(TurnoutError, RuntimeError):
    """An error while running a graph."""


class DeadFetchError(ExecutionError):
    """A fetched tensor was dead (it lies on an untaken branch)."""


class DeadlockError(ExecutionError):
    """No node can fire, yet some fetches were never produced. The message lists the blocked nodes."""


class NonTerminationError(ExecutionError):
    """The configured limit on firings or iterations was exceeded (a loop that does not end?)."""


#: how every interpreter's ``max_iterations`` error ends (the reference interpreter's and the
#: small-step system's), so that a runaway loop reads the same whichever stopped it
MAX_ITERATIONS_HINT = ("does the loop terminate? If it really needs more iterations, raise the limit with "
                       "sess.run(..., max_iterations=N) (RunOptions.max_iterations; None: no limit)")


def runaway_message(loop: str, limit: Optional[int] = None) -> str:
    """A loop stopped by ``RunOptions.max_iterations``: ``loop`` names it (its frame and the Enter
    with the user's source line), ``limit`` is the bound when the code that stopped it knows the
    number (compiled code tests it as a run-time argument, and its message is made when tracing)."""
    over = (f"would run body {limit + 1}, over the limit max_iterations={limit}" if limit is not None
            else "would run more bodies than max_iterations allows")
    return f"{loop} {over}; {MAX_ITERATIONS_HINT}"


class MergeConflictError(ExecutionError):
    """[E-Merge-Conflict]: a Merge received two live data inputs at one tag (a hand-built graph that
    breaks [W-Merge-Unique]); its value would depend on the schedule, so the run stops."""


class KernelError(ExecutionError):
    """An op's kernel failed on the values it received (bad feed, out-of-range index, ...)."""


class ResourceExhaustedError(ExecutionError):
    """A run would exceed a resource limit (a tensor over ``max_tensor_bytes``), checked before
    allocating; the message names the op and the run option that raises the limit."""


class FeedError(ExecutionError, ValueError):
    """A fed value does not match the tensor it feeds (dtype, shape, or an unknown key), or a value set
    on a Variable from outside does not fit it (``turnout.store``)."""


class ArgumentError(GraphBuildError, TypeError):
    """A public function, a ``Session`` or its options were given an argument of the wrong kind or
    value (the message names the function and the parameter). Why a ``GraphBuildError``: a builder
    given an argument it cannot take is the same mistake whether the builder or the annotation check
    (``turnout.arguments``) finds it first; and a ``TypeError`` and a ``ValueError`` (through
    ``GraphBuildError``), so callers that caught the built-in error a wrong argument used to raise
    still catch it."""


class NotFoundError(TurnoutError, KeyError):
    """A name looked up in a graph, an imported GraphDef or a cluster's store names nothing there."""

    def __str__(self) -> str:  # a KeyError's str is the repr of its argument; this one is a sentence
        return str(self.args[0]) if self.args else ""


class SerializationError(TurnoutError, ValueError):
    """A serialized graph is malformed, of an unknown version, or fails schema validation."""


class GradientError(TurnoutError):
    """A gradient was requested that Turnout cannot build (the message says why and what to do)."""


class UnsupportedError(TurnoutError):
    """A backend does not support a feature of the program; the message names the op and the backend."""


class PlacementError(GraphBuildError):
    """Nodes cannot be placed as asked: an unknown device, a conflicting colocation, or a device scope an
    op cannot honour (the message names the nodes and devices)."""


class PartitionError(GraphBuildError):
    """A placed graph cannot be cut into per-device partitions (the message names the node or frame)."""


class ClusterSpecError(TurnoutError, ValueError):
    """A cluster description is malformed (rejected before any process starts); the message names the
    job, task and field."""


class TaskFailedError(ExecutionError):
    """A task (one process of a cluster) died or was lost during a run; the message names the task."""


class RecvTimeoutError(ExecutionError):
    """A Recv waited longer than the run's timeout for its message; the message names the rendezvous key
    and the task that should have sent it."""
