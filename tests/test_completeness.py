"""Every primitive has an entry in every interpreter's table, or is listed as deliberately unsupported.

Why: each interpreter (shape inference, numpy kernels, the reference interpreter, gradients, the fast
backend) is a table keyed by primitive name (docs/design.rst, "Layers"). Adding a primitive to
``turnout.primitives`` without a rule everywhere would otherwise surface only when some program used
it. The last test keeps the code's rule citations (``[E-Merge-Live]``) in step with ``specs/rules.toml``.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

from turnout.kernels import KERNELS
from turnout.primitives import COMPUTE, CONTROL_FLOW, PRIMITIVES, STATEFUL
from turnout.shape_rules import SHAPE_RULES

ROOT = Path(__file__).resolve().parent.parent
ALL = sorted(PRIMITIVES)


def test_primitive_kinds_partition_the_declarations() -> None:
    kinds = {p.kind for p in PRIMITIVES.values()}
    assert kinds <= {"compute", "control", "state", "source", "structural", "transfer"}
    assert CONTROL_FLOW == {"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"}
    assert not (COMPUTE & STATEFUL) and not (COMPUTE & CONTROL_FLOW)
    assert all(name == p.name for name, p in PRIMITIVES.items())


def test_every_primitive_has_a_shape_rule() -> None:
    missing = [p for p in ALL if p not in SHAPE_RULES]
    assert not missing, f"primitives without a shape rule in turnout.shape_rules.SHAPE_RULES: {missing}"
    unknown = sorted(set(SHAPE_RULES) - set(PRIMITIVES))
    assert not unknown, f"shape rules for undeclared primitives: {unknown}"


def test_every_compute_primitive_has_a_numpy_kernel() -> None:
    missing = [p for p in sorted(COMPUTE) if p not in KERNELS]
    assert not missing, f"compute primitives without a kernel in turnout.kernels.KERNELS: {missing}"
    unknown = sorted(set(KERNELS) - set(PRIMITIVES))
    assert not unknown, f"kernels for undeclared primitives: {unknown}"


def test_every_primitive_is_handled_by_the_reference_interpreter() -> None:
    """The reference fires compute primitives through KERNELS and everything else through rules.FIRE."""
    from turnout.reference import rules

    missing = [p for p in ALL if p not in rules.FIRE and not (p in COMPUTE and p in KERNELS)]
    assert not missing, f"primitives the reference interpreter cannot fire: {missing}"
    unknown = sorted(set(rules.FIRE) - set(PRIMITIVES))
    assert not unknown, f"reference FIRE rules for undeclared primitives: {unknown}"


def test_every_primitive_has_a_gradient_rule_or_is_declared_without_one() -> None:
    from turnout.gradients import rules as g

    covered = set(g.GRAD_RULES) | set(g.NON_DIFFERENTIABLE) | set(g.STRUCTURED) | set(g.UNSUPPORTED)
    missing = [p for p in ALL if p not in covered]
    assert not missing, (
        "primitives with no gradient rule that are not declared NON_DIFFERENTIABLE, STRUCTURED or "
        f"UNSUPPORTED in turnout.gradients.rules: {missing}"
    )
    overlap = sorted(set(g.GRAD_RULES) & set(g.NON_DIFFERENTIABLE))
    assert not overlap, f"primitives both with a gradient rule and declared non-differentiable: {overlap}"
    unknown = sorted(covered - set(PRIMITIVES))
    assert not unknown, f"gradient tables name undeclared primitives: {unknown}"


def test_primitives_declared_differentiable_have_gradients() -> None:
    """A primitive declared differentiable in turnout.primitives must not be silently stopped."""
    from turnout.gradients import rules as g

    wrong = [p for p in ALL if PRIMITIVES[p].differentiable and p in g.NON_DIFFERENTIABLE]
    assert not wrong, f"declared differentiable but listed NON_DIFFERENTIABLE: {wrong}"


def test_every_primitive_has_a_fast_lowering_or_is_listed_unsupported() -> None:
    lowering = importlib.import_module("turnout.fast.lowering")
    covered = set(lowering.LOWERING_RULES) | set(lowering.UNSUPPORTED)
    missing = [p for p in ALL if p not in covered]
    assert not missing, f"primitives neither lowered by turnout.fast nor listed in its UNSUPPORTED: {missing}"
    unknown = sorted(covered - set(PRIMITIVES))
    assert not unknown, f"fast lowering tables name undeclared primitives: {unknown}"
    for name, why in lowering.UNSUPPORTED.items():
        assert isinstance(why, str) and why, f"UNSUPPORTED[{name!r}] must say why"


# ---- rule citations --------------------------------------------------------------------------------
#: a citation is a rule name in square brackets: [E-Merge-Live], [W-Types], [T3-Exactly-Once], [S-Cond]
CITATION = re.compile(r"\[([ESTW][0-9]?-[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)\]")
#: validation errors name their rule as a string argument: ValidationError(msg, "W-Frame-Consistent", n)
W_RULE_ARG = re.compile(r"""["'](W-[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)["']""")
CODE_DIRS = ("turnout", "reference", "semantics", "fast", "devices")


def rule_names() -> set[str]:
    rules = tomllib.loads((ROOT / "specs" / "rules.toml").read_text(encoding="utf-8"))["rule"]
    return {r["name"] for r in rules}


def citations() -> dict[str, list[str]]:
    """rule name -> files citing it, over the Python code of the project."""
    found: dict[str, list[str]] = {}
    for d in CODE_DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for pattern in (CITATION, W_RULE_ARG):
                for m in pattern.finditer(text):
                    found.setdefault(m.group(1), []).append(str(path.relative_to(ROOT)))
    return found


def test_rule_names_are_unique_and_well_formed() -> None:
    rules = tomllib.loads((ROOT / "specs" / "rules.toml").read_text(encoding="utf-8"))["rule"]
    names = [r["name"] for r in rules]
    assert len(names) == len(set(names)), "duplicate rule names in specs/rules.toml"
    for r in rules:
        assert CITATION.fullmatch(f"[{r['name']}]"), r["name"]
        assert r["kind"] in ("dynamic", "static", "structured", "theorem"), r["name"]


def test_every_cited_rule_exists_in_the_spec() -> None:
    names = rule_names()
    cited = citations()
    assert cited, "no rule citations found at all: the citation pattern is broken"
    unknown = {name: sorted(set(files)) for name, files in cited.items() if name not in names}
    assert not unknown, f"rules cited in code but absent from specs/rules.toml: {unknown}"


def test_the_validation_rules_are_cited_by_validation() -> None:
    """Every static well-formedness rule but [W-Merge-Unique] (a condition on runs) is checked somewhere."""
    names = {n for n in rule_names() if n.startswith("W-")} - {"W-Merge-Unique"}
    cited = citations()
    checkers = ("turnout/", "reference/")
    unchecked = sorted(n for n in names if not any(f.startswith(checkers) for f in cited.get(n, [])))
    assert not unchecked, f"well-formedness rules that no validation code cites: {unchecked}"
