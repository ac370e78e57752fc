"""Variables: mutable state that persists across ``Session.run`` calls.

As in the paper, a Variable is a handle (``VarHandle``); reads and assigns are ops whose effects are
ordered only by data and control edges, never by program order. Each use of a Variable as a tensor is
a fresh ``ReadVariable`` op, so write ``with tn.control_dependencies([v.assign(...)])`` to read after a
write. Fetching a Variable (``sess.run(v)``) reads it through one node made on the first fetch.
"""

from __future__ import annotations

from typing import Any, Optional

from turnout.arguments import checked
from turnout.errors import GraphBuildError
from turnout.graph import Graph, Node, Tensor, get_default_graph, same_graph_object


class Variable:
    """A mutable tensor. ``initial_value`` is a constant (Python or numpy value)."""

    @checked
    def __init__(self, initial_value: Any, dtype: Any = None, name: Optional[str] = None,
                 trainable: bool = True) -> None:
        if isinstance(initial_value, Tensor):
            raise GraphBuildError(
                "Variable: the initial value must be a constant (numpy or Python value), not a tensor"
            )
        from turnout.ops import checked_constant_value

        d, value = checked_constant_value(initial_value, dtype, "Variable")
        g = get_default_graph()
        self._graph: Graph = g
        base = name or "Variable"
        vname = base
        k = 0
        while vname in g.variables:
            k += 1
            vname = f"{base}_{k}"
        # The handle leaves any cond/loop context and control dependencies, but keeps the device scope:
        # a Variable lives on the device it was created under (its ops are colocated with it).
        with g._in_context(None), g.control_dependencies(None), g.device(g._devices[-1] if g._devices else None):
            self.handle_node: Node = g.create_node(
                "VarHandle", (), {"var_name": vname, "dtype": d.name, "shape": list(value.shape),
                                  "initial_value": value}, name=vname,
            )
        self.name = vname
        self.dtype = d
        self.shape = tuple(value.shape)
        self.trainable = trainable
        self._fetched: Optional[Tensor] = None  # the one read ``Session.run`` fetches (``_fetch_tensor``)
        g.variables[vname] = self.handle_node
        g.variable_objects.append(self)

    @property
    def handle(self) -> Tensor:
        """The output of the Variable's ``VarHandle`` node, which its reads and assigns take."""
        return self.handle_node.outputs[0]

    def _attrs(self) -> dict[str, Any]:
        return {"dtype": self.dtype.name, "shape": list(self.shape), "var_name": self.name}

    def read(self, name: Optional[str] = None) -> Tensor:
        """The Variable's value: a new ``ReadVariable`` on every call (order it after an assign with a control
        dependency)."""
        return self._graph.create_node("ReadVariable", [self.handle], self._attrs(),
                                       name=name or f"{self.name}/read").outputs[0]

    value = read

    def _as_tensor(self) -> Tensor:
        return self.read()

    def _fetch_tensor(self) -> Tensor:
        """The tensor ``Session.run`` fetches for this Variable: one ``ReadVariable`` made on the first
        fetch, outside any cond, loop or control dependency, and reused by every later fetch.

        Why not a fresh read per fetch, as for other uses: a fresh read is a new tensor, so the fast
        backend compiled a new plan for every fetch (``sess.run(w)`` between training steps: 18 ms a
        step instead of 32 µs), the new node changed the graph's version, which sent the session's
        other repeated runs off their lanes, and the graph grew by a node per fetch."""
        if self._fetched is None:
            g = self._graph
            with g._in_context(None), g.control_dependencies(None), g.device(self.handle_node.device):
                self._fetched = self.read(name=f"{self.name}/fetch")
        return self._fetched

    def _assign(self, op: str, v: Any, name: Optional[str]) -> Tensor:
        from turnout.ops import convert_to_tensor

        t = convert_to_tensor(v, dtype=self.dtype) if not isinstance(v, Tensor) else v
        return self._graph.create_node(op, [self.handle, t], self._attrs(), name=name or f"{self.name}/{op}").outputs[0]

    def assign(self, v: Any, name: Optional[str] = None) -> Tensor:
        """Write ``v``; the result is the new value (use it, or a control dependency on it, to order)."""
        return self._assign("AssignVariable", v, name)

    def assign_add(self, v: Any, name: Optional[str] = None) -> Tensor:
        """Add ``v``; the result is the new value (as ``assign``)."""
        return self._assign("AssignAddVariable", v, name)

    def assign_sub(self, v: Any, name: Optional[str] = None) -> Tensor:
        """Subtract ``v``; the result is the new value (as ``assign``)."""
        return self._assign("AssignSubVariable", v, name)

    def __repr__(self) -> str:
        return f"<tn.Variable {self.name!r} {self.dtype.name}{list(self.shape)}>"

    def __eq__(self, other: object) -> bool:
        """Identity; comparing with a value is an error naming ``tn.equal`` (see ``Tensor.__eq__``)."""
        return same_graph_object(self, self.name, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__


def _install_operators() -> None:
    for k in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__matmul__", "__rmatmul__", "__lt__", "__le__", "__gt__", "__ge__",
              "__neg__", "__pow__", "__getitem__", "__mod__"):
        def f(self: Variable, *args: Any, _k: str = k) -> Any:
            return getattr(self.read(), _k)(*args)

        setattr(Variable, k, f)


_install_operators()


@checked
def trainable_variables(graph: Optional[Graph] = None) -> list[Variable]:
    """The Variables of ``graph`` (default graph if None) created with ``trainable=True``: what
    optimizers update by default."""
    g = graph or get_default_graph()
    return [v for v in g.variable_objects if v.trainable]


@checked
def global_variables(graph: Optional[Graph] = None) -> list[Variable]:
    """Every Variable of ``graph`` (default graph if None), in creation order."""
    g = graph or get_default_graph()
    return list(g.variable_objects)
