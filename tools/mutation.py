"""Mutation testing: break one expression of a module at a time and check that its tests notice.

    python tools/mutation.py                                  # the default modules, 60 mutants each, seed 0
    python tools/mutation.py --module reference/rules.py --sample 40 --seed 3
    python tools/mutation.py --module fast/emit.py --list     # the mutants, without running anything
    python tools/mutation.py --module reference/rules.py --show rules:1a2b3c4d   # one mutant's diff
    python tools/mutation.py --module reference/rules.py --run ID --tests tests/test_x.py::test_y
    TURNOUT_MUTATION=nightly python tools/mutation.py         # every mutant of every module
    python tools/mutation.py --module reference/rules.py --all --range 218:507   # a stretch of the full set

The mutants are mutmut's (``pip install -e ".[mutation]"``): its libcst operators (comparison and
arithmetic swaps, ``and``/``or``, constants, strings, removed arguments, ``None`` for expressions, ...)
read the ``[tool.mutmut]`` section of ``pyproject.toml``. This wrapper applies them itself, because
``mutmut run`` imports the mutated copies it writes under ``mutants/`` by their file path
(``reference.rules``) while the tests import ``turnout.reference.rules`` through the setuptools
``package-dir`` mapping, so its mutants would never be reached.

How one mutant runs: the mutated module is written under ``.mutation/`` (the work tree is never
touched), and the tests that reach the mutated function run in a fresh ``pytest`` process with this
file loaded as a plugin (``-p mutation``): it puts a finder in front of the editable install's, so
``import turnout.reference.rules`` loads the mutant. A probe call inserted at the top of the function
holding the mutation records whether any test reached it.

Which tests run: a module's test files (``MODULES`` below, fastest first, ``-x``) first run unmutated
under ``coverage``, each test in its own coverage context. That run must pass; its time sets the
per-mutant timeout (``--timeout`` overrides it), and it records which tests execute each line of the
module (kept under ``.mutation/coverage/``, keyed by the hash of every Python file of the package and
its tests and of the test list, so a campaign started again on unchanged sources skips it). A
mutant inside a function runs only the tests that executed a line of that function's body (all of the
module's tests where a line ran outside any test, e.g. in a thread that outlived its test; a
module-level mutant runs them all). A mutant whose function no test executes is *not reached* at
once: it is a gap in the tests, reported as such and counted against the score. ``--no-select`` runs
every test file of the module for every mutant instead.

Outcomes:

* killed: a test failed (or the run crashed, or ran past the timeout: ``timeout`` is a kill too);
* survived: every test passed and the mutated function ran;
* not reached: no test executes the mutated function (a gap: it counts as a survivor in the score);
* equivalent: listed in ``tools/mutation_equivalents.toml`` with a one-line reason.

Score = killed / (killed + survived + not reached), equivalents excluded (they are neither). The
report (``.mutation/report.md`` and ``.json``, untracked) gives the score per module and every survivor
and unreached mutant with its diff.

Resuming and parallel runs: each finished mutant's outcome is kept under ``.mutation/results/``,
keyed by its id and the hash of the function that holds it (of the module, for a mutant outside any
function), so a campaign stopped part way (or a nightly run repeated) skips the mutants already
decided, and a fix in one function sends only that function's mutants round again. A kill stays valid
while its function is unchanged; a survivor or a gap is run again once any file under ``tests/``
changes (a new test may kill it).
``--fresh`` ignores the kept outcomes. ``--jobs N`` runs N mutants at a time, each in its own pytest
process and its own copy of the mutated module. Ctrl-C, ``kill -INT PID`` or ``kill PID`` stops a
campaign: the queued mutants are dropped, the running pytest processes ended (each runs in its own
session, so a signal meant for the campaign does not reach it), and a run so ended records nothing.
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
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".mutation")
EQUIVALENTS = os.path.join(ROOT, "tools", "mutation_equivalents.toml")
PROBE = "__turnout_mutant_reached__"

#: The partitioned runs: the reference interpreter and the small-step system each run a program's
#: partitions over a rendezvous there, and only there do their Send and Recv rules fire (device
#: placement, the in-process cluster, the small-step system of partitions).
_PARTITION_TESTS = ["test_devices.py", "test_devices_smallstep.py", "test_mutants_devices3.py", "test_cluster.py"]
_REF_TESTS = ["test_mutants_reference.py", "test_mutants_executor.py", "test_trace_rules.py", "test_reference.py",
              "test_regressions.py", "test_raw.py", "test_session.py", "test_variables.py", "test_mutations.py",
              "test_validation.py", "test_memory_budget.py", *_PARTITION_TESTS, "test_properties.py"]
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
                "test_fast_repeated_runs.py", "test_fast_positional_stacks.py", "test_fast_host_stacks.py"]
_CASE_TESTS = ["test_mutants_fast3.py", "test_fast_case_chain.py", "test_fast_compile.py"]
# the fast backend's driver: plans, stages, the direct and fused paths, the reference fallback, buffers kept
_BACKEND_TESTS = ["test_mutants_s5.py", "test_fast_repeated_runs.py", "test_fast_memory.py", "test_fast.py",
                  "test_swap_memory.py", "test_mutants_fast.py", "test_fast_fused.py", "test_fast_trace.py",
                  "test_fast_run_overhead.py", "test_fast_lane.py", "test_fast_positional_stacks.py"]
# stacks of loops that span devices, and loops on one device run chunk by chunk inside a partitioned run
_SWAP_TESTS = ["test_mutants_s6.py", "test_mutants_s5.py", "test_devices_swap.py", "test_mutants_devices_fast.py",
               "test_devices_fast.py"]

#: the tests of the cluster's compiled partitions
_COMPILED_PARTITION_TESTS = ["test_mutants_compiled_partition.py", "test_compiled_partition.py", "test_cluster.py"]

#: Each module under test: its import name and the test files that check it (run in this order, so put
#: the fast, pointed ones first: a killed mutant stops at its first failure). ``select``, where given, is
#: a pytest ``-k`` expression narrowing those files to the tests that reach the module.
MODULES: dict[str, dict[str, Any]] = {
    # (the small-step tests that compare a budgeted run's accounting with the reference's own)
    "reference/rules.py": {"module": "turnout.reference.rules", "tests": [*_REF_TESTS, "test_mutants_smallstep5.py"]},
    "reference/executor.py": {"module": "turnout.reference.executor", "tests": _REF_TESTS},
    "reference/scheduler.py": {"module": "turnout.reference.scheduler", "tests": _REF_TESTS},
    "reference/trace.py": {"module": "turnout.reference.trace", "tests": _REF_TESTS},
    "semantics/smallstep.py": {"module": "turnout.semantics.smallstep",
                               "tests": ["test_mutants_smallstep.py", "test_mutants_smallstep2.py",
                                         "test_mutants_smallstep3.py", "test_mutants_smallstep4.py",
                                         "test_mutants_smallstep5.py",
                                         "test_trace_rules.py", "test_smallstep.py",
                                         *_PARTITION_TESTS, "test_properties.py"]},
    **{f"fast/{m}.py": {"module": f"turnout.fast.{m}",
                        "tests": ["test_fast_loop_forms.py", "test_fast_counted_nests.py", *_FAST_TESTS]}
       for m in ("emitter_core", "light_loops")},
    # (the counted stacks' bookkeeping called directly, and the bounds a nest's head can know read off
    # two-level nests' traces, seconds, ahead of the loop forms and the fast programs)
    "fast/counted_nests.py": {"module": "turnout.fast.counted_nests",
                              "tests": ["test_mutants_fast_counted_nests.py", "test_fast_loop_forms.py",
                                        "test_fast_counted_nests.py", *_FAST_TESTS]},
    # conditionals while tracing: tiny conds and cases on the fast backend against the reference (a
    # branch taken at trace time or as lax.cond, dead fetches, a case chain as one lax.switch) and the
    # module's small functions called directly first (seconds), then the loop forms and fast programs
    "fast/conds.py": {"module": "turnout.fast.conds",
                      "tests": ["test_mutants_fast_conds.py", "test_fast_case_chain.py", "test_fast_loop_forms.py",
                                "test_fast_counted_nests.py", *_FAST_TESTS]},
    # the full while loop: its laws on tiny programs (hand-built loops whose sides read the LoopCond,
    # counted and growing loops, a loop spanning two devices) and its carry check called directly first
    # (seconds), then the loop forms and the fast backend's programs
    "fast/loops.py": {"module": "turnout.fast.loops",
                      "tests": ["test_mutants_fast_loops.py", "test_fast_loop_forms.py", "test_fast_counted_nests.py",
                                *_FAST_TESTS]},
    # the emitter's top: each loop's form (light, full or unrolled) chosen on a stand-in emitter first
    # (milliseconds), then the loop forms and the unrolled loops on programs
    "fast/emit.py": {"module": "turnout.fast.emit",
                     "tests": ["test_mutants_fast_emit.py", "test_fast_loop_forms.py", "test_fast_unrolled.py"]},
    # what a trace makes of pending TensorArrays and stacks: dynamic ones and ones in host memory too
    "fast/tracing.py": {"module": "turnout.fast.tracing",
                        "tests": ["test_fast_loop_forms.py", "test_fast_counted_nests.py", *_FAST_TESTS,
                                  "test_fast_dynamic_tensor_arrays.py", "test_fast_host_stacks.py"]},
    # the control-flow wiring that the emitter and the host's conds and loops both apply
    "fast/plumbing.py": {"module": "turnout.fast.plumbing",
                         "tests": ["test_mutants_fast_plumbing.py", "test_fast_plumbing.py", "test_fast_loop_forms.py",
                                   *_FAST_TESTS, *_FAST_DEV_TESTS]},
    "fast/facts.py": {"module": "turnout.fast.facts",
                      "tests": ["test_fast_counted_nests.py", "test_fast_counted_stacks.py", "test_fast_compile.py",
                                *_FAST_TESTS]},
    "fast/outcome.py": {"module": "turnout.fast.outcome",
                        "tests": ["test_fast_outcome.py", "test_error_parity.py", "test_swap_memory.py",
                                  "test_fast_stack_pointers.py", "test_assert_data.py", "test_fast_fused.py"]},
    # (the host's side between a driven loop's calls, on stand-ins, and small driven programs, ahead
    # of the stack and swap tests)
    "fast/driven.py": {"module": "turnout.fast.driven",
                       "tests": ["test_mutants_fast_driven.py", *_STACK_TESTS, "test_devices_swap.py",
                                 "test_fast_trace.py"]},
    # the one calling convention: every compiled call's (one device, segments, SPMD, fused groups)
    **{f"fast/{m}.py": {"module": f"turnout.fast.{m}",
                        "tests": ["test_fast_call_spec.py", *_BACKEND_TESTS, *_FAST_DEV_TESTS,
                                  "test_compiled_partition.py"]}
       for m in ("call_spec", "segment")},
    "fast/ranges.py": {"module": "turnout.fast.ranges",
                       "tests": ["test_mutants_fast_ranges.py", "test_fast_ranges.py", "test_fast_counted_nests.py",
                                 "test_fast_counted_stacks.py"]},
    # which gradient stacks are counted and the index arithmetic that reads them: the search on tiny
    # hand-built programs and the arithmetic called directly (about a second) first, then the runs
    "fast/counted_stacks.py": {"module": "turnout.fast.counted_stacks",
                               "tests": ["test_mutants_fast_counted_stacks.py", "test_fast_counted_stacks.py",
                                         "test_fast_gradients.py"]},
    "fast/packing.py": {"module": "turnout.fast.packing",
                        "tests": ["test_fast_packing.py", "test_fast_run_overhead.py", "test_fast_lane.py"]},
    # the arithmetic rules' laws (a checked condition known to hold, integer division, modulo and powers
    # refused or computed as the reference does, every elementwise rule compiled with the reference's
    # values, no fallback) first (seconds), then the programs fed run-time values
    "fast/lowering.py": {"module": "turnout.fast.lowering",
                         "tests": ["test_mutants_fast_lowering.py", "test_fast_runtime_values.py",
                                   "test_error_parity.py", *_FAST_TESTS]},
    "fast/lower_structure.py": {"module": "turnout.fast.lower_structure",
                                "tests": ["test_fast_runtime_values.py", "test_error_parity.py", *_FAST_TESTS]},
    # what every rule shares (the feeds behind a shape argument, the refusals, the guards): its laws
    # called directly on stand-in nodes and contexts first (about a second), then the lowered programs
    "fast/lowering_base.py": {"module": "turnout.fast.lowering_base",
                              "tests": ["test_mutants_fast_lowering_base.py", "test_fast_runtime_values.py",
                                        "test_error_parity.py", *_FAST_TESTS]},
    # one node lowered (fold, refuse, lower): its laws called directly with a stand-in trace first
    "fast/lower_node.py": {"module": "turnout.fast.lower_node",
                           "tests": ["test_mutants_fast_lower_node.py", "test_error_parity.py", "test_recompute.py",
                                     *_FAST_TESTS]},
    # the random draws' lowering rule (``decorated``: ``@lowering_rule`` registers it): its laws on
    # tiny programs run on the fast backend against the reference, and called directly, first
    "fast/lower_random.py": {"module": "turnout.fast.lower_random",
                             "tests": ["test_mutants_fast_lower_random.py", "test_random.py", "test_tf_random.py"],
                             "decorated": True},
    # the state's lowering rules (``decorated``): Variables, gradient stacks (held, counted, positional)
    # and checkpoint slots; their laws called directly with a stand-in context first, then programs on
    # the fast backend (Variables, counted and held stacks, learnt slot counts, the stacks' own files)
    "fast/lower_state.py": {"module": "turnout.fast.lower_state",
                            "tests": ["test_mutants_fast_lower_state.py", "test_variables.py",
                                      "test_fast_counted_stacks.py", "test_fast_held.py", "test_slot_sizes.py",
                                      *_STACK_TESTS],
                            "decorated": True},
    # the TensorArray rules' helpers (indices, growth, declared shapes, dynamic stacks and sums): their
    # laws called directly with a stand-in context (about a second) first, then the lowered programs
    "fast/lower_tensor_arrays.py": {"module": "turnout.fast.lower_tensor_arrays",
                                    "tests": ["test_mutants_fast_lower_tensor_arrays.py",
                                              "test_fast_dynamic_tensor_arrays.py", "test_fast_runtime_values.py",
                                              "test_error_parity.py", *_FAST_TESTS]},
    # the window ops' lowering rules (``decorated``, as the random draws'): their laws on one program
    # run on the fast backend against the reference, first
    "fast/lower_windows.py": {"module": "turnout.fast.lower_windows",
                              "tests": ["test_mutants_fast_lower_windows.py", "test_windows.py"], "decorated": True},
    "fast/functionalize.py": {"module": "turnout.fast.functionalize", "tests": _FAST_TESTS},
    # the run-time values that are not plain arrays (DEAD, TensorArrays, stacks, handles, static values):
    # their laws called directly first (milliseconds), then the programs that make and fetch them
    "fast/values.py": {"module": "turnout.fast.values",
                       "tests": ["test_mutants_fast_values.py", "test_fast_dynamic_tensor_arrays.py",
                                 "test_fast_tensor_array_inplace.py"]},
    # what both compiled backends do around their runs (signature, fallback, specialisation, sized
    # retry): its laws on a stand-in backend first (about a second), then the runs that specialise and cut
    "fast/shell.py": {"module": "turnout.fast.shell",
                      "tests": ["test_mutants_fast_shell.py", "test_fast_dynamic_shapes.py"]},
    # the region tree's own functions (keys, a cond's outputs, walks, loop numbers and heights, nesting):
    # their laws on hand-built regions first (milliseconds), then loops, nests and case chains compiled
    "fast/regions.py": {"module": "turnout.fast.regions",
                        "tests": ["test_mutants_fast_regions.py", "test_fast_loop_forms.py",
                                  "test_fast_nested_compile.py", "test_fast_case_chain.py"]},
    "fast/chunk_store.py": {"module": "turnout.fast.chunk_store", "tests": _STACK_TESTS},
    # a stack as a value (keys, buffers, bytes, memory kinds, push and pop, the drivers' scalars and
    # zeros): its laws called directly on stacks of a few entries first (seconds), then the stacks' runs
    "fast/stack_values.py": {"module": "turnout.fast.stack_values",
                             "tests": ["test_mutants_fast_stack_values.py", *_STACK_TESTS]},
    # the chunked loop and its report: chunk_loop called directly on a body that moves pointers, the
    # report's decisions on hand-built reports, first (seconds), then the stacks' runs
    "fast/stacks.py": {"module": "turnout.fast.stacks", "tests": ["test_mutants_fast_stacks.py", *_STACK_TESTS]},
    # (the chain's laws on hand-built regions and a stand-in emitter, ahead of the compiled cases)
    "fast/case_chain.py": {"module": "turnout.fast.case_chain",
                           "tests": ["test_mutants_fast_case_chain.py", *_CASE_TESTS]},
    # loops unrolled while tracing, and runs specialised on values or cut at computed shapes
    # (the unrolling's laws on stand-in emitters and small programs, milliseconds, ahead of the runs)
    "fast/unrolled.py": {"module": "turnout.fast.unrolled",
                         "tests": ["test_mutants_fast_unrolled.py", "test_fast_unrolled.py",
                                   "test_fast_dynamic_shapes.py", "test_mutants_fast2.py", "test_exports.py"]},
    # (the specialising loop's laws on stand-in compiles and unrun graphs, milliseconds, ahead of the runs)
    "fast/specialise.py": {"module": "turnout.fast.specialise",
                           "tests": ["test_mutants_fast_specialise.py", "test_fast_dynamic_tensor_arrays.py",
                                     "test_fast_dynamic_shapes.py", "test_fast_unrolled.py", "test_exports.py"]},
    # checkpoint slots sized to the runs' trip counts
    "turnout/slot_sizes.py": {"module": "turnout.slot_sizes",
                              "tests": ["test_slot_sizes.py", "test_recompute.py", "test_exports.py"]},
    # (the laws of placement on graphs built node by node, ahead of the partitioned runs)
    # (``decorated``: ``place``, under ``@checked``, is mutated too)
    "devices/placement.py": {"module": "turnout.devices.placement",
                             "tests": ["test_mutants_devices_placement.py", *_DEV_TESTS], "select": _DEV_SELECT,
                             "decorated": True},
    # (device names parsed and printed, on strings alone, ahead of the placement tests that read them)
    "devices/names.py": {"module": "turnout.devices.names",
                         "tests": ["test_mutants_devices_names.py", "test_devices.py",
                                   "test_mutants_devices_placement.py"]},
    "devices/partition.py": {"module": "turnout.devices.partition", "tests": _DEV_TESTS, "select": _DEV_SELECT},
    "devices/executor.py": {"module": "turnout.devices.executor", "tests": _DEV_TESTS, "select": _DEV_SELECT},
    # (the rendezvous's laws called step by step with stand-in owners, ahead of the partitioned runs)
    "devices/rendezvous.py": {"module": "turnout.devices.rendezvous",
                              "tests": ["test_mutants_devices_rendezvous.py", *_DEV_TESTS], "select": _DEV_SELECT},
    # (the system's laws on two-op programs, milliseconds, ahead of the explorations of conds and loops)
    "devices/smallstep.py": {"module": "turnout.devices.smallstep",
                             "tests": ["test_mutants_devices_smallstep.py", "test_mutants_devices3.py",
                                       "test_devices_smallstep.py", "test_mutants_s5.py"]},
    # (specs read and refused word for word, milliseconds, ahead of the cluster runs)
    "devices/cluster.py": {"module": "turnout.devices.cluster",
                           "tests": ["test_mutants_devices_cluster.py", *_CLUSTER_TESTS]},
    # (the clock, the offsets and the merge on hand-written tracks, milliseconds, ahead of the cluster runs)
    "devices/cluster_trace.py": {"module": "turnout.devices.cluster_trace",
                                 "tests": ["test_mutants_devices_cluster_trace.py", *_CLUSTER_TESTS]},
    # (the table of executor kinds called directly on a hand-built partition, ahead of the cluster runs)
    "devices/partition_executors.py": {"module": "turnout.devices.partition_executors",
                                       "tests": ["test_mutants_devices_partition_executors.py", *_CLUSTER_TESTS]},
    "devices/task_runner.py": {"module": "turnout.devices.task_runner", "tests": _CLUSTER_TESTS},
    "devices/ray_runtime.py": {"module": "turnout.devices.ray_runtime", "tests": _RAY_TESTS},
    "devices/fast_executor.py": {"module": "turnout.devices.fast_executor", "tests": _FAST_DEV_TESTS},
    # (each module's laws called directly, milliseconds, ahead of the runs on forced devices)
    "devices/segments.py": {"module": "turnout.devices.segments",
                            "tests": ["test_mutants_devices_segments.py", *_FAST_DEV_TESTS]},
    "devices/jax_device.py": {"module": "turnout.devices.jax_device",
                              "tests": ["test_mutants_devices_jax_device.py", *_FAST_DEV_TESTS]},
    # (the start, stop and spec on stand-ins for Ray and psutil, milliseconds, then one real cluster
    # whose sockets are checked: ``test_ray.py``'s other tests reach nothing here)
    "devices/local_cluster.py": {"module": "turnout.devices.local_cluster",
                                 "tests": ["test_mutants_devices_local_cluster.py", "test_ray.py"],
                                 "select": "test_mutants_devices_local_cluster or loopback"},
    "devices/trace.py": {"module": "turnout.devices.trace",
                         "tests": ["test_mutants_devices_trace.py", *_DEV_TESTS], "select": _DEV_SELECT},
    # (the environment's laws called directly, milliseconds, ahead of the runs on forced devices)
    "fast/host_env.py": {"module": "turnout.fast.host_env",
                         "tests": ["test_mutants_fast_host_env.py", "test_fast_plumbing.py", *_FAST_DEV_TESTS]},
    # (the host's conds and loops: tiny programs on the partitioned fast backend without fallback,
    # against the reference, and the host's methods called again on a run's own conds and loops,
    # ahead of the runs on forced devices)
    "fast/host_control.py": {"module": "turnout.fast.host_control",
                             "tests": ["test_mutants_fast_host_control.py", "test_fast_plumbing.py",
                                       *_FAST_DEV_TESTS]},
    **{f"devices/{m}.py": {"module": f"turnout.devices.{m}",
                           "tests": [*first, *_FAST_DEV_TESTS, "test_fast_trace.py", "test_devices_swap.py",
                                     "test_routes.py", "test_slot_sizes.py"]}
       # (the one-device tier on a stand-in backend, the per-device tiers' run on two-op programs,
       # milliseconds, ahead of the runs on forced devices)
       for m, first in (("plan_run", ["test_mutants_devices_plan_run.py"]),
                        ("one_device", ["test_mutants_devices_one_device.py"]))},
    "fast/timeline.py": {"module": "turnout.fast.timeline",
                         "tests": ["test_fast_trace.py", "test_devices_fast.py", "test_mutants_s5.py"]},
    "devices/spmd.py": {"module": "turnout.devices.spmd", "tests": _FAST_DEV_TESTS},
    "devices/spmd_emitter.py": {"module": "turnout.devices.spmd_emitter", "tests": _FAST_DEV_TESTS},
    # (the host's pointer bookkeeping, on stand-in stores, ahead of the runs on forced devices)
    "fast/device_stacks.py": {"module": "turnout.fast.device_stacks",
                              "tests": ["test_mutants_fast_device_stacks.py", *_SWAP_TESTS]},
    # (the runner's laws on a stand-in plan and store first, then the runs on forced devices)
    "fast/runner.py": {"module": "turnout.fast.runner",
                       "tests": ["test_mutants_fast_runner.py", *_SWAP_TESTS, "test_fast_fused.py", "test_routes.py"]},
    "devices/compiled_partition.py": {"module": "turnout.devices.compiled_partition",
                                      "tests": _COMPILED_PARTITION_TESTS},
    # (hand-built groups compiled and called directly, ahead of the partitions that fuse them)
    "devices/fused_group.py": {"module": "turnout.devices.fused_group",
                               "tests": ["test_mutants_devices_fused_group.py", *_COMPILED_PARTITION_TESTS]},
    "fast/backend.py": {"module": "turnout.fast.backend", "tests": _BACKEND_TESTS},
    "fast/plan.py": {"module": "turnout.fast.plan", "tests": _BACKEND_TESTS},
    # (the cut's laws on small programs, milliseconds, ahead of the runs that reach it)
    "fast/cut.py": {"module": "turnout.fast.cut",
                    "tests": list(dict.fromkeys(["test_mutants_fast_cut.py", *_SWAP_TESTS, *_BACKEND_TESTS,
                                                 "test_fast_held.py"]))},
    # (the attempt's traced spans, its out-of-memory and its climb past a rung a counted stack outgrows
    # first, then the backend's runs, the XLA compilations a first run makes, and what a refusal explains)
    "fast/fused_attempts.py": {"module": "turnout.fast.fused_attempts",
                               "tests": ["test_mutants_fast_fused_attempts.py", "test_fast_counted_stacks.py",
                                         *_BACKEND_TESTS, "test_fast_no_hidden_recompile.py", "test_explain.py"]},
    # (a run's first and last steps on a stand-in backend, milliseconds, ahead of the backend's runs)
    "fast/run_state.py": {"module": "turnout.fast.run_state",
                          "tests": ["test_mutants_fast_run_state.py", *_BACKEND_TESTS]},
    # (the staged path's laws on two small programs, seconds, ahead of the backend's runs)
    "fast/staged_stages.py": {"module": "turnout.fast.staged_stages",
                              "tests": ["test_mutants_fast_staged_stages.py", *_BACKEND_TESTS]},
    # the stacks as sizes: their laws on the pure functions first (milliseconds), then the runs
    "fast/stack_sizes.py": {"module": "turnout.fast.stack_sizes",
                            "tests": ["test_mutants_fast_stack_sizes.py", *_BACKEND_TESTS]},
    # (and a run's budget over the checkpoint slots of a loop that recomputes, a Direct plan's one check)
    "fast/direct_call.py": {"module": "turnout.fast.direct_call",
                            "tests": [*_BACKEND_TESTS, "test_recompute.py", "test_fast_variable_store.py"]},
    "fast/repeat.py": {"module": "turnout.fast.repeat", "tests": ["test_mutants_fast_repeat.py", *_BACKEND_TESTS]},
    "fast/guards.py": {"module": "turnout.fast.guards",
                       "tests": ["test_fast_guards.py", *_BACKEND_TESTS, "test_session.py"]},
    # what every plan of a cut program is (the one-device plan's and the partitioned executor's): its
    # laws on a stand-in backend and small programs first, then the runs of both backends
    "fast/step_plan.py": {"module": "turnout.fast.step_plan",
                          "tests": ["test_mutants_fast_step_plan.py", *_BACKEND_TESTS, *_FAST_DEV_TESTS]},
    # the keys of the run-time state and the stack a handle comes from: their laws on graphs built node
    # by node first (milliseconds), then the runs that name stacks by them
    "fast/state_keys.py": {"module": "turnout.fast.state_keys",
                           "tests": ["test_mutants_fast_state_keys.py", "test_mutants_fast_cut.py",
                                     "test_mutants_fast_stack_sizes.py", *_BACKEND_TESTS]},
    # (``decorated``: ``accepted``, under ``functools.cache``, is mutated too)
    "fast/xla_options.py": {"module": "turnout.fast.xla_options", "tests": ["test_fast_xla_options.py"],
                            "decorated": True},
    # ``to_jax`` (under ``@checked``, so ``decorated``): its laws on small programs first
    "fast/api.py": {"module": "turnout.fast.api",
                    "tests": ["test_mutants_fast_api.py", "test_fast.py", "test_mutants_fast2.py"],
                    "select": "test_mutants_fast_api or to_jax or test_exports", "decorated": True},
    # (a call on the deep-stack thread: its limits, stack size and errors on plain functions, in
    # milliseconds, ahead of the nested programs that take it)
    "fast/deep.py": {"module": "turnout.fast.deep",
                     "tests": ["test_mutants_fast_deep.py", "test_fast_compile.py", "test_fast_lane.py"],
                     "select": "test_mutants_fast_deep or nested_conds_run or deeply_nested or thread_a_run"
                               " or test_exports"},
    # one slot of a buffer at an index in range (the TensorArrays' and stacks' reads and writes): its
    # laws on small buffers first, then the programs that index
    "fast/indexing.py": {"module": "turnout.fast.indexing",
                         "tests": ["test_mutants_fast_indexing.py", "test_fast_dynamic_tensor_arrays.py",
                                   "test_fast_counted_stacks.py", "test_swap_memory.py"]},
    # the schedule a run of the one-device backend would take, read from its plan (the words of each
    # route and cut step on stand-in plans and cuts first, milliseconds, then the sessions' schedules)
    "fast/explain.py": {"module": "turnout.fast.explain",
                        "tests": ["test_mutants_fast_explain.py", "test_explain.py", "test_fast_host_stacks.py"]},
    # the gradient builder's second order (gradient stacks and their gates) and the recomputing gradient
    "turnout/gradients/core.py": {"module": "turnout.gradients.core",
                                  "tests": ["test_gradients_second_order.py", "test_gradients_loops.py",
                                            "test_gradients.py", "test_recompute.py"]},
    "turnout/gradients/recompute.py": {"module": "turnout.gradients.recompute",
                                       "tests": ["test_recompute.py", "test_slot_sizes.py",
                                                 "test_gradients_second_order.py"]},
    # a gradient's memory budget, divided among the loops it reverses
    "turnout/gradients/budgets.py": {"module": "turnout.gradients.budgets",
                                     "tests": ["test_gradient_budget.py"]},
    "turnout/store.py": {"module": "turnout.store",
                         "tests": ["test_error_parity.py", "test_fast_variable_store.py", "test_checkpoint.py",
                                   "test_bad_inputs.py"]},
    "fast/variable_store.py": {"module": "turnout.fast.variable_store",
                               "tests": ["test_fast_variable_store.py", "test_fast_lane.py",
                                         "test_fast_run_overhead.py"]},
    # the lane's helpers called directly with stand-ins (64-bit feeds, the C++ entry point, the
    # ahead-of-time executable, dead fetches, the Variables' write-back, the feed signature, what a lane's
    # text is written from) and three tiny repeated runs; then the repeated runs that make and take lanes
    "fast/lane.py": {"module": "turnout.fast.lane",
                     "tests": ["test_mutants_fast_lane.py", "test_fast_lane.py", "test_fast_run_overhead.py",
                               "test_session.py",
                               "test_error_parity.py", "test_fast_hot_properties.py", "test_fast_repeated_runs.py",
                               "test_fast_positional_stacks.py", "test_fast_memory.py"]},
    "fast/held.py": {"module": "turnout.fast.held",
                     "tests": ["test_mutants_fast_held.py", "test_fast_held.py", "test_fast_memory.py",
                               "test_fast_gradients.py"]},
    # (the checks before a fused lane is made, on stand-ins, milliseconds, ahead of the training steps)
    # the one generator of both lanes' source text: the call spec's laws first, then the lanes it writes
    "fast/lane_text.py": {"module": "turnout.fast.lane_text",
                          "tests": ["test_mutants_fast_lane_text.py", "test_fast_call_spec.py", "test_fast_lane.py",
                                    "test_mutants_fast_fused_lane.py",
                                    "test_fast_run_overhead.py", "test_fast_repeated_runs.py",
                                    "test_fast_positional_stacks.py", "test_error_parity.py"]},
    "fast/fused_lane.py": {"module": "turnout.fast.fused_lane",
                           "tests": ["test_mutants_fast_fused_lane.py", "test_fast_lane.py",
                                     "test_fast_run_overhead.py", "test_session.py", "test_error_parity.py",
                                     "test_fast_hot_properties.py", "test_fast_repeated_runs.py",
                                     "test_fast_positional_stacks.py", "test_fast_memory.py"]},
}
#: run for every module after its own tests: each module's ``__all__`` names only what it defines (a
#: module-level mutant runs every test of its module; a function's, only those that reach it)
for _spec in MODULES.values():
    _spec["tests"] = [*_spec["tests"], "test_exports.py"]
MODULE_PATHS = {spec["module"]: path for path, spec in MODULES.items()}  # import name -> file
DEFAULT_MODULES = ["reference/rules.py", "reference/executor.py", "semantics/smallstep.py"]
#: The oracle core: what every other executor is judged by (``docs/checking.rst`` gives their scores).
ORACLE_MODULES = ["reference/rules.py", "reference/executor.py", "reference/scheduler.py", "semantics/smallstep.py"]


@dataclass
class Mutant:
    """One mutation of one module: a stable id (function + hash of the change), the line, the diff, and
    the lines of the body of the function holding it (``span``, first and last; None at module level).
    ``context``: a hash of the source of the function holding it (of the whole module at module level),
    which its kept outcome must match (``Results``)."""

    path: str
    id: str
    line: int
    function: str
    make: _Lazy = field(repr=False)
    span: Optional[tuple[int, int]] = None
    outcome: str = ""
    seconds: float = 0.0
    reason: str = ""
    tests: int = 0  # how many tests it ran (0: every test of its module, or none when not reached)
    context: str = ""

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
                "tests": self.tests, "diff": self.diff}


class _Lazy:
    """Renders a mutant's source and diff only when asked (a module has hundreds of mutants and a
    campaign runs a sample of them)."""

    def __init__(self, src: str, path: str, module: Any, m: Any, fn: Any, fm: Any) -> None:
        self.src, self.path, self.module, self.m, self.fn, self.fm = src, path, module, m, fn, fm
        self._diff: Optional[str] = None

    def diff(self) -> str:
        """The mutant's diff, rendered once: the report is written again after every mutant and shows
        every finished one's diff, and rendering one (a libcst replacement of the whole module) costs
        seconds, which made a resumed campaign spend minutes on mutants it had already decided."""
        if self._diff is None:
            plain = self.fm.deep_replace(self.module, self.m.original_node, self.m.mutated_node).code
            self._diff = "".join(difflib.unified_diff(self.src.splitlines(True), plain.splitlines(True), self.path,
                                                      self.path, n=0))
        return self._diff

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
        with _decorated_too(fm, MODULES.get(path, {}).get("decorated", False)):
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
        span = None
        context = hashlib.sha1((module.code_for_node(fn) if fn is not None else src).encode()).hexdigest()[:12]
        if fn is not None:  # the body, not the def line (which runs when the module loads)
            body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else [fn.body]
            span = (positions[body[0]].start.line, positions[fn].end.line)
        out.append(Mutant(path, mid, positions[m.original_node].start.line, fname,
                          _Lazy(src, path, module, m, fn, fm), span, context=context))
    return out


class _decorated_too:
    """While open (and ``on``), mutmut's visitor mutates the bodies of decorated functions too.

    Why: mutmut skips every decorated function but for ``staticmethod`` and ``classmethod``, because
    its trampolines would copy the function with its decorators; this wrapper applies each mutant
    itself, so that reason does not hold here. The decorators themselves stay unmutated (mutmut skips
    a ``Decorator`` node on its own: they run when the module loads). Opt-in per module
    (``"decorated": True`` in ``MODULES``), so that the mutant sets of the other modules, and the
    scores recorded for them, stay what they were."""

    def __init__(self, fm: Any, on: bool) -> None:
        self.visitor, self.on = fm.MutationVisitor, on
        self.plain = self.visitor._skip_node_and_children

    def __enter__(self) -> None:
        if not self.on:
            return
        import libcst as cst
        from libcst.metadata import PositionProvider

        plain = self.plain

        def skip(visitor: Any, node: Any) -> bool:
            if isinstance(node, cst.FunctionDef) and node.decorators:
                # every other reason still applies (a pragma on the def line, a name never mutated)
                pos = visitor.get_metadata(PositionProvider, node, None)
                if pos is not None and pos.start.line in visitor._ignored_node_lines:
                    return bool(plain(visitor, node))
                return bool(plain(visitor, node.with_changes(decorators=[])))
            return bool(plain(visitor, node))

        self.visitor._skip_node_and_children = skip

    def __exit__(self, *exc: Any) -> None:
        self.visitor._skip_node_and_children = self.plain


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


#: pytest's exit codes that say no test ran (a test path not found, nothing collected): a campaign
#: stops there, where it would otherwise count every mutant killed
_NOT_RUN = {4: "a usage error, such as a test path not found", 5: "no tests collected"}


def _pytest_cmd(files: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "mutation", *files]


def _scratch(slot: str) -> str:
    """The files of one running mutant (one per campaign process and job): its module, status, selection."""
    return os.path.join(WORK, f"run-{os.getpid()}-{slot}")


def _env(mutant: Optional[Mutant], module: str, slot: str, select: Optional[list[str]],
         cover: Optional[str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "tools"), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TURNOUT_HYPOTHESIS_PROFILE", "ci")
    here = _scratch(slot)
    os.makedirs(here, exist_ok=True)
    env["TURNOUT_MUTANT_STATUS"] = os.path.join(here, "status.json")
    for k in ("TURNOUT_MUTANT_MODULE", "TURNOUT_MUTANT_FILE", "TURNOUT_MUTANT_SELECT", "TURNOUT_MUTANT_COVER"):
        env.pop(k, None)
    if mutant is not None:
        path = os.path.join(here, mutant.path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(mutant.source)
        env["TURNOUT_MUTANT_MODULE"] = module
        env["TURNOUT_MUTANT_FILE"] = path
    if select is not None:
        env["TURNOUT_MUTANT_SELECT"] = os.path.join(here, "select.txt")
        with open(env["TURNOUT_MUTANT_SELECT"], "w") as f:
            f.write("\n".join(select) + "\n")
    if cover is not None:
        env["TURNOUT_MUTANT_COVER"] = cover
        env["TURNOUT_MUTANT_SOURCE"] = os.path.join(ROOT, MODULE_PATHS.get(module, module))
    return env


def run_tests(mutant: Optional[Mutant], module: str, tests: list[str], timeout: float, slot: str = "0",
              select: Optional[list[str]] = None, cover: Optional[str] = None) -> tuple[str, float, str]:
    """Run ``tests`` against ``mutant`` (None: unmutated). Returns (outcome, seconds, output tail).

    ``select``: only these tests (pytest node ids; ``FILE::*`` for every test of a file), in the order
    of ``tests``. ``cover``: record which test runs each line of the module, into that coverage file.
    ``slot`` names this run's scratch files, so that runs of one campaign can go side by side."""
    os.makedirs(WORK, exist_ok=True)
    shutil.rmtree(_scratch(slot), ignore_errors=True)
    env = _env(mutant, module, slot, select, cover)
    status = env["TURNOUT_MUTANT_STATUS"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(_pytest_cmd(tests), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    with _LOCK:
        _RUNNING.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        _cleanup(slot)
        return "timeout", time.perf_counter() - t0, ""
    except BaseException:
        _end(proc)
        _cleanup(slot)
        raise
    finally:
        with _LOCK:
            _RUNNING.discard(proc)
    if _STOP.is_set():  # ended by a stopping campaign: not the mutant's outcome
        _cleanup(slot)
        raise _Stopped()
    dt = time.perf_counter() - t0
    st = json.load(open(status)) if os.path.exists(status) else {}
    _cleanup(slot)
    if proc.returncode in _NOT_RUN:  # the tests never ran: no outcome of the mutant's
        raise SystemExit(f"pytest could not run {' '.join(tests)} ({_NOT_RUN[proc.returncode]}):\n{out[-3000:]}")
    if proc.returncode != 0:
        return "killed", dt, out[-3000:]
    if mutant is not None and not st.get("loaded"):
        return "not loaded", dt, out[-3000:]  # a broken hook, not a surviving mutant
    if mutant is not None and not st.get("reached") and mutant.function != "<module>":
        return "not reached", dt, out[-3000:]  # (a module-level mutant is reached when the module loads)
    return "survived", dt, out[-3000:]


class _Stopped(Exception):
    """A run ended because its campaign is stopping (Ctrl-C, SIGTERM): it decides nothing."""


#: The pytest processes running now (each in its own session, so a Ctrl-C meant for the campaign does
#: not reach them) and the flag a stopping campaign sets, so that no ended run is recorded as a kill.
_RUNNING: set[subprocess.Popen[str]] = set()
_LOCK = threading.Lock()
_STOP = threading.Event()


def _end(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _end_running() -> None:
    """Kill every running test process (a stopping campaign leaves none behind)."""
    with _LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _cleanup(slot: str) -> None:
    """Remove this run's mutated module, status and selection files (reports stay)."""
    shutil.rmtree(_scratch(slot), ignore_errors=True)


# ---- choosing the tests of a mutant by coverage ---------------------------------------------------
def lines_run_by(cover: str, source: str) -> dict[int, set[str]]:
    """Line -> the tests that ran it, read from the coverage file of an unmutated run (``run_tests``
    with ``cover``). A line run outside any test (at import, at collection, in a thread that outlived
    its test) has the context ``""``."""
    from coverage import CoverageData

    data = CoverageData(cover)
    data.read()
    by_line = data.contexts_by_lineno(os.path.abspath(source))
    return {int(line): set(ctxs) for line, ctxs in by_line.items()}


def tests_reaching(m: Mutant, by_line: dict[int, set[str]]) -> Optional[list[str]]:
    """The tests to run against ``m``: those that ran a line of the body of its function (an empty list:
    none did, the mutant is not reached). None means every test of the module: a module-level mutant,
    or a function whose lines ran outside any test (so which test needs it is not known)."""
    if m.span is None:
        return None
    found: set[str] = set()
    for line in range(m.span[0], m.span[1] + 1):
        found |= by_line.get(line, set())
    if "" in found:
        return None
    return sorted(found)


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
_COVER: list[Any] = []  # the Coverage object of a recording run


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
    cover, source = os.environ.get("TURNOUT_MUTANT_COVER"), os.environ.get("TURNOUT_MUTANT_SOURCE")
    if cover and source:
        import coverage

        cov = coverage.Coverage(data_file=cover, include=[source], config_file=False)
        cov.start()
        _COVER.append(cov)
    name, path = os.environ.get("TURNOUT_MUTANT_MODULE"), os.environ.get("TURNOUT_MUTANT_FILE")
    if not name or not path:
        return
    import builtins

    setattr(builtins, PROBE, _reached)
    if name in sys.modules:
        raise RuntimeError(f"{name} was imported before the mutation hook was installed")
    sys.meta_path.insert(0, _MutantFinder(name, path))


def _switch(context: str) -> None:
    if _COVER:
        _COVER[0].switch_context(context)


if os.environ.get("TURNOUT_MUTANT_STATUS") and __name__ != "__main__":
    import pytest

    _install_hook()

    # What a recording run attributes to a test: its call phase to the test itself; its setup and
    # teardown, which may build a fixture that later tests of the file share, to the whole file.
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(item: Any) -> None:
        _switch(item.nodeid.split("::")[0] + "::*")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(item: Any) -> None:
        _switch(item.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(item: Any) -> None:
        _switch(item.nodeid.split("::")[0] + "::*")

    def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
        path = os.environ.get("TURNOUT_MUTANT_SELECT")
        if not path:
            return
        wanted = set(open(path).read().split("\n")) - {""}
        keep = [i for i in items if i.nodeid in wanted or i.nodeid.split("::")[0] + "::*" in wanted]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep

    def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
        if _COVER:
            _COVER[0].stop()
            _COVER[0].save()


# ---- campaigns and reports ------------------------------------------------------------------------
def load_equivalents() -> dict[str, str]:
    """Mutant id -> the one-line reason it is equivalent (``tools/mutation_equivalents.toml``)."""
    if not os.path.exists(EQUIVALENTS):
        return {}
    with open(EQUIVALENTS, "rb") as f:
        data = tomllib.load(f)
    return {e["id"]: e["reason"] for e in data.get("equivalent", [])}


def sample(mutants: list[Mutant], n: Optional[int], seed: int,
           span: Optional[tuple[int, int]] = None) -> list[Mutant]:
    """A seeded sample of ``n`` mutants (all of them when n is None), in source order. ``span`` (start,
    end) keeps only the mutants at those places of the source order first, so that a full set too long
    for one sitting can be run a stretch at a time (``--range``)."""
    if span is not None:
        mutants = mutants[span[0]:span[1]]
    if n is None or n >= len(mutants):
        return list(mutants)
    keep = set(random.Random(seed).sample(range(len(mutants)), n))
    return [m for i, m in enumerate(mutants) if i in keep]


def _digest(paths: list[str]) -> str:
    h = hashlib.sha1()
    for p in sorted(paths):
        h.update(p.encode())
        with open(os.path.join(ROOT, p), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def tests_digest() -> str:
    """A hash of every file under ``tests/``: a kept survivor or gap is run again when it changes."""
    top = os.path.join(ROOT, "tests")
    return _digest([os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(top)
                    for f in fs if f.endswith(".py")])


class Results:
    """Finished mutants' outcomes under ``.mutation/results/``, one file per module, each outcome with
    the hash of the function holding its mutant (``Mutant.context``): a rerun skips what is decided.
    Kills are kept while their function is unchanged; survivors and gaps only while ``tests/`` is
    unchanged too. Why per function, not per module: a full set takes hours, and a fix to one
    function (a bug the campaign found) would otherwise send every mutant of the module round again."""

    KEPT = ("killed", "timeout")

    def __init__(self, path: str, fresh: bool = False) -> None:
        self.tests = tests_digest()
        stem = path.replace("/", "_").removesuffix(".py")
        self.file = os.path.join(WORK, "results", f"{stem}.jsonl")
        #: (mutant id, context) -> its record
        self.done: dict[tuple[str, str], dict[str, Any]] = {}
        if not fresh and os.path.exists(self.file):
            for line in open(self.file):
                rec = json.loads(line)
                if rec["outcome"] in self.KEPT or rec["tests"] == self.tests:
                    self.done[rec["id"], rec["context"]] = rec

    def get(self, m: Mutant) -> Optional[dict[str, Any]]:
        """``m``'s kept outcome, if its function is as it was when the outcome was decided."""
        return self.done.get((m.id, m.context))

    def put(self, m: Mutant) -> None:
        rec = {"id": m.id, "context": m.context, "outcome": m.outcome, "seconds": round(m.seconds, 2),
               "ran": m.tests, "tests": self.tests}
        self.done[m.id, m.context] = rec
        os.makedirs(os.path.dirname(self.file), exist_ok=True)
        with open(self.file, "a") as f:  # one line per mutant: a run killed midway loses at most one
            f.write(json.dumps(rec) + "\n")


def source_digest(tests: list[str]) -> str:
    """A hash of every Python file of the package and its tests, and of a module's test list: what
    decides whether its unmutated run still passes and which test runs which line."""
    files = [os.path.relpath(os.path.join(d, f), ROOT) for top in ("turnout", "reference", "semantics", "fast",
             "devices", "tests") for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")]
    return hashlib.sha1((_digest(files) + "\n".join(tests)).encode()).hexdigest()[:12]


def baseline(path: str, tests: list[str], select: bool) -> tuple[float, Optional[dict[int, set[str]]]]:
    """The unmutated run of ``path``'s tests: its seconds and, where tests are selected by coverage,
    which tests run each line (``lines_run_by``). It must pass. Kept under ``.mutation/coverage/``,
    keyed by ``source_digest``, so a campaign started again on unchanged sources skips it."""
    stem = path.replace("/", "_").removesuffix(".py")
    kept = os.path.join(WORK, "coverage", f"{stem}-{source_digest(tests)}{'' if select else '-all'}.json")
    if os.path.exists(kept):
        with open(kept) as f:
            rec = json.load(f)
        lines = rec["by_line"]
        return rec["base"], None if lines is None else {int(k): set(v) for k, v in lines.items()}
    cover = os.path.join(WORK, f"coverage-{stem}-{os.getpid()}") if select else None
    outcome, base, tail = run_tests(None, MODULES[path]["module"], tests, timeout=3600, cover=cover)
    if outcome != "survived":
        raise SystemExit(f"the tests of {path} fail unmutated; fix them first:\n{tail}")
    by_line = lines_run_by(cover, path) if cover else None
    if cover and os.path.exists(cover):
        os.remove(cover)
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    with open(kept, "w") as f:
        json.dump({"base": base, "by_line": None if by_line is None else
                   {str(k): sorted(v) for k, v in by_line.items()}}, f)
    return base, by_line


def campaign(path: str, n: Optional[int], seed: int, timeout: Optional[float], log: Any,
             progress: Callable[[dict[str, Any]], object] = lambda section: None, jobs: int = 1,
             select: bool = True, fresh: bool = False, span: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """Run a sample of the mutants of one module; return its section of the report. ``progress`` gets
    the section so far after every mutant (so a campaign stopped early still leaves a report)."""
    from concurrent.futures import ThreadPoolExecutor

    spec = MODULES[path]
    equivalents = load_equivalents()
    everything = mutants_of(path)
    chosen = sample(everything, n, seed, span)
    tests = existing_tests(spec["tests"], spec.get("select"))  # fixed for the whole campaign
    base, by_line = baseline(path, tests, select)
    limit = timeout or max(30.0, 3 * base)
    results = Results(path, fresh)
    print(f"{path}: {len(everything)} mutants, running {len(chosen)} (seed {seed}); unmutated tests "
          f"{base:.1f}s, timeout {limit:.0f}s; {len(results.done)} outcomes kept from earlier runs", file=log,
          flush=True)
    lock = threading.Lock()
    finished: list[Mutant] = []

    def one(m: Mutant) -> None:
        kept = results.get(m)
        picked = tests_reaching(m, by_line) if by_line is not None else None
        if m.id in equivalents:
            m.outcome, m.reason = "equivalent", equivalents[m.id]
        elif kept is not None:
            m.outcome, m.seconds, m.tests, m.reason = kept["outcome"], kept["seconds"], kept["ran"], "kept"
        elif picked == []:
            m.outcome, m.reason = "not reached", "no test runs this function"
            results.put(m)
        else:
            m.tests = len(picked) if picked is not None else 0
            slot = threading.current_thread().name.rsplit("_", 1)[-1]
            m.outcome, m.seconds, _ = run_tests(m, spec["module"], tests, limit, slot=slot, select=picked)
            if m.outcome != "not loaded":
                results.put(m)
        with lock:
            finished.append(m)
            ran = f"{m.tests} tests" if m.tests else "all tests"
            print(f"  [{len(finished)}/{len(chosen)}] {m.id} line {m.line}: {m.outcome} ({m.seconds:.1f}s, "
                  f"{ran}{', kept' if m.reason == 'kept' else ''})", file=log, flush=True)
            progress(_section(path, len(everything), sorted(finished, key=chosen.index), seed, base))

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        for f in [pool.submit(one, m) for m in chosen]:
            f.result()
    except BaseException:  # Ctrl-C or SIGTERM: drop the queue, end the running tests, keep no outcome
        _STOP.set()
        pool.shutdown(wait=False, cancel_futures=True)
        _end_running()
        raise
    pool.shutdown()
    return _section(path, len(everything), chosen, seed, base)


def _section(path: str, total: int, done: list[Mutant], seed: int, base: float) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for m in done:
        counts[m.outcome] = counts.get(m.outcome, 0) + 1
    return {
        "module": path, "total": total, "sampled": len(done), "seed": seed, "counts": counts,
        "score": score(counts), "unmutated_seconds": base,
        "mutants": [m.as_dict() for m in done],
    }


def score(counts: dict[str, int]) -> Optional[float]:
    """killed / (killed + survived + not reached): a mutant no test reaches is a gap and counts against
    the score, as a survivor does. Equivalents count neither way. None when nothing was judged."""
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    judged = killed + counts.get("survived", 0) + counts.get("not reached", 0) + counts.get("not loaded", 0)
    return killed / judged if judged else None


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
        pct = "n/a" if s["score"] is None else f"{100 * s['score']:.1f}%"
        lines.append(f"| {s['module']} | {s['total']} | {s['sampled']} | {c.get('killed', 0) + c.get('timeout', 0)} "
                     f"| {c.get('survived', 0)} | {c.get('not reached', 0)} | {c.get('equivalent', 0)} | {pct} |")
    for title, kinds in (("Survivors", ("survived", "not loaded")),
                         ("Not reached by any test (gaps, counted against the score)", ("not reached",)),
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
    p.add_argument("--range", metavar="START:END", type=lambda r: tuple(int(x) for x in r.split(":")),
                   help="only the mutants at places START to END-1 of the source order (0-based), e.g. the "
                        "rest of a full set stopped part way")
    p.add_argument("--timeout", type=float, default=None, help="seconds per mutant (default: 3x the unmutated run)")
    p.add_argument("--report", default="report", help="report name under .mutation/ (default: report)")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at a time, each in its own pytest process")
    p.add_argument("--no-select", dest="select", action="store_false",
                   help="run every test file of the module for every mutant (default: the tests whose "
                        "recorded coverage reaches the mutated function)")
    p.add_argument("--fresh", action="store_true", help="ignore the outcomes kept under .mutation/results/")
    p.add_argument("--list", action="store_true", help="list the chosen mutants and stop")
    p.add_argument("--show", metavar="ID", help="print one mutant's diff and stop")
    p.add_argument("--run", metavar="ID", help="run one mutant (all its module's tests) and print the output")
    p.add_argument("--tests", nargs="+", metavar="TEST",
                   help="with --run: only these tests (pytest ids, e.g. tests/test_x.py::test_y), to check "
                        "that a new test kills the mutant")
    a = p.parse_args(argv)
    # Ctrl-C, `kill -INT` (which a shell's background job ignores unless told) and `kill PID` all stop
    # a campaign: the queue dropped, the running tests ended, nothing half-run recorded.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    modules = a.module or (sorted(MODULES) if nightly else DEFAULT_MODULES)
    n = None if a.all else a.sample
    if a.show or a.run:
        for path in modules:
            for m in mutants_of(path):
                if m.id == (a.show or a.run):
                    print(m.diff)
                    if a.run:
                        tests = a.tests or existing_tests(MODULES[path]["tests"], MODULES[path].get("select"))
                        outcome, dt, tail = run_tests(m, MODULES[path]["module"], tests, 3600)
                        print(tail, f"\n{outcome} in {dt:.1f}s")
                    return
        sys.exit(f"no mutant {a.show or a.run} in {', '.join(modules)}")
    if a.list:
        for path in modules:
            for m in sample(mutants_of(path), n, a.seed, a.range):
                print(f"{m.id} line {m.line}\n{m.diff}")
        return
    sections: list[dict[str, Any]] = []
    try:
        for path in modules:
            sections.append(campaign(path, n, a.seed, a.timeout, sys.stdout,
                                     lambda part: write_report([*sections, part], argv, a.report),
                                     jobs=a.jobs, select=a.select, fresh=a.fresh, span=a.range))
    except KeyboardInterrupt:
        sys.exit("stopped: the outcomes decided so far are kept under .mutation/results/ (run the same "
                 "command to resume)")
    report = write_report(sections, argv, a.report)
    for s in sections:
        pct = "n/a" if s["score"] is None else f"{100 * s['score']:.1f}%"
        print(f"{s['module']}: score {pct} ({s['counts']})")
    print(f"report: {os.path.relpath(report, ROOT)}")


if __name__ == "__main__":
    main()
