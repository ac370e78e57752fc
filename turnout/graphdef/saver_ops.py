"""The nodes TensorFlow's ``tf.compat.v1.train.Saver`` adds to a graph, which the import leaves out.

Why leave them out: a TF1 training script makes a Saver before it writes its GraphDef, so the graph
holds ``save/SaveV2`` and ``save/RestoreV2`` with their string constants (the file name, the tensor
names) and the restore's assigns. They move weights between the Variables and checkpoint files,
which Turnout does outside the graph, with the same files (``turnout.checkpoint.save_tf`` /
``restore_tf``); Turnout has no string tensors to run them with. So the import drops the Saver's ops,
what reads them (the restore assigns, ``save/restore_all``) and the strings only they read (their
constants); a fetch of one is a ``NotFoundError`` that says where the weights go instead.
"""

from __future__ import annotations

from typing import Any

#: the ops by which a Saver reads and writes checkpoint files (V2 and TF1's older V1 forms)
SAVER_OPS = frozenset({"SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename", "ShardedFilespec",
                       "Save", "SaveSlices", "Restore", "RestoreSlice"})


def saver_nodes(gd: Any) -> frozenset[str]:
    """The names of the nodes of ``gd`` that belong to a Saver: each node of a ``SAVER_OPS`` op, each
    node that reads one of them (by a data or a control input, transitively), and each string node
    whose every reader is one of them (transitively: the Saver's constants). What the Saver saves
    (a Variable's read) stays: the model may use it too."""
    readers: dict[str, set[str]] = {nd.name: set() for nd in gd.node}
    for nd in gd.node:
        for i in nd.input:
            src = i.lstrip("^").split(":")[0]
            if src in readers:
                readers[src].add(nd.name)
    inputs = {nd.name: {i.lstrip("^").split(":")[0] for i in nd.input} for nd in gd.node}
    out = {nd.name for nd in gd.node if nd.op in SAVER_OPS}
    todo = list(out)
    while todo:  # what reads the Saver's ops
        for r in readers[todo.pop()]:
            if r not in out:
                out.add(r)
                todo.append(r)
    strings = {nd.name for nd in gd.node if _STRING in (_type(nd, "dtype"), _type(nd, "T"))}
    todo = list(out)
    while todo:  # the strings only the Saver reads (its file name, tensor names, slice specs)
        for src in inputs[todo.pop()]:
            if src in strings and src not in out and readers[src] <= out:
                out.add(src)
                todo.append(src)
    return frozenset(out)


_STRING = 7  # TensorFlow's DT_STRING


def _type(nd: Any, key: str) -> int | None:
    return int(nd.attr[key].type) if key in nd.attr else None


__all__ = ["SAVER_OPS", "saver_nodes"]
