"""Mutation testing: break one expression of a module at a time and check that its tests notice.

    python tools/mutation.py                                  # the default modules, 60 mutants each, seed 0
    python tools/mutation.py --module reference/rules.py --sample 40 --seed 3
    python tools/mutation.py --module fast/emit.py --list     # the mutants, without running anything
    python tools/mutation.py --module reference/rules.py --show rules:1a2b3c4d   # one mutant's diff
    TURNOUT_MUTATION=nightly python tools/mutation.py         # every mutant of every module

The mutants are mutmut's (``pip install -e ".[mutation]"``): its libcst operators (comparison and
arithmetic swaps, ``and``/``or``, constants, strings, removed arguments, ``None`` for expressions, ...)
read the ``[tool.mutmut]`` section of ``pyproject.toml``. This wrapper applies them itself, because
``mutmut run`` imports the mutated copies it writes under ``mutants/`` by their file path
(``reference.rules``) while the tests import ``turnout.reference.rules`` through the setuptools
``package-dir`` mapping, so its mutants would never be reached.

How one mutant runs: the mutated module is written under ``.mutation/`` (the work tree is never
touched), and the module's own tests (``MODULES`` below, fastest first, ``-x``) run in a fresh
``pytest`` process with this file loaded as a plugin (``-p mutation``): it puts a finder in front of
the editable install's, so ``import turnout.reference.rules`` loads the mutant. A probe call inserted
at the top of the function holding the mutation records whether any test reached it. Outcomes:

* killed: a test failed (or the run crashed, or ran past the timeout: ``timeout`` is a kill too);
* survived: every test passed and the mutated function ran;
* not reached: every test passed and the mutated function never ran (no test exercises it);
* equivalent: listed in ``tools/mutation_equivalents.toml`` with a one-line reason.

Score = killed / (killed + survived), equivalents excluded (they are neither). The report
(``.mutation/report.md`` and ``.json``, untracked) gives the score per module and every survivor and
unreached mutant with its diff. A module's tests first run unmutated: they must pass, and their time
sets the per-mutant timeout (``--timeout`` overrides it).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.abc
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".mutation")
EQUIVALENTS = os.path.join(ROOT, "tools", "mutation_equivalents.toml")
PROBE = "__turnout_mutant_reached__"

_REF_TESTS = ["test_mutants_reference.py", "test_trace_rules.py", "test_reference.py", "test_regressions.py",
              "test_raw.py", "test_session.py", "test_variables.py", "test_mutations.py", "test_validation.py",
              "test_properties.py"]
_DEV_TESTS = ["test_mutants_devices.py", "test_mutants_devices2.py", "test_devices.py", "test_devices_smallstep.py",
              "test_devices_properties.py", "test_bad_inputs.py"]
_DEV_SELECT = "not test_bad_inputs or partitioned"  # of the bad-input catalogue, only the partitioned runs
_CLUSTER_TESTS = ["test_mutants_cluster.py", "test_cluster.py", "test_mutants_s5.py"]  # in-process: no Ray
#: Ray's actors run in worker processes, which import the unmutated modules: a campaign on
#: ``ray_runtime.py`` reaches only the driver's side (``RayBackend``, ``TaskPool``, ``RemoteVariables``),
#: and a mutant inside ``TaskActor`` shows as not reached.
_RAY_TESTS = ["test_mutants_ray.py", "test_ray.py", "test_mutants_s5.py"]
_FAST_DEV_TESTS = ["test_mutants_devices_fast.py", "test_mutants_s5.py", "test_devices_fast.py", "test_devices_spmd.py"]
_FAST_TESTS = ["test_mutants_s7.py", "test_fast_nested_compile.py", "test_mutants_fast.py", "test_mutants_fast2.py",
               "test_ops.py", "test_fast.py", "test_session.py", "test_raw.py", "test_variables.py",
               "test_fast_gradients.py"]
# the gradient stacks' chunking, swapping and memory accounting, and the cond chains raised to lax.switch
_STACK_TESTS = ["test_mutants_fast3.py", "test_mutants_fast2.py", "test_swap_memory.py", "test_fast_memory.py",
                "test_fast_repeated_runs.py", "test_fast_positional_stacks.py"]
_CASE_TESTS = ["test_mutants_fast3.py", "test_fast_case_chain.py", "test_fast_compile.py"]
# the fast backend's driver: plans, stages, the direct and fused paths, the reference fallback, buffers kept
_BACKEND_TESTS = ["test_mutants_s5.py", "test_fast_repeated_runs.py", "test_fast_memory.py", "test_fast.py",
                  "test_swap_memory.py", "test_mutants_fast.py", "test_fast_fused.py", "test_fast_trace.py",
                  "test_fast_run_overhead.py", "test_fast_lane.py", "test_fast_positional_stacks.py"]
# stacks of loops that span devices, and loops on one device run chunk by chunk inside a partitioned run
_SWAP_TESTS = ["test_mutants_s6.py", "test_mutants_s5.py", "test_devices_swap.py", "test_mutants_devices_fast.py",
               "test_devices_fast.py"]

#: Each module under test: its import name and the test files that check it (run in this order, so put
#: the fast, pointed ones first: a killed mutant stops at its first failure). ``select``, where given, is
#: a pytest ``-k`` expression narrowing those files to the tests that reach the module.
MODULES: dict[str, dict[str, Any]] = {
    "reference/rules.py": {"module": "turnout.reference.rules", "tests": _REF_TESTS},
    "reference/executor.py": {"module": "turnout.reference.executor", "tests": _REF_TESTS},
    "reference/scheduler.py": {"module": "turnout.reference.scheduler", "tests": _REF_TESTS},
    "reference/trace.py": {"module": "turnout.reference.trace", "tests": _REF_TESTS},
    "semantics/smallstep.py": {"module": "turnout.semantics.smallstep",
                               "tests": ["test_mutants_smallstep.py", "test_trace_rules.py", "test_smallstep.py",
                                         "test_properties.py"]},
    "fast/emit.py": {"module": "turnout.fast.emit", "tests": ["test_fast_counted_nests.py", *_FAST_TESTS]},
    "fast/facts.py": {"module": "turnout.fast.facts",
                      "tests": ["test_fast_counted_nests.py", "test_fast_counted_stacks.py", "test_fast_compile.py",
                                *_FAST_TESTS]},
    "fast/outcome.py": {"module": "turnout.fast.outcome",
                        "tests": ["test_fast_outcome.py", "test_error_parity.py", "test_swap_memory.py",
                                  "test_fast_stack_pointers.py"]},
    "fast/driven.py": {"module": "turnout.fast.driven", "tests": _STACK_TESTS},
    "fast/ranges.py": {"module": "turnout.fast.ranges",
                       "tests": ["test_fast_ranges.py", "test_fast_counted_nests.py"]},
    "fast/counted_stacks.py": {"module": "turnout.fast.counted_stacks",
                               "tests": ["test_fast_counted_stacks.py", "test_fast_gradients.py"]},
    "fast/packing.py": {"module": "turnout.fast.packing",
                        "tests": ["test_fast_packing.py", "test_fast_run_overhead.py", "test_fast_lane.py"]},
    "fast/lowering.py": {"module": "turnout.fast.lowering",
                         "tests": ["test_fast_runtime_values.py", "test_error_parity.py", *_FAST_TESTS]},
    "fast/functionalize.py": {"module": "turnout.fast.functionalize", "tests": _FAST_TESTS},
    "fast/stacks.py": {"module": "turnout.fast.stacks", "tests": _STACK_TESTS},
    "fast/case_chain.py": {"module": "turnout.fast.case_chain", "tests": _CASE_TESTS},
    "devices/placement.py": {"module": "turnout.devices.placement", "tests": _DEV_TESTS, "select": _DEV_SELECT},
    "devices/partition.py": {"module": "turnout.devices.partition", "tests": _DEV_TESTS, "select": _DEV_SELECT},
    "devices/executor.py": {"module": "turnout.devices.executor", "tests": _DEV_TESTS, "select": _DEV_SELECT},
    "devices/rendezvous.py": {"module": "turnout.devices.rendezvous", "tests": _DEV_TESTS, "select": _DEV_SELECT},
    "devices/smallstep.py": {"module": "turnout.devices.smallstep",
                             "tests": ["test_mutants_devices3.py", "test_devices_smallstep.py", "test_mutants_s5.py"]},
    "devices/cluster.py": {"module": "turnout.devices.cluster", "tests": _CLUSTER_TESTS},
    "devices/cluster_trace.py": {"module": "turnout.devices.cluster_trace", "tests": _CLUSTER_TESTS},
    "devices/partition_executors.py": {"module": "turnout.devices.partition_executors", "tests": _CLUSTER_TESTS},
    "devices/task_runner.py": {"module": "turnout.devices.task_runner", "tests": _CLUSTER_TESTS},
    "devices/ray_runtime.py": {"module": "turnout.devices.ray_runtime", "tests": _RAY_TESTS},
    "devices/fast_executor.py": {"module": "turnout.devices.fast_executor", "tests": _FAST_DEV_TESTS},
    "devices/segments.py": {"module": "turnout.devices.segments", "tests": _FAST_DEV_TESTS},
    "devices/spmd.py": {"module": "turnout.devices.spmd", "tests": _FAST_DEV_TESTS},
    "devices/spmd_emitter.py": {"module": "turnout.devices.spmd_emitter", "tests": _FAST_DEV_TESTS},
    "devices/swap.py": {"module": "turnout.devices.swap", "tests": _SWAP_TESTS},
    "devices/region_driver.py": {"module": "turnout.devices.region_driver", "tests": _SWAP_TESTS},
    "devices/compiled_partition.py": {"module": "turnout.devices.compiled_partition",
                                      "tests": ["test_mutants_compiled_partition.py", "test_compiled_partition.py",
                                                "test_cluster.py"]},
    "fast/backend.py": {"module": "turnout.fast.backend", "tests": _BACKEND_TESTS},
    "fast/plan.py": {"module": "turnout.fast.plan", "tests": _BACKEND_TESTS},
    "fast/repeat.py": {"module": "turnout.fast.repeat", "tests": _BACKEND_TESTS},
    "fast/guards.py": {"module": "turnout.fast.guards", "tests": _BACKEND_TESTS},
    "fast/xla_options.py": {"module": "turnout.fast.xla_options", "tests": ["test_fast_xla_options.py"]},
    "turnout/store.py": {"module": "turnout.store",
                         "tests": ["test_error_parity.py", "test_fast_variable_store.py", "test_checkpoint.py",
                                   "test_bad_inputs.py"]},
    "fast/variable_store.py": {"module": "turnout.fast.variable_store",
                               "tests": ["test_fast_variable_store.py", "test_fast_lane.py",
                                         "test_fast_run_overhead.py"]},
    "fast/lane.py": {"module": "turnout.fast.lane",
                     "tests": ["test_fast_lane.py", "test_fast_run_overhead.py", "test_session.py",
                               "test_error_parity.py", "test_fast_hot_properties.py", "test_fast_repeated_runs.py",
                               "test_fast_positional_stacks.py", "test_fast_memory.py"]},
    "fast/held.py": {"module": "turnout.fast.held",
                     "tests": ["test_fast_held.py", "test_fast_memory.py", "test_fast_gradients.py"]},
    "fast/fused_lane.py": {"module": "turnout.fast.fused_lane",
                     "tests": ["test_fast_lane.py", "test_fast_run_overhead.py", "test_session.py",
                               "test_error_parity.py", "test_fast_hot_properties.py", "test_fast_repeated_runs.py",
                               "test_fast_positional_stacks.py", "test_fast_memory.py"]},
}
DEFAULT_MODULES = ["reference/rules.py", "reference/executor.py", "semantics/smallstep.py"]


@dataclass
class Mutant:
    """One mutation of one module: a stable id (function + hash of the change), the line, the diff."""

    path: str
    id: str
    line: int
    function: str
    make: _Lazy = field(repr=False)
    outcome: str = ""
    seconds: float = 0.0
    reason: str = ""

    @property
    def diff(self) -> str:
        """The change, as a unified diff of the module (without the probe)."""
        return self.make.diff()

    @property
    def source(self) -> str:
        """The mutated module with the probe, as it is loaded by the tests."""
        return self.make.source()

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "line": self.line, "function": self.function,
                "outcome": self.outcome, "seconds": round(self.seconds, 2), "reason": self.reason,
                "diff": self.diff}


class _Lazy:
    """Renders a mutant's source and diff only when asked (a module has hundreds of mutants and a
    campaign runs a sample of them)."""

    def __init__(self, src: str, path: str, module: Any, m: Any, fn: Any, fm: Any) -> None:
        self.src, self.path, self.module, self.m, self.fn, self.fm = src, path, module, m, fn, fm

    def diff(self) -> str:
        plain = self.fm.deep_replace(self.module, self.m.original_node, self.m.mutated_node).code
        return "".join(difflib.unified_diff(self.src.splitlines(True), plain.splitlines(True), self.path,
                                            self.path, n=0))

    def source(self) -> str:
        if self.fn is None:
            return self.fm.deep_replace(self.module, self.m.original_node, self.m.mutated_node).code
        return self.fm.deep_replace(self.module, self.fn, _with_probe(self.fn, self.m, self.fm)).code


# ---- generating mutants ---------------------------------------------------------------------------
def _require_mutmut() -> Any:
    try:
        from mutmut.mutation import file_mutation
    except ImportError:
        sys.exit('tools/mutation.py needs mutmut: pip install -e ".[mutation]"')
    return file_mutation


def mutants_of(path: str) -> list[Mutant]:
    """Every mutant mutmut's operators make of ``path``, in source order, each with a probe inserted at
    the top of the innermost function holding it (module-level mutants have none: reaching the module
    is reaching them)."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

    fm = _require_mutmut()
    cwd = os.getcwd()
    os.chdir(ROOT)  # mutmut reads [tool.mutmut] from ./pyproject.toml
    try:
        src = open(path).read()
        module, mutations, _, _ = fm.create_mutations(path, src)
    finally:
        os.chdir(cwd)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    parents = wrapper.resolve(ParentNodeProvider)
    positions = wrapper.resolve(PositionProvider)
    seen: dict[str, int] = {}
    out = []
    for m in mutations:
        fn: Optional[cst.FunctionDef] = None
        node = m.original_node
        while node in parents:
            node = parents[node]
            if isinstance(node, cst.FunctionDef):
                fn = node
                break
        fname = fn.name.value if fn is not None else "<module>"
        change = f"{fname}\n{module.code_for_node(m.original_node)}\n{module.code_for_node(m.mutated_node)}"
        h = hashlib.sha1(change.encode()).hexdigest()[:8]
        seen[h] = seen.get(h, 0) + 1
        mid = f"{os.path.splitext(os.path.basename(path))[0]}.{fname}:{h}" + (f".{seen[h]}" if seen[h] > 1 else "")
        out.append(Mutant(path, mid, positions[m.original_node].start.line, fname,
                          _Lazy(src, path, module, m, fn, fm)))
    return out


