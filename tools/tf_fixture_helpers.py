"""Helpers the TensorFlow fixture cases share (tools/tf_fixtures.py and tools/tf_fixtures_ops.py):
seeded constant weights, so a GraphDef holds its initial values, and the runs of a training loop."""

from __future__ import annotations

from typing import Any

import numpy as np


def names(ts: Any) -> list[str]:
    return [t.name for t in ts]


def _weights(shape: tuple[int, ...], seed: int, scale: float = 0.3) -> np.ndarray:
    """Seeded initial weights: the fixtures use constant initializers, so the GraphDef holds them."""
    return (np.random.default_rng(seed).uniform(-1.0, 1.0, shape) * scale).astype(np.float32)


def _seeded(tf: Any, seed: int) -> Any:
    """An initializer of seeded constants of whatever shape a cell asks for (a GRU asks for two)."""
    def init(shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        return tf.constant(_weights(tuple(int(d) for d in shape), seed))

    return init


def _train_runs(feeds: dict[str, Any], loss: Any, train: Any, watched: list[Any],
                steps: int = 3) -> list[dict[str, Any]]:
    """``steps`` training steps, each fetching the loss it trains on, then the loss and the watched
    tensors (the updated weights) after them."""
    runs: list[dict[str, Any]] = [{"feeds": feeds, "fetches": [loss.name], "targets": [train.name]}
                                  for _ in range(steps)]
    runs.append({"feeds": feeds, "fetches": [loss.name, *names(watched)]})
    return runs


def _saved(runs: list[dict[str, Any]], replayed: int = 1) -> list[dict[str, Any]]:
    """``runs`` with a Saver checkpoint written before the last ``replayed`` runs (tools/tf_fixtures.py
    saves it as ``saver/<case>/model.ckpt``): the test restores it into a fresh session of the
    imported model and replays those runs with TensorFlow's values."""
    return [*runs[:-replayed], {"save": True}, *runs[-replayed:]]
