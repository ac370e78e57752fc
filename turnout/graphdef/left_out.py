"""The parts of a TF1 graph the import leaves out: its Saver's ops, its summaries and its input pipeline.

Why leave them out: a TF1 training script makes a ``tf.compat.v1.train.Saver`` and its summaries
(``tf.compat.v1.summary.scalar``, ``histogram``, ``merge_all``) before it writes its GraphDef, so the
graph holds ``save/SaveV2`` and ``save/RestoreV2`` with their string constants (the file name, the
tensor names) and the restore's assigns, and ``ScalarSummary`` / ``MergeSummary`` nodes with their tag
constants. Both move strings between the graph and files (checkpoints, event files), which Turnout
does outside the graph, with the same files: the weights by ``turnout.checkpoint.save_tf`` /
``restore_tf``, the summaries by ``turnout.graphdef.events.EventWriter`` from the values they read
(``summary_values``). Turnout has no string tensors to run them with. So the import drops those ops,
what reads them (the restore assigns, ``save/restore_all``, the merged summary) and the strings only
they read (their constants); a fetch of one is a ``NotFoundError`` that says what to do instead
(``why``). What they read (a Variable's read, a loss) stays: the model uses it too. The input
pipeline (``input_pipeline``) is left out above the batches it gives the model, which become
placeholders.
"""

from __future__ import annotations

from typing import Any, Optional

from turnout.graphdef.input_pipeline import pipeline_nodes

#: the ops by which a Saver reads and writes checkpoint files (V2 and TF1's older V1 forms)
SAVER_OPS = frozenset({"SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename", "ShardedFilespec",
                       "Save", "SaveSlices", "Restore", "RestoreSlice"})

#: TF1's summary ops: each makes a serialized ``Summary`` protobuf (a string) for an event file
SUMMARY_OPS = frozenset({"ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummary", "AudioSummaryV2",
                         "TensorSummary", "TensorSummaryV2", "MergeSummary"})

#: what a fetch of a left-out node is told to use instead, by the part it belongs to
INSTEAD = {
    "saver": "belongs to TensorFlow's Saver, which the import leaves out: read and write the Variables' "
             "checkpoints with turnout.checkpoint.restore_tf and save_tf",
    "summary": "belongs to TensorFlow's summaries, which the import leaves out: fetch the values they read "
               "(ImportedGraph.summaries: tag -> tensor name) and write them with "
               "turnout.graphdef.events.EventWriter",
    "input": "belongs to the input pipeline (tf.data or a queue), which the import leaves out: feed the batches "
             "it would give to the get-next node's outputs (ImportedGraph.batches lists them)",
}


def left_out(gd: Any) -> dict[str, str]:
    """Node name -> the part (``"saver"``, ``"summary"`` or ``"input"``) of every node of ``gd`` the
    import leaves out: ``saver_nodes``, ``summary_nodes`` and ``input_pipeline.pipeline_nodes``."""
    return {**{n: "input" for n in pipeline_nodes(gd)}, **{n: "summary" for n in summary_nodes(gd)},
            **{n: "saver" for n in saver_nodes(gd)}}


def why(part: Optional[str]) -> Optional[str]:
    """What a fetch of a node of ``part`` (a value of ``left_out``) is told; None for a kept node."""
    return None if part is None else INSTEAD[part]


def saver_nodes(gd: Any) -> frozenset[str]:
    """The names of the nodes of ``gd`` that belong to a Saver (``_part`` of ``SAVER_OPS``)."""
    return _part(gd, SAVER_OPS)


def summary_nodes(gd: Any) -> frozenset[str]:
    """The names of the nodes of ``gd`` that belong to its summaries (``_part`` of ``SUMMARY_OPS``)."""
    return _part(gd, SUMMARY_OPS)


def summary_values(gd: Any) -> dict[str, str]:
    """Tag -> the TensorFlow name of the tensor each scalar, histogram or tensor summary of ``gd``
    reads (its second input), for the summaries whose tag is a string constant: what a user fetches
    to write the same summaries with ``EventWriter`` (a tag made at run time is not listed)."""
    consts = {nd.name: nd for nd in gd.node if nd.op == "Const"}
    out: dict[str, str] = {}
    for nd in gd.node:
        if nd.op in ("ScalarSummary", "HistogramSummary", "TensorSummaryV2") and len(nd.input) >= 2:
            tag = _string_constant(consts.get(nd.input[0].split(":")[0]))
            if tag is not None:
                out[tag] = nd.input[1] if ":" in nd.input[1] else f"{nd.input[1]}:0"
    return out


def _string_constant(nd: Any) -> Optional[str]:
    """The one string a scalar string ``Const`` holds, or None."""
    if nd is None or "value" not in nd.attr:
        return None
    t = nd.attr["value"].tensor
    if t.dtype != _STRING or len(t.string_val) != 1 or len(t.tensor_shape.dim):
        return None
    return bytes(t.string_val[0]).decode("utf-8", "replace")


def _part(gd: Any, ops: frozenset[str]) -> frozenset[str]:
    """Each node of ``gd`` of one of ``ops``, each node that reads one of them (by a data or a control
    input, transitively), and each string node whose every reader is one of them (transitively:
    their constants)."""
    readers: dict[str, set[str]] = {nd.name: set() for nd in gd.node}
    for nd in gd.node:
        for i in nd.input:
            src = i.lstrip("^").split(":")[0]
            if src in readers:
                readers[src].add(nd.name)
    inputs = {nd.name: {i.lstrip("^").split(":")[0] for i in nd.input} for nd in gd.node}
    out = {nd.name for nd in gd.node if nd.op in ops}
    todo = list(out)
    while todo:  # what reads them
        for r in readers[todo.pop()]:
            if r not in out:
                out.add(r)
                todo.append(r)
    strings = {nd.name for nd in gd.node if _STRING in (_type(nd, "dtype"), _type(nd, "T"))}
    todo = list(out)
    while todo:  # the strings only they read (file names, tensor names, slice specs, tags)
        for src in inputs[todo.pop()]:
            if src in strings and src not in out and readers.get(src, set()) <= out:
                out.add(src)
                todo.append(src)
    return frozenset(out)


_STRING = 7  # TensorFlow's DT_STRING


def _type(nd: Any, key: str) -> int | None:
    return int(nd.attr[key].type) if key in nd.attr else None


__all__ = ["INSTEAD", "SAVER_OPS", "SUMMARY_OPS", "left_out", "saver_nodes", "summary_nodes", "summary_values", "why"]
