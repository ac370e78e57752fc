"""The text of a failed ``Assert``: its message and the values it shows, as TensorFlow prints them.

Why TensorFlow's format: a TF1 graph's ``Assert`` shows its data (strings and tensors) when it fails,
and a model moved to Turnout should fail with the message its authors know, word for word. Every
backend makes the text with these functions (the interpreters' kernel, the compiled backends when a
compiled check fails), so it is the same everywhere.

TensorFlow's rules, as its ``Assert`` kernel applies them: each datum in square brackets, separated
by spaces; a tensor shows at most ``summarize`` elements (all of them when negative), in row-major
order, each dimension in brackets with no separator between rows, ``...`` where elements were left
out; a float shows the fewest of 6 and 9 significant digits (15 and 17 for a double) that read back
to the same value, as C's ``%g`` writes them; a bool shows ``1`` or ``0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

#: what TensorFlow's Assert kernel writes before the data it shows: an imported Assert's message,
#: which export leaves out of TensorFlow's data (TensorFlow writes it again)
TF_ASSERT_PREFIX = "assertion failed:"


def element_text(x: Any) -> str:
    """One element as TensorFlow prints it (``%g`` with the digits that read back the same value)."""
    if isinstance(x, (bool, np.bool_)):
        return "1" if x else "0"
    if isinstance(x, np.floating):
        short, long = (6, 9) if x.dtype.itemsize <= 4 else (15, 17)
        text = format(float(x), f".{short}g")
        if not np.isnan(x) and type(x)(float(text)) != x:
            text = format(float(x), f".{long}g")
        return text
    return str(x)


def summarize_value(value: Any, limit: int = 3) -> str:
    """``value`` (an array or scalar) with at most ``limit`` elements shown (all when negative)."""
    a = np.asarray(value)
    flat = a.reshape(-1)
    n = flat.size if limit < 0 else min(limit, flat.size)
    if a.ndim == 0:
        return element_text(flat[0]) if n else ""
    out: list[str] = []
    at = [0]  # elements shown so far

    def dim(d: int) -> None:
        if at[0] >= n:
            return
        if d == a.ndim - 1:
            for i in range(a.shape[d]):
                if at[0] >= n:
                    if d != 0:
                        out.append("...")
                    return
                out.append((" " if i else "") + element_text(flat[at[0]]))
                at[0] += 1
            return
        for _ in range(a.shape[d]):
            opened = at[0] < n
            if opened:
                out.append("[")
            dim(d + 1)
            if at[0] < n or opened:
                out.append("]")

    dim(0)
    return "".join(out) + ("..." if n < flat.size else "")


def assert_message(message: str, shown: Optional[Sequence[Optional[str]]], data: Sequence[Any],
                   limit: int = 3) -> str:
    """``message`` followed by what the ``Assert`` shows: each entry of ``shown`` in brackets, a string
    as it is and ``None`` as the next of ``data`` summarized (``summarize_value``); with ``shown``
    None, every datum in order."""
    parts = list(shown) if shown is not None else [None] * len(data)
    values = iter(data)
    words = [f"[{p if p is not None else summarize_value(next(values), limit)}]" for p in parts]
    return " ".join([message, *words]) if words else message


__all__ = ["TF_ASSERT_PREFIX", "assert_message", "element_text", "summarize_value"]
