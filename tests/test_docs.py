"""The docs: they build with warnings as errors, their code runs and prints what they show, and the
"not built yet" page names only modules that really are missing.

The build is part of the default suite because CI must fail on a broken docs page exactly as it fails
on a broken test. The code blocks of the tutorial pages are executed, in order, in one namespace per
page; a ``text`` block named ``<block>-output`` holds what the python block ``<block>`` prints.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
EXECUTED_PAGES = ["getting_started.rst", "paper_examples.rst", "devices.rst"]

#: a named code block: ``.. code-block:: LANG`` / ``:name: NAME`` / blank line / indented body
BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n   :name: (\S+)\n\n((?:   .*\n|[ \t]*\n)+)", re.M)


def named_blocks(page: str) -> list[tuple[str, str, str]]:
    """(language, name, dedented body) of every named code block, in page order."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [(lang, name, textwrap.dedent(body).strip("\n")) for lang, name, body in BLOCK.findall(text)]


def test_docs_build_with_warnings_as_errors(tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="sphinx is a declared test dependency (pip install -e '.[dev]')")
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"),
         str(DOCS), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, f"sphinx failed:\n{out.stdout}\n{out.stderr}"
    assert (tmp_path / "html" / "index.html").exists()
    assert (tmp_path / "html" / "semantics.html").exists()


@pytest.mark.parametrize("page", EXECUTED_PAGES)
def test_doc_code_runs_and_prints_what_the_page_shows(page: str) -> None:
    blocks = named_blocks(page)
    code = [(name, body) for lang, name, body in blocks if lang == "python"]
    shown = {name.removesuffix("-output"): body for lang, name, body in blocks
             if lang == "text" and name.endswith("-output")}
    assert code, f"no named python blocks found in {page}"
    assert set(shown) <= {name for name, _ in code}, f"output blocks without code in {page}"
    namespace: dict[str, object] = {"__name__": f"docs_{page.removesuffix('.rst')}"}
    for name, body in code:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(body, f"{page}:{name}", "exec"), namespace)  # noqa: S102
        if name in shown:
            printed = "\n".join(line.rstrip() for line in buf.getvalue().strip("\n").splitlines())
            assert printed == shown[name], (
                f"{page}: block {name!r} now prints:\n{printed}\n"
                "if that is right, update the page with: python3 scripts/docs_outputs.py"
            )


def test_every_page_in_the_toctree_is_a_file_or_a_known_pending_page() -> None:
    index = (DOCS / "index.rst").read_text(encoding="utf-8")
    entries = re.findall(r"^   (\w+)$", index.split(".. toctree::", 1)[1], re.M)
    assert {"getting_started", "paper_examples", "semantics", "api", "missing"} <= set(entries)
    for e in ["getting_started", "paper_examples", "semantics", "api", "missing"]:
        assert (DOCS / f"{e}.rst").exists(), e


def missing_modules() -> list[str]:
    """Modules the 'Not built yet' section of missing.rst names as ``(``module``)``."""
    text = (DOCS / "missing.rst").read_text(encoding="utf-8")
    section = text.split("Not built yet", 1)[1].split("Known limits", 1)[0]
    return re.findall(r"\(``(turnout\.[\w.]+)``\)", section)


def test_missing_page_names_only_modules_that_do_not_exist() -> None:
    names = missing_modules()
    assert names, "the list of missing modules is empty or no longer parsed"
    built = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            built.append(name)
    assert not built, f"docs/missing.rst says these are not built, but they exist now; update the page: {built}"


def test_missing_page_paths_do_not_exist() -> None:
    text = (DOCS / "missing.rst").read_text(encoding="utf-8")
    section = text.split("Not built yet", 1)[1].split("Known limits", 1)[0]
    root = DOCS.parent
    for path in re.findall(r"\(``((?:examples|benchmarks)/[\w./]*)``\)", section):
        p = root / path
        present = p.is_file() if p.suffix else (p.is_dir() and any(f.suffix == ".py" for f in p.rglob("*")))
        assert not present, f"docs/missing.rst says {path} is not built, but it exists now; update the page"
