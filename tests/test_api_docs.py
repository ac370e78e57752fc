"""Every public name of ``turnout`` has a docstring and an entry in the API reference (docs/api.rst).

A name counts as documented when api.rst has an ``automodule`` of the module that defines it whose
``:members:`` option lists it (or lists everything), or a ``py:data`` / ``auto*`` directive naming it.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import turnout as tn

API = Path(__file__).resolve().parent.parent / "docs" / "api.rst"
#: names ``tn`` loads on first use (``turnout.__getattr__``), which ``dir(tn)`` does not show
LAZY = ["Session", "FastOptions", "train", "pretty", "to_dot", "save", "load", "dumps", "loads", "static_frames",
        "import_graph_def", "export_graph_def", "checkpoint"]
#: submodules that are part of the API (the rest are reachable as attributes only because Python
#: binds imported submodules on their package)
PUBLIC_MODULES = {"raw", "train", "checkpoint", "nn", "random"}


def _automodules(text: str) -> dict[str, set[str] | None]:
    """module -> the members listed (None: all members) for every ``automodule`` with ``:members:``."""
    out: dict[str, set[str] | None] = {}
    for mod, opts in re.findall(r"^\.\. automodule:: (\S+)\n((?:   :[\w-]+:.*\n)*)", text, re.M):
        m = re.search(r":members:(.*)", opts)
        if m:
            listed = {x.strip() for x in m.group(1).split(",") if x.strip()}
            out[mod] = listed or None
    return out


def public_names() -> list[str]:
    names = {n for n in dir(tn) if not n.startswith("_")} | set(LAZY)
    return sorted(n for n in names if not inspect.ismodule(getattr(tn, n)) or n in PUBLIC_MODULES)


def _documented(name: str, obj: Any, text: str, mods: dict[str, set[str] | None]) -> bool:
    if re.search(rf"^\.\. (py:data|autodata|autofunction|autoclass):: turnout\.{re.escape(name)}$", text, re.M):
        return True
    if inspect.ismodule(obj):
        return obj.__name__ in mods
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if mod not in mods or qual is None:
        return False
    listed = mods[mod]
    return listed is None or qual in listed


def test_every_public_name_has_a_docstring_and_an_api_entry() -> None:
    text = API.read_text(encoding="utf-8")
    mods = _automodules(text)
    missing, undocumented = [], []
    for name in public_names():
        obj = getattr(tn, name)
        if not _documented(name, obj, text, mods):
            missing.append(name)
        if callable(obj) or inspect.ismodule(obj):
            if not (inspect.getdoc(obj) or "").strip():
                undocumented.append(name)
    assert not missing, f"public names without an entry in docs/api.rst: {missing}"
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_the_check_notices_a_missing_entry() -> None:
    text = API.read_text(encoding="utf-8").replace(".. automodule:: turnout.ops\n   :members:\n", "")
    assert not _documented("add", tn.add, text, _automodules(text))
    assert _documented("add", tn.add, API.read_text(encoding="utf-8"), _automodules(API.read_text(encoding="utf-8")))
