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
from typing import Any

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
            assert ast.get_docstring(fn) and ast.unparse(fn.body[1]) == f"{mutation.PROBE}()"  # (after it)
        if m.function == "__init__":
            cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
            assert ast.get_docstring(cls)


@needs_mutmut
def test_a_module_that_asks_has_its_decorated_functions_mutated_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """mutmut skips decorated functions; a module marked ``"decorated"`` (``fast/xla_options.py``,
    whose ``accepted`` is under ``functools.cache``) has their bodies mutated too, the decorator kept
    unmutated above the probe, and only while its mutants are made: unmarked, the same module has
    none there."""
    marked = [m for m in mutation.mutants_of("fast/xla_options.py") if m.function == "accepted"]
    assert marked and all(m.line > 51 for m in marked)
    for m in marked:
        fn = next(n for n in ast.walk(ast.parse(m.source)) if isinstance(n, ast.FunctionDef) and n.name == "accepted")
        assert [ast.unparse(d) for d in fn.decorator_list] == ["functools.cache"]
        assert ast.unparse(fn.body[1]) == f"{mutation.PROBE}()"  # (after the docstring)
    monkeypatch.setitem(mutation.MODULES, "fast/xla_options.py",
                        {**mutation.MODULES["fast/xla_options.py"], "decorated": False})
    assert not [m for m in mutation.mutants_of("fast/xla_options.py") if m.function == "accepted"]


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
    # a test path pytest cannot find ran nothing: not a kill, and the campaign stops
    with pytest.raises(SystemExit, match="could not run"):
        mutation.run_tests(fifo_to_lifo, target, ["test_mutants_reference.py"], 120)


# ---- which tests run, the score, resuming ---------------------------------------------------------
def test_an_unreached_mutant_counts_against_the_score() -> None:
    """A mutant no test reaches is a gap in the tests: the score counts it as it counts a survivor,
    and equivalents count neither way."""
    assert mutation.score({"killed": 9, "not reached": 1}) == 0.9
    assert mutation.score({"killed": 9, "survived": 1, "equivalent": 5}) == 0.9
    assert mutation.score({"killed": 8, "timeout": 1, "survived": 1, "not reached": 2}) == 0.75
    assert mutation.score({"equivalent": 3}) is None


def test_the_oracle_runs_the_partitioned_tests_that_reach_its_send_and_recv_rules() -> None:
    """The reference interpreter's and the small-step system's Send/Recv rules fire only in partitioned
    runs, so every oracle module's test list holds the device, cluster and small-step-of-partitions
    test files (their absence left those rules' mutants unjudged)."""
    for path in mutation.ORACLE_MODULES:
        tests = mutation.MODULES[path]["tests"]
        for f in ("test_devices.py", "test_cluster.py", "test_devices_smallstep.py"):
            assert f in tests, (path, f)
        assert len(mutation.existing_tests(tests)) == len(tests), path


def test_a_mutant_runs_the_tests_that_ran_its_function() -> None:
    """Selection by recorded coverage: the tests that ran a line of the mutated function's body; none
    of them (not reached) when no test did; every test (None) for a module-level mutant or when a line
    ran outside any test, since then which test needs it is unknown."""
    m = mutation.Mutant("m.py", "m.f:1", 11, "f", make=None, span=(11, 13))  # type: ignore[arg-type]
    by_line = {10: {"t.py::a"}, 11: {"t.py::b"}, 13: {"t.py::c", "t.py::b"}, 14: {"t.py::d"}}
    assert mutation.tests_reaching(m, by_line) == ["t.py::b", "t.py::c"]
    assert mutation.tests_reaching(m, {10: {"t.py::a"}, 14: {"t.py::d"}}) == []
    assert mutation.tests_reaching(m, {12: {"", "t.py::a"}}) is None
    top = mutation.Mutant("m.py", "m.<module>:1", 3, "<module>", make=None)  # type: ignore[arg-type]
    assert mutation.tests_reaching(top, by_line) is None


