"""Sphinx configuration of the Turnout docs. Build: ``python3 -m sphinx -W -b html docs docs/_build/html``."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))  # the rule-table directive (renders specs/rules.toml)

project = "Turnout"
author = "The Turnout authors"
copyright = "2026, The Turnout authors"  # noqa: A001
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
    "ruletable",
]

# Optional dependencies are mocked so the docs build with numpy alone.
autodoc_mock_imports = ["jax", "jaxlib", "z3"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpicky = False

exclude_patterns = ["_build"]
templates_path: list[str] = []
html_theme = "alabaster"
html_static_path: list[str] = []
