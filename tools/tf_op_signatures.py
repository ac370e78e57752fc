"""Read the input signatures of GraphDef ops from TensorFlow's op registry (run where TensorFlow is
installed).

    python tools/tf_op_signatures.py [--tables] < op_names.txt

For each op named on standard input (one per line) it writes, as JSON, the number of data inputs of
an op of fixed arity (``null`` for one of variable arity) and, per type attr (``T``, ``Tidx``,
``Tshape``, ...), the positions of the inputs it types. With ``--tables`` it writes instead the
tables ``turnout.graphdef.arity`` keeps, as that module writes them.

Why: the GraphDef import refuses a node with another number of data inputs than its op takes, and
one whose typed inputs are not of the dtype their type attr declares (``turnout.graphdef.arity``).
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
    """``{"inputs": count or None, "typed": {type attr: [positions it types]}}`` of ``op`` in
    TensorFlow's registry."""
    from tensorflow.python.framework import op_def_registry

    d: Any = op_def_registry.get(op)
    if d is None:
        raise SystemExit(f"{op}: not in this TensorFlow's op registry")
    variadic = any(a.number_attr or a.type_list_attr for a in d.input_arg)
    count: Optional[int] = None if variadic else len(d.input_arg)
    typed: dict[str, list[int]] = {}
    for i, a in enumerate(d.input_arg):
        if a.type_attr:
            typed.setdefault(a.type_attr, []).append(i)
    return {"inputs": count, "typed": typed}


def tables(sigs: dict[str, dict[str, Any]]) -> str:
    """The ops of fixed arity by count, those whose every input ``T`` types, and the others' typed
    inputs by attr, as ``turnout.graphdef.arity`` writes them."""
    by_count: dict[int, list[str]] = {}
    every: list[str] = []
    some: dict[str, dict[str, tuple[int, ...]]] = {}
    for op, s in sorted(sigs.items()):
        n, typed = s["inputs"], {k: tuple(v) for k, v in sorted(s["typed"].items())}
        if n is None:
            continue
        by_count.setdefault(n, []).append(op)
        if n and typed == {"T": tuple(range(n))}:
            every.append(op)
        elif typed:
            some[op] = typed
    lines = ["_BY_COUNT = {"] + [f"    {n}: {_words(ops)}," for n, ops in sorted(by_count.items())] + ["}"]
    lines += [f"_EVERY_INPUT_T = {_words(every)}", "_TYPED_BY: dict[str, dict[str, tuple[int, ...]]] = {"]
    lines += [f'    "{op}": {_typed(typed)},' for op, typed in some.items()] + ["}"]
    return "\n".join(lines)


def _typed(typed: dict[str, tuple[int, ...]]) -> str:
    """An op's typed inputs as a dict literal of double-quoted attr names."""
    return "{" + ", ".join(f'"{k}": {v}' for k, v in typed.items()) + "}"


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
