"""The JAX backend (``turnout.fast``): raise primitive graphs to structured regions and lower them to
``jax.lax`` control flow inside ``jax.jit`` (DESIGN.md sec. 6).

``FastBackend`` is what ``tn.Session(graph, backend="fast")`` runs; ``to_jax`` turns a graph into a
pure JAX function. Importing this package imports jax; ``turnout`` itself never does.
"""

from turnout.fast.api import to_jax
from turnout.fast.backend import FastBackend

__all__ = ["FastBackend", "to_jax"]
