"""Read the input signatures of GraphDef ops from TensorFlow's op registry (run where TensorFlow is
installed).

    python tools/tf_op_signatures.py [--tables] < op_names.txt

For each op named on standard input (one per line) it writes, as JSON, the number of data inputs of
an op of fixed arity (``null`` for one of variable arity) and the positions of the inputs its ``T``
attr types. With ``--tables`` it writes instead the tables ``turnout.graphdef.arity`` keeps, as that
module writes them.

Why: the GraphDef import refuses a node with another number of data inputs than its op takes, and
one whose ``T``-typed inputs are not of the dtype its ``T`` declares (``turnout.graphdef.arity``).
Those tables are data in the package, so that Turnout never imports TensorFlow; this script is how
they are made and kept equal to TensorFlow's registry for every op in
``turnout.graphdef.SUPPORTED_OPS``: tests/test_bad_inputs3.py runs it where ``TURNOUT_TF_PYTHON``
names a Python with TensorFlow, and compares. This script imports TensorFlow and nothing of Turnout.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any, Optional


def signature(op: str) -> dict[str, Any]:
    """``{"inputs": count or None, "t": [positions typed by T]}`` of ``op`` in TensorFlow's registry."""
    from tensorflow.python.framework import op_def_registry

    d: Any = op_def_registry.get(op)
    if d is None:
        raise SystemExit(f"{op}: not in this TensorFlow's op registry")
    variadic = any(a.number_attr or a.type_list_attr for a in d.input_arg)
    count: Optional[int] = None if variadic else len(d.input_arg)
    return {"inputs": count, "t": [i for i, a in enumerate(d.input_arg) if a.type_attr == "T"]}


def tables(sigs: dict[str, dict[str, Any]]) -> str:
    """The ops of fixed arity by count, those whose every input ``T`` types, and the others' typed
    positions, as ``turnout.graphdef.arity`` writes them."""
    by_count: dict[int, list[str]] = {}
    every: list[str] = []
    some: dict[str, tuple[int, ...]] = {}
    for op, s in sorted(sigs.items()):
        n, t = s["inputs"], tuple(s["t"])
        if n is None:
            continue
        by_count.setdefault(n, []).append(op)
        if t and len(t) == n:
            every.append(op)
        elif t:
            some[op] = t
    lines = ["_BY_COUNT = {"] + [f"    {n}: {_words(ops)}," for n, ops in sorted(by_count.items())] + ["}"]
    lines += [f"_EVERY_INPUT_T = {_words(every)}", "_SOME_INPUTS_T = {"]
    lines += [f'    "{op}": {t},' for op, t in some.items()] + ["}"]
    return "\n".join(lines)


def _words(ops: list[str]) -> str:
    """``ops`` as one triple-quoted string of names, its lines at most 100 characters."""
    return '"""' + "\n".join(textwrap.wrap(" ".join(ops), 100)) + '"""'


def main() -> int:
    ops = [line.strip() for line in sys.stdin if line.strip()]
    sigs = {op: signature(op) for op in ops}
    print(tables(sigs) if "--tables" in sys.argv[1:] else json.dumps(sigs, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
