"""What the fast backend asks of XLA beyond JAX's defaults: on a GPU, loops and conditionals run as
*command buffers* (CUDA graphs whose conditional nodes test the predicate on the device).

Why: a ``lax.while_loop`` whose trip count is known only at run time, which is every loop of the
paper's programs, ends each iteration on a GPU by copying its predicate to the host and waiting for
it, so that the host can decide whether to launch the next iteration's kernels. Measured on an H100
(2026-11-26, jax 0.11.2): a forward LSTM loop (batch 64, hidden 256) cost 9.5 µs an iteration as a
``scan`` of static length and 20.2 µs as a ``while_loop`` of fed length; the LSTM training step of
``benchmarks/lstm.py``, whose four loops all have fed trip counts, cost 63.8 µs an iteration on the
fast backend against 38.5 µs for ``jax.grad`` of a ``scan``. With WHILE and CONDITIONAL command
buffers the step cost 47.6 µs an iteration, and the whole step at T = 500 went from 1.61 to 1.18
times JAX's (the JAX side run with its defaults).

The options are given per compiled function (``jax.jit(..., compiler_options=...)``), so a user's own
JAX programs keep theirs. XLA takes the list of command types whole, not as an addition to its
defaults, so the list names the usual kinds (fusions, cuBLAS and cuDNN calls, custom calls) and the
two control-flow kinds; the list is the backend's option ``FastOptions.gpu_command_buffers``
(``turnout.fast_options.GPU_COMMAND_BUFFERS`` by default). Nothing is asked: on a CPU (where there
are no command buffers); where the option is None or ""; where ``XLA_FLAGS`` already sets
``xla_gpu_enable_command_buffer`` (the user chose, for XLA itself); or where this XLA refuses the list
(checked once per list, by compiling a trivial function with it).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, Optional

import jax

from turnout.fast_options import GPU_COMMAND_BUFFERS


def wanted(platform: str, command_buffers: Optional[str] = GPU_COMMAND_BUFFERS,
           environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The options the fast backend would ask for on ``platform`` with the command types
    ``command_buffers`` (``FastOptions.gpu_command_buffers``) under ``environ`` (default: this
    process's environment, where ``XLA_FLAGS`` may hold the user's own choice), before checking that
    XLA takes them: empty but on a GPU."""
    env = os.environ if environ is None else environ
    if platform != "gpu" or not command_buffers:  # (``jax.default_backend()`` names CUDA and ROCm "gpu")
        return {}
    if "xla_gpu_enable_command_buffer" in env.get("XLA_FLAGS", ""):
        return {}
    return {"xla_gpu_enable_command_buffer": command_buffers}


@functools.cache
def accepted(command_buffers: str) -> bool:
    """Whether this XLA takes the command types ``command_buffers`` (a cache: one trivial compile per
    list and process). An XLA that does not know one of the kinds refuses the whole list."""
    opts = {"xla_gpu_enable_command_buffer": command_buffers}
    try:
        jax.jit(lambda x: x + 1, compiler_options=opts)(0).block_until_ready()
    except Exception:  # noqa: BLE001 - then JAX's defaults are kept
        return False
    return True


def compiler_options(command_buffers: Optional[str] = GPU_COMMAND_BUFFERS, platform: Optional[str] = None
                     ) -> dict[str, Any]:
    """The options a compiled function of the fast backend is given (see the module docstring) for
    the backend's ``FastOptions.gpu_command_buffers`` on ``platform`` (JAX's name; None: JAX's
    default backend, where the function runs)."""
    opts = wanted(platform or jax.default_backend(), command_buffers)
    if opts and not accepted(opts["xla_gpu_enable_command_buffer"]):
        return {}
    return opts
