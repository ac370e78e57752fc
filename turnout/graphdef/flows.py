"""Which TensorFlow tensors are TensorArray flows, and of which TensorArray (a pass before import).

Why: a TensorFlow v1 TensorArray is a mutable resource (``handle``) plus a float scalar ``flow`` that
only orders its reads and writes. Turnout's TensorArray is an immutable value, so the importer
carries the *value* where TensorFlow carries the flow: a write returns a new value on the flow edge.
That needs to know, before any node is built, which float scalars are flows — including the zeros
that ``tf.gradients`` starts a gradient flow with, and the accumulators it adds around them — and
which TensorArray each belongs to: the forward array ``("fwd", X)`` or its gradient ``("grad", X)``
(``TensorArrayGradV3`` looks the gradient array up by the forward handle). Flow-ness spreads through
the ops that pass a value along unchanged (the control-flow primitives, Identity) and through the
sums that aggregate gradients; a union-find over tensor names gives each class one label.
"""

from __future__ import annotations

from typing import Any

from turnout.errors import UnsupportedError

# ops whose data inputs and first output carry the same flow (for Switch, both outputs)
PASS_THROUGH = {
    "Enter", "RefEnter", "Exit", "RefExit", "Identity", "RefIdentity", "NextIteration", "RefNextIteration",
    "Merge", "RefMerge", "Switch", "RefSwitch", "StopGradient", "Snapshot",
}
SUMS = {"Add", "AddV2", "AddN"}
LIKE = {"ZerosLike", "OnesLike"}
Label = tuple[str, str]


def tensor_name(inp: str) -> str:
    """'a' -> 'a:0'; control inputs ('^a') are not tensors."""
    return inp if ":" in inp else f"{inp}:0"


def gradient_flow_start(nodes: dict[str, Any], nd: Any) -> str | None:
    """``TensorArray.grad`` returns ``identity(flow)`` under a control edge from TensorArrayGradV3
    (named ``gradient_flow``): TensorFlow's flow value continues, but the array it orders is the
    gradient array. Returns that TensorArrayGradV3's handle tensor, or None for other nodes."""
    if nd.op != "Identity":
        return None
    for c in nd.input:
        if c.startswith("^") and nodes.get(c[1:]) is not None and nodes[c[1:]].op == "TensorArrayGradV3":
            return f"{c[1:]}:0"
    return None


def _stack_source(nodes: dict[str, Any], tname: str) -> str:
    """The StackV2 node a push or pop reaches through the Enters (and Identities) before it."""
    n = tname.split(":")[0]
    while n in nodes and nodes[n].op != "StackV2":
        ins = [i for i in nodes[n].input if not i.startswith("^")]
        if not ins:
            break
        n = ins[0].split(":")[0]
    return n


class FlowAnalysis:
    """Union-find over tensor names; ``label(name)`` is ``("fwd"|"grad", TensorArrayV3 node)`` or None."""

    def __init__(self, nodes: dict[str, Any]) -> None:
        self.parent: dict[str, str] = {}
        self.labels: dict[str, Label] = {}
        self.nodes = nodes
        data = {n: [tensor_name(i) for i in nd.input if not i.startswith("^")] for n, nd in nodes.items()}
        for n, nd in nodes.items():
            ins = data[n]
            if nd.op == "TensorArrayV3":
                self._label(f"{n}:0", ("fwd", n))
                self._union(f"{n}:0", f"{n}:1")
            elif nd.op in ("TensorArrayWriteV3", "TensorArrayScatterV3", "TensorArraySplitV3"):
                self._union(f"{n}:0", ins[3])
                self._union(f"{n}:0", ins[0])
            elif nd.op in ("TensorArrayReadV3", "TensorArrayGatherV3", "TensorArrayConcatV3", "TensorArraySizeV3"):
                self._union(ins[-1], ins[0])
        # A TensorArray made inside a loop body has its handle saved for the gradient loop on a stack
        # (tf.gradients' accumulator): what a pop of that stack gives is the pushed array.
        pushes: dict[str, list[str]] = {}
        pops: dict[str, list[str]] = {}
        for n, nd in nodes.items():
            if nd.op in ("StackPushV2", "StackPopV2") and data[n]:
                src = _stack_source(nodes, data[n][0])
                if nd.op == "StackPushV2" and len(data[n]) > 1:
                    pushes.setdefault(src, []).append(data[n][1])
                elif nd.op == "StackPopV2":
                    pops.setdefault(src, []).append(f"{n}:0")
        # Pass-throughs and sums only spread flow-ness: run them after every seed is in place, and
        # only join classes of which one is a flow (a plain float Add must stay a plain float).
        changed = True
        while changed:
            changed = False
            for n, nd in nodes.items():
                ins = data[n]
                start = gradient_flow_start(nodes, nd)
                if start is not None:
                    if self.label(start) is not None:
                        changed |= self._union(f"{n}:0", start)
                    continue
                if nd.op in PASS_THROUGH:
                    group = [f"{n}:0", *(ins[:1] if nd.op not in ("Merge", "RefMerge") else ins)]
                    if nd.op in ("Switch", "RefSwitch"):
                        group.append(f"{n}:1")
                elif nd.op in SUMS or nd.op in LIKE:
                    group = [f"{n}:0", *ins]
                else:
                    continue
                if any(self._is_flow(t) for t in group):
                    for t in group[1:]:
                        changed |= self._union(group[0], t)
            for src, pushed in pushes.items():
                for t in pushed:
                    if self._is_flow(t):
                        for p in pops.get(src, []):
                            changed |= self._union(t, p)
            for n, nd in nodes.items():
                if nd.op == "TensorArrayGradV3":
                    fwd = self.label(data[n][0])
                    if fwd is None:  # (not yet: a handle popped from a stack is labelled on a later pass)
                        continue
                    for t in (f"{n}:0", f"{n}:1"):
                        if self.label(t) is None:
                            self._label(t, ("grad", fwd[1]))
                            changed = True
                        self._union(f"{n}:0", t)
        for n, nd in nodes.items():
            if nd.op == "TensorArrayGradV3" and self.label(data[n][0]) is None:
                raise UnsupportedError(f'TensorArrayGradV3 node "{n}": its handle is no TensorArrayV3')

    def _find(self, x: str) -> str:
        p = self.parent.setdefault(x, x)
        if p != x:
            p = self.parent[x] = self._find(p)
        return p

    def _label(self, x: str, lab: Label) -> None:
        self.labels[self._find(x)] = lab

    def _is_flow(self, x: str) -> bool:
        return self._find(x) in self.labels

    def _union(self, a: str, b: str) -> bool:
        ra, rb = self._find(a), self._find(b)
        if ra == rb:
            return False
        la, lb = self.labels.get(ra), self.labels.get(rb)
        if la and lb and la != lb:
            raise UnsupportedError(f"TensorArray flows {a} ({la[0]} {la[1]}) and {b} ({lb[0]} {lb[1]}) meet; "
                                   "the importer needs each flow to belong to one TensorArray")
        self.parent[rb] = ra
        if lb and not la:
            self.labels[ra] = lb
        return True

    def label(self, tensor: str) -> Label | None:
        """The TensorArray the flow ``tensor`` belongs to, None when it is no TensorArray flow."""
        return self.labels.get(self._find(tensor_name(tensor)))
