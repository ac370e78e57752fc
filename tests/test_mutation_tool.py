"""``tools/mutation.py``, the mutation-testing command: its sampling is seeded, its mutants are valid
modules that keep their docstrings, and one mutant run end to end is classified right (killed when a
test notices, survived when the tests pass and reach it, not reached when no test runs it).

Everything but the sampling needs the optional ``mutation`` extra (mutmut); without it those tests
skip, as the command itself exits with an install hint.
"""

from __future__ import annotations

import ast
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import mutation  # noqa: E402


def _fake(k: int) -> mutation.Mutant:
    return mutation.Mutant("m.py", f"m.f:{k}", k, "f", make=None)  # type: ignore[arg-type]


def test_samples_are_seeded_and_in_source_order() -> None:
    pool = [_fake(k) for k in range(100)]
    a, b = mutation.sample(pool, 10, seed=3), mutation.sample(pool, 10, seed=3)
    assert [m.id for m in a] == [m.id for m in b]
    assert [m.line for m in a] == sorted(m.line for m in a) and len(a) == 10
    assert [m.id for m in mutation.sample(pool, 10, seed=4)] != [m.id for m in a]
    assert len(mutation.sample(pool, None, seed=0)) == 100
    assert len(mutation.sample(pool, 500, seed=0)) == 100


def test_every_module_under_test_and_its_tests_exist() -> None:
    root = mutation.ROOT
    for path, spec in mutation.MODULES.items():
        assert os.path.exists(os.path.join(root, path)), path
        assert spec["module"].startswith("turnout.")
        assert mutation.existing_tests(spec["tests"]), path
    assert set(mutation.DEFAULT_MODULES) <= set(mutation.MODULES)


def test_a_select_expression_narrows_the_test_files_with_k() -> None:
    spec = mutation.MODULES["devices/partition.py"]
    args = mutation.existing_tests(spec["tests"], spec.get("select"))
    assert args[-2:] == ["-k", spec["select"]] and "tests/test_bad_inputs.py" in args
    assert "-k" not in mutation.existing_tests(mutation.MODULES["reference/rules.py"]["tests"])


def test_equivalents_each_give_a_reason() -> None:
    for mid, reason in mutation.load_equivalents().items():
        assert ":" in mid and len(reason.split()) >= 4, (mid, reason)


needs_mutmut = pytest.mark.skipif(
    __import__("importlib").util.find_spec("mutmut") is None, reason='the "mutation" extra (mutmut) is not installed')


@needs_mutmut
def test_mutants_are_valid_modules_with_a_probe_after_the_docstring() -> None:
    ms = mutation.mutants_of("reference/scheduler.py")
    assert len(ms) > 10 and len({m.id for m in ms}) == len(ms)
    for m in ms:
        tree = ast.parse(m.source)
        assert m.diff.startswith("--- reference/scheduler.py")
        if m.function == "pop":
            fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "pop")
            assert ast.unparse(fn.body[0]) == f"{mutation.PROBE}()"  # pop has no docstring
        if m.function == "__init__":
            cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
            assert ast.get_docstring(cls)


@needs_mutmut
def test_one_mutant_end_to_end() -> None:
    """In a fresh pytest process with the mutant loaded: FIFO turned into LIFO is killed by the
    scheduler test; a changed default seed passes it although ``__init__`` runs (survived, an
    equivalent mutant for FIFO and LIFO queues); and a test that never builds a queue does not reach
    the mutated function."""
    ms = {m.diff.split("@@", 2)[-1].strip(): m for m in mutation.mutants_of("reference/scheduler.py")}
    fifo_to_lifo = next(m for d, m in ms.items() if 'if self.policy != "fifo"' in d)
    seed_one = next(m for d, m in ms.items() if "seed: int = 1" in d)
    target = "turnout.reference.scheduler"
    queue_test = ["tests/test_mutants_reference.py::test_ready_queue_policies"]
    assert mutation.run_tests(fifo_to_lifo, target, queue_test, 120)[0] == "killed"
    assert mutation.run_tests(seed_one, target, queue_test, 120)[0] == "survived"
    other = ["tests/test_mutation_tool.py::test_samples_are_seeded_and_in_source_order"]
    assert mutation.run_tests(fifo_to_lifo, target, other, 120)[0] in ("not reached", "not loaded")
