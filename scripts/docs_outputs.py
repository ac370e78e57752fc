"""Rewrite the printed outputs shown in the docs from what their code prints today.

Every page of ``docs/`` pairs named python blocks
(``.. code-block:: python`` / ``:name: X``) with a text block named ``X-output`` that shows what it
prints. ``tests/test_docs.py`` fails when the two drift apart (for instance after a builder renames
the nodes it creates). After checking that the new output is right, run::

    bash scripts/py.sh scripts/docs_outputs.py            # rewrite the output blocks in place
    bash scripts/py.sh scripts/docs_outputs.py --check    # only report pages that would change

The code runs in a scratch directory, as in the test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import textwrap
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.rst") if "_build" not in p.parts)
BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n   :name: (\S+)\n\n((?:   .*\n|[ \t]*\n)+)", re.M)


def printed_outputs(text: str, page: str) -> dict[str, str]:
    """Run the page's named python blocks in order, in one namespace; name -> what each printed."""
    namespace: dict[str, object] = {"__name__": f"docs_{page.removesuffix('.rst')}"}
    out: dict[str, str] = {}
    for lang, name, body in BLOCK.findall(text):
        if lang != "python":
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(textwrap.dedent(body), f"{page}:{name}", "exec"), namespace)  # noqa: S102
        out[name] = "\n".join(line.rstrip() for line in buf.getvalue().strip("\n").splitlines())
    return out


def rewrite(text: str, outputs: dict[str, str]) -> str:
    def replace(m: re.Match[str]) -> str:
        lang, name, body = m.groups()
        base = name.removesuffix("-output")
        if lang != "text" or not name.endswith("-output") or base not in outputs:
            return m.group(0)
        trailing = body[len(body.rstrip("\n")) + 1:]  # keep the blank lines that end the block
        return f".. code-block:: text\n   :name: {name}\n\n{textwrap.indent(outputs[base], '   ')}\n{trailing}"

    return BLOCK.sub(replace, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report pages that would change; write nothing")
    args = parser.parse_args()
    import os
    import tempfile

    # The docs' device examples place ops on cpu:0 .. cpu:7, as the tests do (tests/conftest.py):
    # JAX reads this flag when it is first imported, which happens inside the pages' code.
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
    sys.path.insert(0, str(DOCS.parent / "examples"))
    os.chdir(tempfile.mkdtemp())
    changed = []
    for page in PAGES:
        path = DOCS / page
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, printed_outputs(text, page))
        if new != text:
            changed.append(page)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    print(("would change: " if args.check else "rewrote: ") + (", ".join(changed) or "nothing"))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
