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

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXECUTED_PAGES = ["getting_started.rst", "paper_examples.rst"]
#: every page of the site, and the semantics chapter it includes: all their python blocks run
ALL_PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.rst") if "_build" not in p.parts)

#: a named code block: ``.. code-block:: LANG`` / ``:name: NAME`` / blank line / indented body
BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n   :name: (\S+)\n\n((?:   .*\n|[ \t]*\n)+)", re.M)


#: any code block: ``.. code-block:: LANG``, its options (``:name: NAME`` optional), blank line, body
ANY_BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n((?:   :[\w-]+:.*\n)*)\n((?:   .*\n|[ \t]*\n)+)", re.M)


def code_blocks(path: Path) -> list[tuple[str, str, str]]:
    """(language, name or ``block<k>``, dedented body) of every code block of a page, in order."""
    out = []
    for k, (lang, opts, body) in enumerate(ANY_BLOCK.findall(path.read_text(encoding="utf-8"))):
        m = re.search(r":name: (\S+)", opts)
        out.append((lang, m.group(1) if m else f"block{k}", textwrap.dedent(body).strip("\n")))
    return out


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


def _pages_with_python() -> list[str]:
    pages = [p for p in ALL_PAGES if any(lang == "python" for lang, _, _ in code_blocks(DOCS / p))]
    return pages + ["../specs/semantics.rst"]


@pytest.mark.parametrize("page", _pages_with_python())
def test_doc_code_runs_and_prints_what_the_page_shows(page: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every python block of every page runs (in a scratch directory, one namespace per page), and a
    block followed by a ``<name>-output`` block prints exactly that."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    blocks = code_blocks(DOCS / page)
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
                "if that is right, update the page with: bash scripts/py.sh scripts/docs_outputs.py"
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


# ---- README.md and the shell commands the docs show -------------------------------------------------
README = ROOT / "README.md"


def readme_python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def test_readme_python_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = readme_python_blocks()
    assert blocks, "README.md has no python block"
    monkeypatch.chdir(tmp_path)
    for k, body in enumerate(blocks):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(body, f"README.md:python{k}", "exec"), {"__name__": "readme"})  # noqa: S102
        for want in re.findall(r"# .*?= ([\d.]+)$", body, re.M):  # "# 3 * 2**10 - 100 = 2972.0"
            assert want in buf.getvalue(), f"README block {k} prints {buf.getvalue()!r}, its comment says {want}"


def shell_commands() -> list[tuple[str, str]]:
    """(where, command) for every command in README.md (fenced bash blocks and the commands table)
    and in the bash blocks of the docs, comments stripped."""
    out: list[tuple[str, str]] = []
    text = README.read_text(encoding="utf-8")
    for body in re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S):
        out += [("README.md", line) for line in body.splitlines()]
    # the commands table (its rows start with a command; the layout table's with a folder name)
    out += [("README.md", cmd) for cmd in re.findall(r"^\| `([^`]+)` \|", text, re.M) if " " in cmd]
    for page in ALL_PAGES:
        for lang, _, body in code_blocks(DOCS / page):
            if lang in ("bash", "console", "shell"):
                out += [(page, line) for line in body.splitlines()]
    return [(w, c.split("  #")[0].split(" # ")[0].strip()) for w, c in out
            if c.strip() and not c.strip().startswith("#")]


def _check_command(cmd: str) -> None:
    words = cmd.split()
    while words and re.match(r"^[A-Z_]+=\S*$", words[0]):  # leading VAR=value assignments
        words = words[1:]
    assert words, cmd
    if words[:3] == ["pip", "install", "-e"]:
        extras = re.findall(r"\[([\w,]+)\]", words[3]) if len(words) > 3 else []
        text = (ROOT / "pyproject.toml").read_text()
        for extra in ",".join(extras).split(","):
            assert not extra or re.search(rf"^{extra} = \[", text, re.M), f"{cmd}: no extra {extra!r}"
        return
    assert words[0] == "bash", f"{cmd!r}: commands start with `bash scripts/...` so they work in a fresh shell"
    script = ROOT / words[1]
    assert script.is_file(), f"{cmd}: {words[1]} does not exist"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, f"{cmd}: {words[1]} has a syntax error"
    if words[1] != "scripts/py.sh":
        return
    args = words[2:]
    if args[:1] == ["-m"]:
        assert importlib.util.find_spec(args[1]) is not None, f"{cmd}: no module {args[1]}"
        return
    target = ROOT / args[0]
    assert target.is_file(), f"{cmd}: {args[0]} does not exist"
    flags = [a.split("=")[0] for a in args[1:] if a.startswith("--")]
    if flags:
        out = subprocess.run([sys.executable, str(target), "--help"], capture_output=True, text=True, timeout=300,
                             cwd=ROOT)
        assert out.returncode == 0, f"{cmd}: --help failed: {out.stderr[-500:]}"
        for f in flags:
            assert f in out.stdout, f"{cmd}: {args[0]} has no option {f}"


def test_every_shown_command_works_in_a_fresh_shell() -> None:
    """Commands need no activated venv: ``bash scripts/<x>.sh`` (``scripts/py.sh`` runs Python with
    Turnout installed); their files exist and their options are ones the script accepts."""
    cmds = shell_commands()
    assert any(w == "README.md" for w, _ in cmds)
    for where, cmd in cmds:
        try:
            _check_command(cmd)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from None


def test_scripts_py_sh_runs_python_with_turnout(tmp_path: Path) -> None:
    """From a shell with nothing activated (a bare PATH), py.sh finds or makes the environment."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "py.sh"), "-c", "import turnout; print(turnout.__version__)"],
                         capture_output=True, text=True, timeout=600,
                         env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-2000:]