def _with_probe(fn: Any, m: Any, fm: Any) -> Any:
    """The mutated function with ``__turnout_mutant_reached__()`` as its first statement after the
    docstring."""
    import libcst as cst

    mutated_fn = fm.deep_replace(fn, m.original_node, m.mutated_node)
    probe = cst.parse_statement(f"{PROBE}()\n")
    body = mutated_fn.body
    if not isinstance(body, cst.IndentedBlock):  # def f(): return x  (one line)
        return mutated_fn.with_changes(body=cst.IndentedBlock(body=[probe, *[cst.SimpleStatementLine(
            body=list(body.body))]]))
    stmts = list(body.body)
    at = 1 if stmts and _is_docstring(stmts[0]) else 0
    return mutated_fn.with_changes(body=body.with_changes(body=[*stmts[:at], probe, *stmts[at:]]))


def _is_docstring(stmt: Any) -> bool:
    import libcst as cst

    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString))


# ---- running one mutant ---------------------------------------------------------------------------
def existing_tests(tests: list[str], select: Optional[str] = None) -> list[str]:
    """The test files of ``tests`` that exist, as paths from the repository root, followed by
    ``-k select`` where a module's tests are narrowed (pytest arguments, as ``_pytest_cmd`` takes them)."""
    files = [os.path.join("tests", t) for t in tests if os.path.exists(os.path.join(ROOT, "tests", t))]
    return files + (["-k", select] if select else [])


