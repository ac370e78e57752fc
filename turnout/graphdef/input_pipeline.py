"""The input pipeline of a TF1 graph, left out: its batches become placeholders to feed.

Why: a TF1 training script reads its data inside the graph, through ``tf.data`` (a chain of dataset
ops, an iterator, ``IteratorGetNext``) or the older queues (a reader, an enqueue, ``QueueDequeueManyV2``),
so the GraphDef it writes holds the pipeline: file names, records, parsing and shuffling on string and
variant tensors, run by threads and kernels Turnout does not have. The model reads only what the
get-next node gives it, a batch of tensors of declared dtypes and shapes. So the import leaves the
pipeline out, as it leaves out the Saver (``left_out``), and keeps each get-next node the model reads
without its inputs, its components' dtypes and shapes written as an iterator's ``output_types`` and
``output_shapes`` (a queue's component shapes come from the queue; a dequeue of ``n`` adds a batch
dimension of ``n``): its import rule makes one ``Placeholder`` per component, so the user feeds the
batches by the get-next node's own tensor names (``IteratorGetNext:0``), which
``ImportedGraph.batches`` lists. A control edge from the pipeline (an ``init`` group holding the
iterator's initializer) is dropped with it: there is no iterator to initialise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from turnout.graphdef.import_context import Foreign, ImportContext, Rule, Value
from turnout.graphdef.protos import TF_TO_DTYPE, base_type, tensor_to_numpy, tf_dtype, type_name

#: the ops that give the model a batch: kept, as placeholders
GET_NEXT_OPS = frozenset({"IteratorGetNext", "IteratorGetNextSync", "QueueDequeueV2", "QueueDequeueManyV2",
                          "QueueDequeueUpToV2", "QueueDequeue", "QueueDequeueMany", "QueueDequeueUpTo"})

#: the ops that make, fill or read iterators, queues and readers (the dataset ops are matched by name)
PIPELINE_OPS = frozenset({
    "Iterator", "IteratorV2", "AnonymousIterator", "AnonymousIteratorV2", "AnonymousIteratorV3", "MakeIterator",
    "OneShotIterator", "IteratorToStringHandle", "IteratorFromStringHandle", "IteratorFromStringHandleV2",
    "DeleteIterator", "IteratorGetNextAsOptional", "DatasetToGraph", "DatasetToGraphV2",
    "FIFOQueue", "FIFOQueueV2", "PaddingFIFOQueue", "PaddingFIFOQueueV2", "RandomShuffleQueue",
    "RandomShuffleQueueV2", "PriorityQueue", "PriorityQueueV2", "QueueEnqueue", "QueueEnqueueV2",
    "QueueEnqueueMany", "QueueEnqueueManyV2", "QueueClose", "QueueCloseV2", "QueueSize", "QueueSizeV2",
    "QueueIsClosed", "QueueIsClosedV2", "TFRecordReader", "TFRecordReaderV2", "TextLineReader",
    "TextLineReaderV2", "FixedLengthRecordReader", "FixedLengthRecordReaderV2", "WholeFileReader",
    "WholeFileReaderV2", "IdentityReader", "IdentityReaderV2", "ReaderRead", "ReaderReadV2", "ReaderReadUpTo",
    "ReaderReadUpToV2", "ReaderNumRecordsProduced", "ReaderNumRecordsProducedV2", "ReaderReset",
    "ReaderResetV2", "MatchingFiles",
})

_DATASET = re.compile(r"Dataset(V\d+)?$")


def is_pipeline(op: str) -> bool:
    """Whether ``op`` makes, fills or reads a dataset, an iterator, a queue or a reader."""
    return op in PIPELINE_OPS or bool(_DATASET.search(op))


def pipeline_nodes(gd: Any) -> frozenset[str]:
    """The names of the nodes of ``gd`` that belong to its input pipeline: every node of a pipeline op;
    every node that reads one by a data input (transitively), up to the get-next nodes; and every
    node whose data all goes into the pipeline (the file names and batch sizes, and the slicing a
    producer queue's dequeue feeds into the batching queue: that dequeue too). The get-next nodes the
    model reads stay, their inputs left out."""
    readers: dict[str, set[str]] = {nd.name: set() for nd in gd.node}
    inputs: dict[str, set[str]] = {}
    for nd in gd.node:
        inputs[nd.name] = {i.split(":")[0] for i in nd.input if not i.startswith("^")}
        for src in inputs[nd.name]:
            if src in readers:
                readers[src].add(nd.name)
    ops = {nd.name: nd.op for nd in gd.node}
    get_next = {name for name, op in ops.items() if op in GET_NEXT_OPS}
    out = {nd.name for nd in gd.node if is_pipeline(nd.op)}
    todo = list(out)
    while todo:
        for r in readers[todo.pop()]:
            if r not in out and r not in get_next:
                out.add(r)
                todo.append(r)
    todo = [*out, *get_next]  # (a get-next node's inputs go with it)
    while todo:  # what only the pipeline reads
        for src in inputs[todo.pop()]:
            if src in ops and src not in out and readers[src] <= out | (get_next - {src}):
                out.add(src)
                todo.append(src)
    return frozenset(out)


def batch_node(nd: Any, nodes: dict[str, Any], dropped: Any) -> Any:
    """The get-next node ``nd`` as the import reads it (``nodes``: the GraphDef's, by name;
    ``dropped``: the names left out): without its data inputs (the iterator or the queue and a
    count, which belong to the pipeline) and the control inputs from what is left out, its
    components' dtypes and shapes as ``output_types`` and ``output_shapes`` (an unknown shape is
    one of unknown rank)."""
    types, shapes = _components(nd, nodes)
    out = type(nd)()
    out.name, out.op, out.device = nd.name, nd.op, nd.device
    out.input.extend(i for i in nd.input if i.startswith("^") and i[1:] not in dropped)
    out.attr["output_types"].list.type.extend(types)
    for s in shapes:
        shape = out.attr["output_shapes"].list.shape.add()
        if s is None:
            shape.unknown_rank = True
        else:
            shape.CopyFrom(s)
    return out


def _types(nd: Any) -> list[int]:
    """The DataTypes of a get-next node's outputs: an iterator's ``output_types``, a dequeue's
    ``component_types``."""
    return list(nd.attr["output_types" if nd.op.startswith("Iterator") else "component_types"].list.type)


def _components(nd: Any, nodes: dict[str, Any]) -> tuple[list[int], list[Any]]:
    """The dtypes and shapes (``TensorShapeProto``, or None where unknown) of a get-next node's outputs:
    an iterator's are its attrs; a dequeue's are its queue's component shapes, under a batch
    dimension for a dequeue of many (its count where that is a constant; unknown for ``UpTo``)."""
    types = _types(nd)
    if nd.op.startswith("Iterator"):
        return types, list(nd.attr["output_shapes"].list.shape)
    queue = nodes.get(nd.input[0].split(":")[0]) if nd.input else None
    shapes = list(queue.attr["shapes"].list.shape) if queue is not None and "shapes" in queue.attr else []
    if len(shapes) != len(types):
        return types, [None] * len(types)
    if nd.op in ("QueueDequeueV2", "QueueDequeue"):
        return types, shapes
    count = -1
    const = nodes.get(nd.input[1].split(":")[0]) if nd.op.startswith("QueueDequeueMany") and len(nd.input) > 1 else None
    if const is not None and const.op == "Const":
        value = tensor_to_numpy(const.attr["value"].tensor, f'Const node "{const.name}"')
        count = int(value) if value.shape == () else -1
    batched = []
    for s in shapes:
        b = type(s)()
        b.dim.add().size = count
        b.dim.extend(s.dim)
        batched.append(b)
    return types, batched


def _batch(ctx: ImportContext, nd: Any, ins: list[Value]) -> Sequence[Value]:
    """A get-next node as ``batch_node`` left it: one ``Placeholder`` per component of its batch, of
    the dtype and shape written on it, for the user to feed; a component of a dtype Turnout lacks (a
    string) is ``Foreign``, an error only where the model reads it."""
    shapes = ctx.attr("output_shapes", [])
    out: list[Value] = []
    for k, (t, s) in enumerate(zip(ctx.attr("output_types", []), shapes, strict=True)):
        if base_type(t) not in TF_TO_DTYPE:
            out.append(Foreign(type_name(t)))
            continue
        out.append(ctx.create("Placeholder", [], {"dtype": tf_dtype(t, ctx.where()).name, "shape": s},
                              suffix=f"component_{k}").outputs[0])
    return out


#: the import rules of the get-next nodes ``batch_node`` rewrote, beside ``IMPORT_RULES``: not among the
#: supported ops, since a get-next node is imported only as the end of a pipeline the import leaves out
BATCH_RULES: dict[str, Rule] = dict.fromkeys(GET_NEXT_OPS, _batch)


def batches(gd: Any, dropped: Any) -> list[str]:
    """The TensorFlow names of the tensors a user feeds for the left-out pipeline: each output of each
    get-next node that is not ``dropped`` (one whose batches go only into the pipeline is), but those
    of a dtype Turnout lacks, which cannot be fed."""
    out = []
    for nd in gd.node:
        if nd.op in GET_NEXT_OPS and nd.name not in dropped:
            types = _types(nd)
            out += [f"{nd.name}:{k}" for k, t in enumerate(types) if base_type(t) in TF_TO_DTYPE]
    return out


__all__ = ["BATCH_RULES", "GET_NEXT_OPS", "PIPELINE_OPS", "batch_node", "batches", "is_pipeline", "pipeline_nodes"]
