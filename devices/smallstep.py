"""The small-step system over a set of partitions sharing one rendezvous, and its exhaustive explorer.

A configuration of a partitioned run is one small-step configuration per partition
(``turnout.semantics.smallstep.Config``); the rendezvous is spread over them: each partition's
``mailbox`` holds the tokens sent to its Recvs and not yet received. A step picks one partition and one
of its enabled firings; an [E-Send] firing moves its token into the mailbox of the partition that holds
the Recv of that edge. Nothing else is shared: frame instances, stores and stacks are per partition.

The explorer visits every configuration reachable by any interleaving of the partitions' steps (memoised
by value, as the single-graph explorer does) and reports the outcomes of the maximal runs, so
confluence across partitions (every interleaving gives the unpartitioned result) is checked outright on
small graphs. The rendezvous here is unbounded: the per-edge credit is the executor's memory bound and
only restricts which interleavings happen.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from turnout.devices.partition import Partitioned
from turnout.errors import NonTerminationError
from turnout.graph import Tensor
from turnout.semantics.explore import value_repr
from turnout.semantics.smallstep import Config, Firing, enabled, fire_sending, initial


@dataclass(frozen=True, eq=False)
class PartitionedConfig:
    """One small-step configuration per partition, in the order of ``Partitioned.partitions``."""

    configs: tuple[Config, ...]

    def key(self) -> Hashable:
        """The partitions' configuration keys, in order: what equality and hashing compare."""
        return tuple(c.key() for c in self.configs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionedConfig) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())


@dataclass
class System:
    """The static part: which partition receives each edge, and where each fetch is produced."""

    parted: Partitioned
    route: dict[str, int]
    fetches: list[tuple[int, tuple[int, int], str]]  # (partition index, (node id, output), original name)
    initial: PartitionedConfig


def system(parted: Partitioned, feeds: Optional[Mapping[Tensor, Any]] = None) -> System:
    """The initial configuration of a partitioned run; ``feeds`` map the original graph's tensors."""
    feeds = dict(feeds or {})
    by_key = {(t.node.id, t.index): v for t, v in feeds.items()}
    devices = list(parted.partitions)
    configs = []
    route: dict[str, int] = {}
    fetches = []
    for i, (d, part) in enumerate(parted.partitions.items()):
        local = {ph.outputs[0]: by_key[key] for key, ph in part.feeds.items()}
        mine = [t for (dev, t) in parted.fetches if dev == d]
        configs.append(initial(part.graph, mine, local, whole_graph=True))
        for n in part.graph.nodes:
            if n.op == "Recv":
                route[n.attrs["edge"]] = i
    orig = _orig_fetch_names(parted)
    for (d, t), name in zip(parted.fetches, orig):
        fetches.append((devices.index(d), (t.node.id, t.index), name))
    return System(parted, route, fetches, PartitionedConfig(tuple(configs)))


def _orig_fetch_names(parted: Partitioned) -> list[str]:
    return [t.name for _, t in parted.fetches]


def steps(s: System, pc: PartitionedConfig) -> list[tuple[int, Firing]]:
    """Every enabled (partition, firing)."""
    return [(i, f) for i, c in enumerate(pc.configs) for f in enabled(c)]


def step(s: System, pc: PartitionedConfig, i: int, f: Firing) -> PartitionedConfig:
    """Fire ``f`` in partition ``i``; a sent token lands in the receiving partition's mailbox."""
    configs = list(pc.configs)
    configs[i], sent = fire_sending(configs[i], f)
    for key, tok in sent:
        j = s.route[key[0]]
        c = configs[j]
        configs[j] = Config(c.program, c.pending, c.fired, c.instances, c.variables, c.stacks, c.produced,
                            c.mailbox | {(key, tok)})
    return PartitionedConfig(tuple(configs))


def outcome(s: System, pc: PartitionedConfig) -> Optional[tuple[Hashable, ...]]:
    """Per fetch ``("live", value)`` or ``("dead", name)``; None if some fetch was never produced or a
    token is left in a mailbox (a run that did not end cleanly)."""
    out: list[Hashable] = []
    if any(c.mailbox for c in pc.configs):
        return None
    for i, key, name in s.fetches:
        c = pc.configs[i]
        tok = c.produced.get(key) if key in c.produced else None
        if tok is None:
            return None
        out.append(("dead", name) if tok.is_dead else ("live", value_repr(tok.value)))
    return tuple(out)


@dataclass
class PartitionedExploration:
    """``outcomes``: the outcomes of every maximal run; ``stuck``: quiescent configurations with a fetch
    missing or a token unreceived; ``complete``: every reachable configuration was visited."""

    outcomes: set[tuple[Hashable, ...]]
    n_states: int
    stuck: list[PartitionedConfig] = field(default_factory=list)
    complete: bool = True


def explore(s: System, max_states: int = 50_000) -> PartitionedExploration:
    """Visit every configuration reachable from ``s.initial`` (depth first, memoised by value)."""
    seen: set[PartitionedConfig] = {s.initial}
    stack = [s.initial]
    result = PartitionedExploration(set(), 0)
    while stack:
        pc = stack.pop()
        result.n_states += 1
        nxt = steps(s, pc)
        if not nxt:
            o = outcome(s, pc)
            if o is None:
                result.stuck.append(pc)
            else:
                result.outcomes.add(o)
            continue
        for i, f in nxt:
            child = step(s, pc, i, f)
            if child not in seen:
                if len(seen) >= max_states:
                    result.complete = False
                    continue
                seen.add(child)
                stack.append(child)
    return result


def run(s: System, seed: int = 0,
        max_steps: int = 1_000_000) -> tuple[Optional[tuple[Hashable, ...]], PartitionedConfig]:
    """One maximal run choosing uniformly among the enabled (partition, firing) pairs."""
    rng = random.Random(seed)
    pc = s.initial
    for _ in range(max_steps):
        nxt = steps(s, pc)
        if not nxt:
            return outcome(s, pc), pc
        i, f = rng.choice(nxt)
        pc = step(s, pc, i, f)
    raise NonTerminationError(f"the partitioned small-step run took more than {max_steps} steps")
