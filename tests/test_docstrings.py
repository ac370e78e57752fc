"""Every public function, method and class of the package's source folders has a docstring.

The check reads the source with ``ast`` (nothing is imported, so the JAX, z3 and Ray modules count too)
and walks the five folders that make up the package: ``turnout/`` and the ``reference/``, ``semantics/``,
``fast/`` and ``devices/`` folders installed as ``turnout.reference`` and so on. A name is public unless it
starts with ``_``; the methods of a ``_private`` class, ``@overload`` stubs, property setters and functions
nested inside functions are not public either.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ["turnout", "reference", "semantics", "fast", "devices"]

Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _decorator_names(node: Def) -> list[str]:
    """The dotted names of ``node``'s decorators, calls included (``@x.setter`` -> ``x.setter``)."""
    out = []
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        out.append(ast.unparse(target))
    return out


def _exempt(node: Def) -> bool:
    """True for an ``@overload`` stub or a property setter / deleter: they share the documented name."""
    decs = _decorator_names(node)
    return any(d in ("overload", "typing.overload") or d.endswith((".setter", ".deleter")) for d in decs)


def _undocumented(body: list[ast.stmt], prefix: str) -> list[tuple[int, str]]:
    """``(line, qualified name)`` of every public definition in ``body`` (a module's or a public class's)
    that has no docstring; classes are entered, functions are not (what they nest is not public)."""
    out: list[tuple[int, str]] = []
    for node in body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if node.name.startswith("_") or _exempt(node):
            continue
        name = prefix + node.name
        if not (ast.get_docstring(node) or "").strip():
            out.append((node.lineno, ("class " if isinstance(node, ast.ClassDef) else "") + name))
        if isinstance(node, ast.ClassDef):
            out.extend(_undocumented(node.body, name + "."))
    return out


def missing_docstrings(root: Path = ROOT) -> list[str]:
    """``path:line name`` of every public function, method or class under ``FOLDERS`` without a docstring."""
    out = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            rel = path.relative_to(root).as_posix()
            out.extend(f"{rel}:{line} {name}" for line, name in _undocumented(tree.body, ""))
    return out


def test_every_public_function_method_and_class_has_a_docstring() -> None:
    """The project's standard is that every public function has a docstring saying why it exists, not only
    what it does, and the API reference (docs/api.rst, built by Sphinx autodoc) shows these docstrings: a
    public name without one is a blank entry there and leaves its reader to guess from the code."""
    missing = missing_docstrings()
    assert not missing, "public functions, methods and classes without a docstring:\n" + "\n".join(missing)


def test_the_scan_sees_methods_and_skips_what_is_not_public(tmp_path: Path) -> None:
    """The scan itself: a bare public method is reported; private names, nested functions, methods of
    private classes, overload stubs and property setters are not."""
    (tmp_path / "turnout").mkdir()
    (tmp_path / "turnout" / "m.py").write_text(
        '"""A module."""\n'
        "from typing import overload\n"
        "class A:\n"
        '    """A class."""\n'
        "    def bare(self): pass\n"
        "    @property\n"
        "    def p(self):\n"
        '        """A property."""\n'
        "    @p.setter\n"
        "    def p(self, v): pass\n"
        "    def _hidden(self): pass\n"
        "class _Private:\n"
        "    def method(self): pass\n"
        "@overload\n"
        "def f(x: int) -> int: ...\n"
        "def f(x):\n"
        '    """Documented."""\n'
        "    def inner(): pass\n"
        "def g(): pass\n"
        "class B: pass\n",
        encoding="utf-8",
    )
    for folder in FOLDERS[1:]:
        (tmp_path / folder).mkdir()
    assert missing_docstrings(tmp_path) == ["turnout/m.py:5 A.bare", "turnout/m.py:19 g", "turnout/m.py:20 class B"]
