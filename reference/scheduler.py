"""Ready queues: the order in which ready (node, tag) pairs fire.

The semantics is confluent for well-formed graphs ([T1-Confluence]), so the scheduler must never change
results; it is a parameter precisely so tests can check that.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from turnout.errors import ArgumentError


class ReadyQueue:
    """FIFO, LIFO or seeded-random choice among the ready items."""

    def __init__(self, policy: str = "fifo", seed: int = 0) -> None:
        if policy not in ("fifo", "lifo", "random"):
            raise ArgumentError(f"unknown scheduler {policy!r}; choose fifo, lifo or random")
        self.policy = policy
        self._items: deque[Any] = deque()
        self._rng = random.Random(seed)

    def push(self, item: Any) -> None:
        """Add a ready item."""
        self._items.append(item)

    def pop(self) -> Any:
        """Take the next item by the policy: the oldest (fifo), the newest (lifo) or a seeded random one."""
        if self.policy == "fifo":
            return self._items.popleft()
        if self.policy == "lifo":
            return self._items.pop()
        i = self._rng.randrange(len(self._items))
        self._items[i], self._items[-1] = self._items[-1], self._items[i]
        return self._items.pop()

    def __len__(self) -> int:
        return len(self._items)