def _pytest_cmd(files: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "mutation", *files]


def _env(mutant: Optional[Mutant], module: str, status: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "tools"), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TURNOUT_HYPOTHESIS_PROFILE", "ci")
    env["TURNOUT_MUTANT_STATUS"] = status
    if mutant is not None:
        path = os.path.join(WORK, f"mutant-{os.getpid()}", mutant.path)  # one per campaign process
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(mutant.source)
        env["TURNOUT_MUTANT_MODULE"] = module
        env["TURNOUT_MUTANT_FILE"] = path
    return env


def run_tests(mutant: Optional[Mutant], module: str, tests: list[str], timeout: float) -> tuple[str, float, str]:
    """Run ``tests`` against ``mutant`` (None: unmutated). Returns (outcome, seconds, output tail)."""
    os.makedirs(WORK, exist_ok=True)
    status = os.path.join(WORK, f"status-{os.getpid()}.json")
    if os.path.exists(status):
        os.remove(status)
    env = _env(mutant, module, status)
    t0 = time.perf_counter()
    proc = subprocess.Popen(_pytest_cmd(tests), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        _cleanup()
        return "timeout", time.perf_counter() - t0, ""
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        _cleanup()
        raise
    dt = time.perf_counter() - t0
    st = json.load(open(status)) if os.path.exists(status) else {}
    _cleanup()
    if proc.returncode != 0:
        return "killed", dt, out[-3000:]
    if mutant is not None and not st.get("loaded"):
        return "not loaded", dt, out[-3000:]  # a broken hook, not a surviving mutant
    if mutant is not None and not st.get("reached") and mutant.function != "<module>":
        return "not reached", dt, out[-3000:]  # (a module-level mutant is reached when the module loads)
    return "survived", dt, out[-3000:]


def _cleanup() -> None:
    """Remove this process's mutated module and status file (reports stay)."""
    shutil.rmtree(os.path.join(WORK, f"mutant-{os.getpid()}"), ignore_errors=True)
    status = os.path.join(WORK, f"status-{os.getpid()}.json")
    if os.path.exists(status):
        os.remove(status)


# ---- the pytest plugin side (loaded in the test process by ``-p mutation``) ------------------------
class _MutantFinder(importlib.abc.MetaPathFinder):
    """Loads the mutated source for exactly one module name; everything else imports as usual."""

    def __init__(self, name: str, path: str) -> None:
        self.name, self.path = name, path

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        _STATE["loaded"] = True
        _write_status()
        return importlib.util.spec_from_file_location(fullname, self.path)


_STATE: dict[str, bool] = {"loaded": False, "reached": False}


def _write_status() -> None:
    path = os.environ.get("TURNOUT_MUTANT_STATUS")
    if path:
        with open(path, "w") as f:
            json.dump(_STATE, f)


def _reached() -> None:
    if not _STATE["reached"]:
        _STATE["reached"] = True
        _write_status()


def _install_hook() -> None:
    name, path = os.environ.get("TURNOUT_MUTANT_MODULE"), os.environ.get("TURNOUT_MUTANT_FILE")
    if not name or not path:
        return
    import builtins

    setattr(builtins, PROBE, _reached)
    if name in sys.modules:
        raise RuntimeError(f"{name} was imported before the mutation hook was installed")
    sys.meta_path.insert(0, _MutantFinder(name, path))


if os.environ.get("TURNOUT_MUTANT_STATUS") and __name__ != "__main__":
    _install_hook()


# ---- campaigns and reports ------------------------------------------------------------------------
def load_equivalents() -> dict[str, str]:
    """Mutant id -> the one-line reason it is equivalent (``tools/mutation_equivalents.toml``)."""
    if not os.path.exists(EQUIVALENTS):
        return {}
    with open(EQUIVALENTS, "rb") as f:
        data = tomllib.load(f)
    return {e["id"]: e["reason"] for e in data.get("equivalent", [])}


def sample(mutants: list[Mutant], n: Optional[int], seed: int) -> list[Mutant]:
    """A seeded sample of ``n`` mutants (all of them when n is None), in source order."""
    if n is None or n >= len(mutants):
        return list(mutants)
    keep = set(random.Random(seed).sample(range(len(mutants)), n))
    return [m for i, m in enumerate(mutants) if i in keep]


def campaign(path: str, n: Optional[int], seed: int, timeout: Optional[float], log: Any,
             progress: Callable[[dict[str, Any]], None] = lambda section: None) -> dict[str, Any]:
    """Run a sample of the mutants of one module; return its section of the report. ``progress`` gets
    the section so far after every mutant (so a campaign stopped early still leaves a report)."""
    spec = MODULES[path]
    equivalents = load_equivalents()
    everything = mutants_of(path)
    chosen = sample(everything, n, seed)
    tests = existing_tests(spec["tests"], spec.get("select"))  # fixed for the whole campaign
    outcome, base, tail = run_tests(None, spec["module"], tests, timeout=3600)
    if outcome != "survived":
        raise SystemExit(f"the tests of {path} fail unmutated; fix them first:\n{tail}")
    limit = timeout or max(30.0, 3 * base)
    print(f"{path}: {len(everything)} mutants, running {len(chosen)} (seed {seed}); unmutated tests "
          f"{base:.1f}s, timeout {limit:.0f}s", file=log, flush=True)
    for k, m in enumerate(chosen):
        if m.id in equivalents:
            m.outcome, m.reason = "equivalent", equivalents[m.id]
        else:
            m.outcome, m.seconds, _ = run_tests(m, spec["module"], tests, limit)
        print(f"  [{k + 1}/{len(chosen)}] {m.id} line {m.line}: {m.outcome} ({m.seconds:.1f}s)", file=log,
              flush=True)
        progress(_section(path, len(everything), chosen[: k + 1], seed, base))
    return _section(path, len(everything), chosen, seed, base)


def _section(path: str, total: int, done: list[Mutant], seed: int, base: float) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for m in done:
        counts[m.outcome] = counts.get(m.outcome, 0) + 1
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    judged = killed + counts.get("survived", 0)
    return {
        "module": path, "total": total, "sampled": len(done), "seed": seed, "counts": counts,
        "score": killed / judged if judged else None, "unmutated_seconds": base,
        "mutants": [m.as_dict() for m in done],
    }


def write_report(sections: list[dict[str, Any]], argv: list[str], name: str = "report") -> str:
    """``.mutation/report.json`` and ``.mutation/report.md``: scores, then every survivor and unreached
    mutant with its diff, then the equivalents with their reasons."""
    os.makedirs(WORK, exist_ok=True)
    with open(os.path.join(WORK, f"{name}.json"), "w") as f:
        json.dump({"command": argv, "modules": sections}, f, indent=1)
    lines = ["# Mutation report", "", f"`python tools/mutation.py {' '.join(argv)}`", "",
             "| module | mutants | sampled | killed | survived | not reached | equivalent | score |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in sections:
        c = s["counts"]
        score = "n/a" if s["score"] is None else f"{100 * s['score']:.1f}%"
        lines.append(f"| {s['module']} | {s['total']} | {s['sampled']} | {c.get('killed', 0) + c.get('timeout', 0)} "
                     f"| {c.get('survived', 0)} | {c.get('not reached', 0)} | {c.get('equivalent', 0)} | {score} |")
    for title, kinds in (("Survivors", ("survived", "not loaded")), ("Not reached by any test", ("not reached",)),
                         ("Equivalent", ("equivalent",))):
        rows = [m for s in sections for m in s["mutants"] if m["outcome"] in kinds]
        lines += ["", f"## {title} ({len(rows)})", ""]
        for m in rows:
            lines.append(f"### {m['id']} (line {m['line']})" + (f": {m['reason']}" if m["reason"] else ""))
            lines += ["", "```diff", m["diff"].rstrip(), "```", ""]
    path = os.path.join(WORK, f"{name}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(argv: Optional[list[str]] = None) -> None:
    """The command line (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    nightly = os.environ.get("TURNOUT_MUTATION") == "nightly"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--module", action="append", choices=sorted(MODULES),
                   help="a module to mutate (repeatable); default: " + ", ".join(DEFAULT_MODULES))
    p.add_argument("--sample", type=int, default=None if nightly else 60,
                   help="mutants per module, drawn with --seed (default 60; nightly: all)")
    p.add_argument("--all", action="store_true", help="every mutant (no sampling)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=None, help="seconds per mutant (default: 3x the unmutated run)")
    p.add_argument("--report", default="report", help="report name under .mutation/ (default: report)")
    p.add_argument("--list", action="store_true", help="list the chosen mutants and stop")
    p.add_argument("--show", metavar="ID", help="print one mutant's diff and stop")
    p.add_argument("--run", metavar="ID", help="run one mutant (all its module's tests) and print the output")
    a = p.parse_args(argv)
    modules = a.module or (sorted(MODULES) if nightly else DEFAULT_MODULES)
    n = None if a.all else a.sample
    if a.show or a.run:
        for path in modules:
            for m in mutants_of(path):
                if m.id == (a.show or a.run):
                    print(m.diff)
                    if a.run:
                        tests = existing_tests(MODULES[path]["tests"], MODULES[path].get("select"))
                        outcome, dt, tail = run_tests(m, MODULES[path]["module"], tests, 3600)
                        print(tail, f"\n{outcome} in {dt:.1f}s")
                    return
        sys.exit(f"no mutant {a.show or a.run} in {', '.join(modules)}")
    if a.list:
        for path in modules:
            for m in sample(mutants_of(path), n, a.seed):
                print(f"{m.id} line {m.line}\n{m.diff}")
        return
    sections: list[dict[str, Any]] = []
    for path in modules:
        sections.append(campaign(path, n, a.seed, a.timeout, sys.stdout,
                                 lambda part: write_report([*sections, part], argv, a.report)))
    report = write_report(sections, argv, a.report)
    for s in sections:
        score = "n/a" if s["score"] is None else f"{100 * s['score']:.1f}%"
        print(f"{s['module']}: score {score} ({s['counts']})")
    print(f"report: {os.path.relpath(report, ROOT)}")


if __name__ == "__main__":
    main()
