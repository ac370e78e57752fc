"""The JAX backend (``turnout.fast``): raise primitive graphs to structured regions and lower them to
``jax.lax`` control flow inside ``jax.jit``.

``FastBackend`` is what ``tn.Session(graph, backend="fast", stack_chunk=1024)`` runs; ``to_jax`` turns
a graph into a pure JAX function. Importing this package imports jax; ``turnout`` itself never does.

Pipeline: ``functionalize`` (graph -> ``regions``: While and Cond regions, computed from the
primitives alone, so hand-built and loaded graphs work) -> ``emit`` (regions -> ``lax.while_loop`` /
``lax.cond`` while tracing each region once, per-primitive rules from ``lowering.LOWERING_RULES``)
-> ``backend`` (compiled stages, caching, chunked gradient stacks from ``stacks``, errors, the
``timeline`` of ``trace=True``; ``deep`` runs programs nested deeper than the recursion limit allows).
docs/fast_backend.rst describes the execution model.

Limits, by design or not yet done (a program that cannot be compiled raises ``UnsupportedError`` while
raising or tracing, and then runs on the reference interpreter unless ``fallback=False``):

- A Merge must join the two sides of one predicate's Switch (or be a loop Merge); a Merge fed by two
  paths live together, or by unrelated predicates, is rejected with ``UnsupportedError``.
- A TensorArray's size must be known when compiling (it may depend on fed *shapes*, not values); it
  is a ``(size, *elem)`` buffer with a written-mask. Slices with run-time bounds are rejected (XLA
  needs static shapes), as are loop variables whose shape changes across iterations.
- ``parallel_iterations`` does not change values and is ignored; loops run as ``lax.while_loop``
  (``lax.scan`` for static trip counts is not implemented).
- Gradient stacks of top-level loops are chunked; a full chunk goes to host memory (asynchronously)
  when its loop has ``swap_memory=True`` and stays on the device otherwise (``stacks``), under the
  optional ``device_memory_limit``. Stacks pushed by nested loops live in the outer loop's chunk, and
  a run whose outer iteration overflows the chunk is repeated with twice the capacity
  (``stats['stack_capacity_retries']``).
- Fetches must be in the root frame (as for the reference backend).
- ``RunOptions.max_firings`` (a count of node firings) cannot be honoured by compiled code: a budget
  other than the default or ``None`` raises ``UnsupportedError``.
"""

from turnout.fast.api import to_jax
from turnout.fast.backend import FastBackend

__all__ = ["FastBackend", "to_jax"]
