"""Sphinx directive ``.. rule-table::``: render ``specs/rules.toml`` as a table.

Why it exists: code cites semantic rules by name (``[E-Merge-Live]``) and a test checks those names
against ``specs/rules.toml``. Rendering the docs' rule table from that same file keeps the prose, the
table and the citations from drifting apart. Option ``:kind:`` keeps one kind of rule only.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util.docutils import SphinxDirective

KINDS = ("dynamic", "static", "structured", "theorem")
COLUMNS = (("Rule", 14), ("Premises", 36), ("Conclusion", 28), ("Summary", 22))


def _kind(argument: str | None) -> str:
    return str(directives.choice(argument, KINDS))


def _literal(text: str) -> nodes.paragraph:
    return nodes.paragraph("", "", nodes.literal(text, text))


def _row(cells: list[list[nodes.Node]]) -> nodes.row:
    row = nodes.row()
    for children in cells:
        row += nodes.entry("", *children)
    return row


class RuleTable(SphinxDirective):
    """A four-column table (name, premises, conclusion, summary) of the rules in the TOML file."""

    option_spec: ClassVar[dict[str, Any]] = {"kind": _kind}

    def run(self) -> list[nodes.Node]:
        path = Path(self.config.rule_table_file)
        self.env.note_dependency(str(path))
        try:
            rules: list[dict[str, Any]] = tomllib.loads(path.read_text(encoding="utf-8"))["rule"]
        except (OSError, KeyError, tomllib.TOMLDecodeError) as err:
            raise self.error(f"rule-table: cannot read rules from {path}: {err}") from err
        kind = self.options.get("kind")
        chosen = [r for r in rules if kind is None or r["kind"] == kind]
        if not chosen:
            raise self.error(f"rule-table: no rules of kind {kind!r} in {path}")
        group = nodes.tgroup(cols=len(COLUMNS))
        group += [nodes.colspec(colwidth=width) for _, width in COLUMNS]
        group += nodes.thead("", _row([[nodes.paragraph(text=title)] for title, _ in COLUMNS]))
        body = nodes.tbody()
        for rule in chosen:
            body += _row(
                [
                    [_literal(f"[{rule['name']}]")],
                    [_literal(p) for p in rule["premises"]] or [nodes.paragraph(text="(none)")],
                    [_literal(rule["conclusion"])],
                    [nodes.paragraph(text=rule["summary"])],
                ]
            )
        group += body
        return [nodes.table("", group, classes=["rule-table"])]


def _default_path(app: Sphinx, config: Config) -> None:
    if not config.rule_table_file:
        config.rule_table_file = str((Path(app.confdir) / ".." / "specs" / "rules.toml").resolve())


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("rule_table_file", "", "env", types=[str])
    app.connect("config-inited", _default_path)
    app.add_directive("rule-table", RuleTable)
    return {"parallel_read_safe": True, "version": "1"}
