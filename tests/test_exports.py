"""Every module's ``__all__`` names what the module defines: an export list that names something gone
(a renamed function, a typo) breaks ``from module import *`` and misleads a reader."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import turnout

#: the top-level packages of the project's extras (``pyproject.toml``): a module that needs one cannot
#: be imported without it
_EXTRAS = frozenset({"jax", "ray", "z3", "tensorboard", "matplotlib"})

#: packages that live outside ``turnout/`` in the source tree (mapped into it when installed), which a
#: walk of ``turnout.__path__`` does not find
_MAPPED = ("turnout.fast", "turnout.devices", "turnout.reference", "turnout.semantics")


def _modules() -> list[str]:
    names = {m.name for m in pkgutil.walk_packages(turnout.__path__, "turnout.")}
    for pkg in _MAPPED:
        names.add(pkg)
        names |= {m.name for m in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + ".")}
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_every_exported_name_exists(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        if (e.name or "").split(".")[0] not in _EXTRAS:
            raise  # a broken import, not a missing extra
        pytest.skip(f"{name} needs an extra that is not installed: {e}")  # (the test extra installs them all)
    if "__all__" not in vars(module):
        return
    exported = module.__all__
    assert isinstance(exported, (list, tuple)) and all(isinstance(n, str) for n in exported), (
        f"{name}.__all__ must be a list of names, got {exported!r}")
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
