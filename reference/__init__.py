"""The reference interpreter: a readable implementation of the non-strict tagged-token semantics.

This is the project's oracle. Every other executor (the formal small-step system, the fast JAX
backend, partitioned execution) is checked against it. It favours clarity over speed: one token at a
time, rules in tables keyed by primitive (``rules.FIRE``, ``rules.ROUTE``), each citing the named rule
of ``specs/rules.toml`` it implements.
"""

from turnout.reference.executor import Interpreter, ReferenceBackend
from turnout.reference.trace import Trace

__all__ = ["Interpreter", "ReferenceBackend", "Trace"]
