"""How many examples a property test tries: a count chosen for the ``ci`` profile, scaled by the
profile loaded (``tests/conftest.py``).

Why: a test that sets ``max_examples`` to a number overrides every profile, so the long ``dev`` and
``nightly`` campaigns ran it no longer than the default suite did. ``examples(n)`` is ``n`` under
``ci`` and grows with the profile's ``max_examples`` (six times under ``dev``, a hundred under
``nightly``), so each test keeps its share of the campaign's time.
"""

from __future__ import annotations

from hypothesis import settings

#: the ``ci`` profile's ``max_examples``: the unit the counts below are chosen in
CI_EXAMPLES = 50


def examples(ci: int) -> int:
    """The examples of a test that tries ``ci`` of them under the ``ci`` profile, scaled by the loaded
    profile's ``max_examples`` (never fewer than one)."""
    return max(1, ci * settings.default.max_examples // CI_EXAMPLES)