def test_kept_outcomes_survive_a_rerun_until_their_function_or_the_tests_change(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resuming: a kill is kept while the function holding its mutant is unchanged (an edit elsewhere
    in the module keeps it); a survivor or a gap only while the tests are unchanged too (a new test
    may kill it)."""
    monkeypatch.setattr(mutation, "WORK", str(tmp_path))
    r = mutation.Results("reference/scheduler.py")
    for k, outcome in enumerate(("killed", "survived", "not reached", "timeout")):
        m = _fake(k)
        m.outcome, m.context = outcome, "f-as-it-was"
        r.put(m)
    again = mutation.Results("reference/scheduler.py")
    as_it_was = [_fake(k) for k in range(4)]
    for m in as_it_was:
        m.context = "f-as-it-was"
    assert {m.id: again.get(m)["outcome"] for m in as_it_was} == {  # type: ignore[index]
        "m.f:0": "killed", "m.f:1": "survived", "m.f:2": "not reached", "m.f:3": "timeout"}
    edited = _fake(0)
    edited.context = "f-edited"
    assert again.get(edited) is None  # its function changed: run again
    assert mutation.Results("reference/scheduler.py", fresh=True).done == {}
    monkeypatch.setattr(mutation, "tests_digest", lambda: "changed")
    assert sorted(mid for mid, _ in mutation.Results("reference/scheduler.py").done) == ["m.f:0", "m.f:3"]
    assert mutation.Results("reference/rules.py").done == {}  # another module


@needs_mutmut
def test_a_mutants_context_is_the_source_of_its_function() -> None:
    """``Mutant.context`` hashes the function holding the mutant: two mutants of one function share
    it, mutants of two functions differ."""
    ms = mutation.mutants_of("reference/scheduler.py")
    by_fn: dict[str, set[str]] = {}
    for m in ms:
        by_fn.setdefault(m.function, set()).add(m.context)
    assert all(len(c) == 1 for c in by_fn.values())
    assert len({next(iter(c)) for c in by_fn.values()}) == len(by_fn) > 1


@needs_mutmut
def test_a_campaign_selects_by_coverage_runs_in_parallel_and_resumes(tmp_path: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A small campaign on the scheduler, three tests of one file, two jobs at a time: the recorded
    coverage picks for ``pop``'s mutants the two tests that pop a ready queue, not the one that builds
    no interpreter; every mutant is decided; and a second run decides them all from the kept outcomes
    without running a test."""
    import io

    monkeypatch.setattr(mutation, "WORK", str(tmp_path))
    monkeypatch.setitem(mutation.MODULES, "reference/scheduler.py", {
        "module": "turnout.reference.scheduler", "tests": ["test_mutants_reference.py"],
        "select": "ready_queue_policies or run_graph_uses or takes_no_options"})
    log = io.StringIO()
    first = mutation.campaign("reference/scheduler.py", 6, 0, 120, log, jobs=2)
    outcomes = {m["id"]: m for m in first["mutants"]}
    assert len(outcomes) == 6 and all(m["outcome"] in ("killed", "survived", "not reached", "timeout")
                                      for m in outcomes.values()), log.getvalue()
    pops = [m for m in outcomes.values() if m["function"] == "pop" and m["outcome"] != "not reached"]
    assert pops and all(m["tests"] == 2 for m in pops), [(m["id"], m["tests"], m["outcome"]) for m in pops]
    log2 = io.StringIO()
    second = mutation.campaign("reference/scheduler.py", 6, 0, 120, log2, jobs=2)
    assert {m["id"]: m["outcome"] for m in second["mutants"]} == {k: m["outcome"] for k, m in outcomes.items()}
    assert log2.getvalue().count(", kept)") == 6 - sum(m["outcome"] == "equivalent" for m in outcomes.values())
