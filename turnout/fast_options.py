"""The options of the fast (JAX) backend: one frozen value, checked once when it is made.

``tn.Session(g, backend="fast", options=tn.FastOptions(stack_chunk=256))`` and
``tn.Session(g, backend="fast", stack_chunk=256)`` are the same request: keywords name fields of
``FastOptions``, as ``Session.run``'s keywords name fields of ``RunOptions``. The backend keeps the
value (``FastBackend.options``) and hands it to whatever reads one of its fields, so a test that wants
another threshold passes it, as a user would, instead of changing a module constant.

This module imports nothing heavy: ``turnout`` never imports jax, and the options are made before any.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Optional

import numpy as np

from turnout.arguments import option_fields, positive_int
from turnout.errors import ArgumentError
from turnout.memory_plan import PLATFORM_NAMES

#: the command types asked for on a GPU (``fast.xla_options``): XLA's usual kinds, and loops and
#: conditionals
GPU_COMMAND_BUFFERS = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"

#: per platform (``jax.default_backend()``), the default of ``FastOptions.inside_stack_bytes``.
#: Measured on the CPU only: on a GPU, zeroing a buffer inside the call is a kernel of its own, so
#: until it is measured there every stack is passed and kept.
INSIDE_STACK_BYTES: Mapping[str, int] = MappingProxyType({"cpu": 32 * 1024})

#: the defaults of ``FastOptions.stack_first_rung`` and ``FastOptions.stack_rung_ratio``: the capacity
#: ladder of the default chunk (1024) is 128, 160, 200, 250, ..., 959, 1024 entries (eleven rungs), so a
#: run of the benchmark LSTM at T = 100, 200, 500 or 1000 holds buffers within 1.3x of what it pushes
#: (``docs/fast_backend.rst``)
STACK_FIRST_RUNG = 128
STACK_RUNG_RATIO = 1.25
#: the default of ``FastOptions.stack_descend_after``: runs in a row that fitted a lower rung before a
#: plan starts on it
STACK_DESCEND_AFTER = 8

#: the default of ``FastOptions.host_stack_limit``: the entries a gradient stack in host memory may hold
#: inside the fused call before a run takes the staged path (a million: 2 GiB for a stack of 2 KiB
#: entries, such as the benchmark LSTM's at batch 16 and hidden 32)
HOST_STACK_LIMIT = 1 << 20

#: the default of ``FastOptions.frame_height`` (``fast.emit``): about eight levels of a plain nest fit
#: the part of a nest XLA:CPU compiles to one kernel
FRAME_HEIGHT = 8

#: the default of ``FastOptions.unroll_max`` (``fast.unrolled``): each body of an unrolled loop is one
#: more copy of it in the program
UNROLL_MAX = 64


@dataclass(frozen=True)
class FastOptions:
    """The fast backend's options (``docs/fast_backend.rst``, "Options", lists them with their reasons).

    ``stack_chunk``: gradient stack capacity, in entries per stack, of one device-resident chunk
    (default 1024). ``keep_stack_buffers`` (default True): a plan's gradient stack buffers stay on the
    device between runs, so steady-state runs allocate nothing; False frees them at the end of every
    run, trading an allocation per run for memory held between runs (``release_buffers()`` frees what
    is held at any time). ``fallback`` (default True): a program that cannot be compiled
    (``UnsupportedError`` while raising or tracing it) runs on the reference interpreter instead, with
    a ``RuntimeWarning`` once per program; False raises the ``UnsupportedError``.
    ``device_memory_limit`` (default None: no cap): the bytes of gradient stacks a run may hold on the
    device; a loop whose stacks would need more raises ``ResourceExhaustedError`` naming it (see
    ``fast.stacks.ChunkStore``). ``precompile_staged`` (default False): a plan with gradient stacks
    compiles its staged path only when a run needs it, the first time a loop outgrows its chunk, so a
    plan whose loops always fit compiles one program; True compiles both paths on the plan's first
    run, so that no later run compiles whatever its trip count, at about twice the first run's
    compile time. ``stack_ladder`` (default True): the one-call fused attempt of a plan with gradient
    stacks runs at the smallest capacity of its ladder (``fast.plan.capacity_ladder``) that held the
    last runs' high-water marks (the most entries a stack held), so the stacks a run uses, and the
    backend keeps, are sized to the runs' loops, at the price of one compilation per rung used;
    False: always ``stack_chunk`` entries.
    ``stack_first_rung`` (default 128) and ``stack_rung_ratio`` (default 1.25, at least 1.1): the
    ladder's rungs are ``stack_first_rung`` entries, then each ``stack_rung_ratio`` times the last
    (rounded up) while under ``stack_chunk``, then ``stack_chunk`` itself (128, 160, 200, ..., 959,
    1024 by default). An attempt that outgrows its rung counts on to ``stack_chunk`` entries, and the run goes
    at once to the first rung that holds what it counted (no rung between is compiled), so its
    buffers hold about ``stack_rung_ratio`` times the entries it pushes at most (or
    ``stack_first_rung``), and a plan compiles at most one fused program per rung it uses,
    ``1 + ceil(log(stack_chunk / stack_first_rung) / log(stack_rung_ratio))`` at most (11 by default).
    A finer ratio sizes buffers more tightly for more compilations.
    ``host_stack_limit`` (default ``HOST_STACK_LIMIT``, 2**20): the top of the ladder instead of
    ``stack_chunk`` for a plan whose every gradient stack the fused call keeps in host memory (their
    loops swap: ``swap_memory=True``, or a memory plan swaps them): such a stack holds nothing on the
    device, so the chunk does not bound it, and a run of up to this many pushes per stack stays one
    compiled call; a longer one takes the staged path, which moves chunks to host memory.
    ``stack_descend_after`` (default 8): a plan starts on a lower rung once this many runs in a row
    fitted it (``fast.stack_sizes.StackMarks``); fewer frees the buffers of a long run sooner, more
    keeps a plan whose lengths alternate from climbing again.

    Tuning (the defaults are measured; a test or an experiment changes them here):
    ``inside_stack_bytes``: a static gradient stack whose value buffer at the plan's capacity is at
    most this many bytes is made inside the fused call, neither passed nor kept (default None: the
    platform's threshold in ``INSIDE_STACK_BYTES``, 32 KiB on the CPU and none elsewhere; 0: never).
    ``frame_height``: a light loop with more than this many levels of loops inside it is a frame of
    its own in the traced program (default ``FRAME_HEIGHT``, 8; 0: every enclosing loop).
    ``unroll_max``: the most bodies a loop whose variables change shape may be unrolled to while
    tracing (``fast.unrolled``; default ``UNROLL_MAX``, 64; 0: never unrolled, such a loop runs on
    the interpreter).
    ``gpu_command_buffers``: the command types XLA is asked to run as command buffers on a GPU
    (default ``GPU_COMMAND_BUFFERS``, which includes loops and conditionals; None or "" asks nothing).
    ``memory_platform``: the platform the memory planner (``turnout.memory_plan``) plans the stacks
    for, one of ``memory_plan.PLATFORM_NAMES`` (default None: the platform of the backend's device).
    ``"gpu"`` on the CPU makes and runs the plan a GPU gets (a loop over its budget swapped to host
    memory, which on the CPU moves nothing and frees nothing), so that plan is tested where no GPU is.
    """

    stack_chunk: int = 1024
    keep_stack_buffers: bool = True
    fallback: bool = True
    device_memory_limit: Optional[int] = None
    precompile_staged: bool = False
    stack_ladder: bool = True
    stack_first_rung: int = STACK_FIRST_RUNG
    stack_rung_ratio: float = STACK_RUNG_RATIO
    stack_descend_after: int = STACK_DESCEND_AFTER
    host_stack_limit: int = HOST_STACK_LIMIT
    inside_stack_bytes: Optional[int] = None
    frame_height: int = FRAME_HEIGHT
    unroll_max: int = UNROLL_MAX
    gpu_command_buffers: Optional[str] = GPU_COMMAND_BUFFERS
    memory_platform: Optional[str] = None

    def __new__(cls, *args: Any, **fields: Any) -> FastOptions:
        # a misspelt option (or one too many) is refused by name, as RunOptions refuses it
        option_fields(cls, args, fields, "fast option")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        # Checked here, once, so a bad value is refused by name before any backend state exists.
        if not positive_int(self.stack_chunk):
            raise ArgumentError(f"FastOptions.stack_chunk must be a positive int, got {self.stack_chunk!r}")
        for name in ("keep_stack_buffers", "fallback", "precompile_staged", "stack_ladder"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentError(f"FastOptions.{name} must be True or False, got {getattr(self, name)!r}")
        if not positive_int(self.stack_first_rung):
            raise ArgumentError(f"FastOptions.stack_first_rung must be a positive int, got {self.stack_first_rung!r}")
        ratio = self.stack_rung_ratio
        # at least 1.1: a ratio near 1 would make a rung, and a compilation, every few entries
        if not isinstance(ratio, (int, float, np.integer, np.floating)) or isinstance(ratio, bool) or not ratio >= 1.1:
            raise ArgumentError(f"FastOptions.stack_rung_ratio must be a number >= 1.1, got {ratio!r}")
        if not positive_int(self.host_stack_limit):
            raise ArgumentError(f"FastOptions.host_stack_limit must be a positive int, got {self.host_stack_limit!r}")
        if not positive_int(self.stack_descend_after):
            raise ArgumentError("FastOptions.stack_descend_after must be a positive int (runs), "
                                f"got {self.stack_descend_after!r}")
        if self.device_memory_limit is not None and not positive_int(self.device_memory_limit):
            raise ArgumentError("FastOptions.device_memory_limit must be a positive int (bytes) or None, "
                                f"got {self.device_memory_limit!r}")
        inside = self.inside_stack_bytes
        if inside is not None and (not isinstance(inside, (int, np.integer)) or isinstance(inside, bool) or inside < 0):
            raise ArgumentError(f"FastOptions.inside_stack_bytes must be an int >= 0 (bytes) or None, got {inside!r}")
        for name in ("frame_height", "unroll_max"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise ArgumentError(f"FastOptions.{name} must be an int >= 0, got {v!r}")
        kinds = self.gpu_command_buffers
        if kinds is not None and not isinstance(kinds, str):
            raise ArgumentError(f"FastOptions.gpu_command_buffers must be a comma-separated str or None, got {kinds!r}")
        if self.memory_platform is not None and self.memory_platform not in PLATFORM_NAMES:
            raise ArgumentError(f"FastOptions.memory_platform must be None or one of {', '.join(PLATFORM_NAMES)}, "
                                f"got {self.memory_platform!r}")
        # numpy integers become ints: the value is hashed and compared as part of plan keys
        for name in ("stack_chunk", "device_memory_limit", "inside_stack_bytes", "frame_height", "unroll_max",
                     "stack_first_rung", "stack_descend_after"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "stack_rung_ratio", float(ratio))

    def inside_limit(self, platform: str) -> int:
        """The ``inside_stack_bytes`` threshold on ``platform`` (``jax.default_backend()``)."""
        if self.inside_stack_bytes is not None:
            return self.inside_stack_bytes
        return INSIDE_STACK_BYTES.get(platform, 0)


def fast_options(options: Optional[FastOptions], fields: Mapping[str, Any], who: str = "FastBackend") -> FastOptions:
    """One ``FastOptions`` from a backend's ``options=`` and its keywords (fields of ``FastOptions``):
    either may be given, and keywords replace the fields of ``options``. A keyword that names no field
    is refused by name."""
    if options is not None and not isinstance(options, FastOptions):
        raise ArgumentError(f"{who}: options must be a FastOptions, got {type(options).__name__}")
    known = {f.name for f in dataclasses.fields(FastOptions)}
    unknown = sorted(k for k in fields if k not in known)
    if unknown:
        raise ArgumentError(f"{who}: unknown options {unknown}; FastOptions has {sorted(known)}")
    base = options if options is not None else FastOptions()
    return dataclasses.replace(base, **fields) if fields else base


__all__ = ["FRAME_HEIGHT", "GPU_COMMAND_BUFFERS", "INSIDE_STACK_BYTES", "STACK_FIRST_RUNG", "STACK_RUNG_RATIO",
           "FastOptions", "fast_options"]
