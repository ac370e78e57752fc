"""TensorArray: a per-iteration accumulator, as an immutable value.

Why a value and not a mutable resource: every write returns a new TensorArray, so a TensorArray can be
a loop variable, crosses frames like any tensor, and its meaning under non-strict execution is plain
(slot i holds whatever iteration i wrote). Slots are write-once; reading an unwritten slot is an error.
Every element has one shape: the declared ``element_shape``, or else the first write's; a write of
another shape is an error when it runs (a stack of such elements would be no array).

Meaning, as plain Python::

    ta = [None] * size; ta[i] = v (write); ta[i] (read); np.stack(ta) (stack); len(ta) (size)
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.arguments import checked
from turnout.errors import DTypeError, GraphBuildError, ShapeError
from turnout.graph import Tensor, get_default_graph


class TensorArray:
    """``tn.TensorArray(tn.float32, size=n)``; ``ta = ta.write(i, v)``; ``ta.read(i)``; ``ta.stack()``.

    ``dynamic_size=True``: a write past the end grows the array to hold it (slots between stay
    unwritten), as TensorFlow's does, for outputs whose count a loop decides (a decoder's); ``size`` is
    then where it starts (0 is usual). The fast backend compiles it as a buffer of the run's capacity
    with a run-time length, running again at twice the capacity when the writes outgrow it.

    TensorFlow's three hints are taken, so TensorFlow 1 code runs as written, and change nothing a
    program that TensorFlow runs can see: ``infer_shape`` (every element has one shape here either
    way, a write of another shape a KernelError when it runs), ``clear_after_read`` (a read leaves its
    slot as it was, so a second read, an error in TensorFlow after a clearing read, gives the element
    again) and ``colocate_with_first_write_call`` (placement follows the program's placement rules)."""

    @checked
    def __init__(self, dtype: Any = None, size: Any = None, element_shape: Any = None,
                 name: Optional[str] = None, *, dynamic_size: bool = False, infer_shape: bool = True,
                 clear_after_read: Optional[bool] = None, colocate_with_first_write_call: bool = True,
                 _tensor: Optional[Tensor] = None) -> None:
        """An empty array of ``size`` slots of ``dtype`` (the hints: the class's docstring)."""
        for hint, value in (("infer_shape", infer_shape), ("colocate_with_first_write_call",
                                                             colocate_with_first_write_call)):
            if not isinstance(value, bool):
                raise GraphBuildError(f"TensorArray: {hint} must be a bool, got {value!r}")
        if clear_after_read is not None and not isinstance(clear_after_read, bool):
            raise GraphBuildError(f"TensorArray: clear_after_read must be a bool or None, got {clear_after_read!r}")
        if _tensor is not None:
            if _tensor.dtype != dt.tensor_array:
                raise GraphBuildError(f"{_tensor.name} is not a TensorArray value")
            self.tensor = _tensor
            return
        if dtype is None or size is None:
            raise GraphBuildError("TensorArray needs a dtype and a size")
        d = dt.as_dtype(dtype)
        n = _int_operand(size, "TensorArray", "size")
        es = sh.as_shape(element_shape)
        attrs: dict[str, Any] = {"dtype": d.name, "element_shape": None if es is None else list(es)}
        if dynamic_size:
            attrs["dynamic_size"] = True
        self.tensor = n.graph.create_node("TensorArrayNew", [n], attrs, name=name or "TensorArray").outputs[0]

    @property
    def dtype(self) -> dt.DType:
        """The dtype of the elements."""
        return self.tensor.spec.elem_dtype  # type: ignore[return-value]

    @property
    def element_shape(self) -> sh.Shape:
        """The shape of one element, as far as it is known when the graph is built."""
        return self.tensor.spec.elem_shape

    def _as_tensor(self) -> Tensor:
        return self.tensor

    def write(self, index: Any, value: Any, name: Optional[str] = None) -> TensorArray:
        """The TensorArray with ``value`` written at ``index``. TensorArrays are values: keep the result
        (``ta = ta.write(i, v)``), the array written to is unchanged."""
        from turnout.ops import convert_to_tensor

        i = _int_operand(index, "TensorArray.write", "index")
        v = convert_to_tensor(value, dtype=self.dtype) if not isinstance(value, Tensor) else value
        node = self.tensor.graph.create_node("TensorArrayWrite", [self.tensor, i, v], name=name or "ta_write")
        return TensorArray(_tensor=node.outputs[0])

    def read(self, index: Any, name: Optional[str] = None) -> Tensor:
        """The element at ``index``."""
        i = _int_operand(index, "TensorArray.read", "index")
        return self.tensor.graph.create_node("TensorArrayRead", [self.tensor, i], name=name or "ta_read").outputs[0]

    def stack(self, name: Optional[str] = None) -> Tensor:
        """The elements stacked, of shape ``[size, *element_shape]`` when the size is known while
        building (an array of constant size, not ``dynamic_size``, whatever loops and conds carried it;
        or an unstack of a tensor whose leading dimension is known), as TensorFlow 1's ``stack`` is.
        An array no write reached (a loop that ran no iteration) stacks to ``[0, *element_shape]``
        where the writes building it give the element shape, as in TensorFlow 1; else it is an error.
        Why: with ``[?, *element_shape]`` a loop variable that meets the stack (``v + stack``, a
        ``[2, 1, 3]`` and a ``[?, 1]`` giving ``[2, ?, 3]``) no longer fit its own entry shape."""
        size = static_size(self.tensor)
        attrs: dict[str, Any] = {} if size is None else {"static_size": size}
        es = self.element_shape
        if es is not None and all(d is not None for d in es):  # (what an array that stays empty stacks to)
            attrs["element_shape"] = list(es)
        return self.tensor.graph.create_node("TensorArrayStack", [self.tensor], attrs,
                                             name=name or "ta_stack").outputs[0]

    def unstack(self, value: Any, name: Optional[str] = None) -> TensorArray:
        """A TensorArray whose slot i is ``value[i]`` (its size is ``value``'s leading dimension).

        It fills this TensorArray, so ``value`` must fit what it declares: its dtype, its element
        shape and, when both are known while building, its size; and nothing may have been written to
        it (slots are write-once). Why checked here: the result is a new TensorArray made from
        ``value`` alone, so a float32 TensorArray of size 2 unstacking three int32 values used to
        become an int32 TensorArray of size 3, silently."""
        from turnout.ops import convert_to_tensor

        v = convert_to_tensor(value, dtype=self.dtype) if not isinstance(value, Tensor) else value
        where = f"TensorArray.unstack into {self.tensor.name}"
        if self.tensor.node.op != "TensorArrayNew":
            raise GraphBuildError(f"{where}: it was written to (slots are write-once); unstack into a new "
                                  "tn.TensorArray")
        if v.dtype != self.dtype:
            raise DTypeError(f"{where}: a tensor of {v.dtype.name} into a TensorArray of {self.dtype.name}")
        if v.shape is not None and len(v.shape) > 0:
            if not sh.compatible(tuple(v.shape[1:]), self.element_shape):
                raise ShapeError(f"{where}: elements of shape {sh.fmt(tuple(v.shape[1:]))} into a TensorArray "
                                 f"of elements {sh.fmt(self.element_shape)}")
            size = static_size(self.tensor)
            if size is not None and v.shape[0] is not None and v.shape[0] != size:
                raise ShapeError(f"{where}: {v.shape[0]} elements into a TensorArray of size {size}")
        if not self.tensor.node.attrs.get("dynamic_size") and not _count_known(v, self.tensor):
            v = with_length(v, self.tensor.node.inputs[0], f"{where}: the number of elements is not the "
                            "TensorArray's size", name="ta_unstack_count")
        node = v.graph.create_node("TensorArrayUnstack", [v], name=name or "ta_unstack")
        return TensorArray(_tensor=node.outputs[0])

    def size(self, name: Optional[str] = None) -> Tensor:
        """The number of slots, as a run-time int32 scalar (a dynamic-size array's size is known only when it runs)."""
        return self.tensor.graph.create_node("TensorArraySize", [self.tensor], name=name or "ta_size").outputs[0]

    def gather(self, indices: Any, name: Optional[str] = None) -> Tensor:
        """``stack([ta.read(i) for i in indices])``, TensorFlow's ``TensorArray.gather``: the elements at
        ``indices``, an int32 vector of a length known while building, each read as ``read`` reads
        it (a slot out of range or never written is a KernelError), so gradients and every backend
        need nothing new. Why reads, not a slice of ``stack()``: gathering needs only its slots
        written."""
        from turnout.ops import stack

        idx = self._index_vector(indices, "gather")
        return stack([self.read(idx[k]) for k in range(_length(idx))], name=name)

    def scatter(self, indices: Any, value: Any, name: Optional[str] = None) -> TensorArray:
        """This TensorArray with ``value[k]`` written at ``indices[k]`` for each ``k`` (TensorFlow's
        ``TensorArray.scatter``): ``write`` after ``write``, so a slot written twice is a KernelError as
        there. ``value``'s leading dimension must be the number of indices (checked when it runs
        where it is not known while building: a longer value lost its last rows silently)."""
        from turnout.ops import constant, convert_to_tensor

        idx = self._index_vector(indices, "scatter")
        n = _length(idx)
        v = convert_to_tensor(value, dtype=self.dtype) if not isinstance(value, Tensor) else value
        where = f"TensorArray.scatter into {self.tensor.name}"
        if v.shape is None or len(v.shape) == 0 or v.shape[0] != n:
            if v.shape is not None and (len(v.shape) == 0 or v.shape[0] is not None):
                raise ShapeError(f"{where}: {n} indices for a value of shape {sh.fmt(v.shape)}")
            v = with_length(v, constant(n), f"{where}: the value's leading dimension is not the number of indices")
        ta = self
        for k in range(n):
            ta = ta.write(idx[k], v[k], name=name if k == n - 1 else None)
        return ta

    def concat(self, name: Optional[str] = None) -> Tensor:
        """The elements joined along their first axis (TensorFlow's ``TensorArray.concat``): of shape
        ``[size * d0, *rest]`` for elements of shape ``[d0, *rest]``. Elements share one shape here, so
        it is ``stack()`` with its first two axes merged, and gradients and every backend need nothing
        new. A scalar element has no axis to join: a ShapeError."""
        from turnout.ops import concat, shape, stack

        es = self.element_shape
        if es is not None and len(es) == 0:
            raise ShapeError(f"TensorArray.concat of {self.tensor.name}: its elements are scalars, with no axis "
                             "to join (stack them)")
        stacked = self.stack(name=None if name is None else f"{name}_stack")
        dims = stacked.shape
        if dims is not None and all(d is not None for d in dims):
            return _reshaped(stacked, [dims[0] * dims[1], *dims[2:]], name)  # type: ignore[operator]
        s = shape(stacked)
        return _reshaped(stacked, concat([stack([s[0] * s[1]]), s[2:]], 0), name)

    def split(self, value: Any, lengths: Any, name: Optional[str] = None) -> TensorArray:
        """A TensorArray whose slot ``i`` holds the next ``lengths[i]`` rows of ``value`` (TensorFlow's
        ``TensorArray.split``), ``lengths`` an int vector of a length known while building. Elements
        share one shape here, so every length must be the same (checked while building where
        ``lengths`` is a constant, else when it runs: a KernelError), and their sum must be
        ``value``'s number of rows; it is then ``unstack`` of ``value`` cut into equal pieces."""
        from turnout.ops import assert_true, convert_to_tensor, equal, reduce_all

        v = convert_to_tensor(value, dtype=self.dtype) if not isinstance(value, Tensor) else value
        lens = self._index_vector(lengths, "split", "lengths")
        n = _length(lens)
        where = f"TensorArray.split into {self.tensor.name}"
        if v.shape is not None and len(v.shape) == 0:
            raise ShapeError(f"{where}: a scalar has no rows to split")
        known = np.asarray(lens.node.attrs["value"]).ravel() if lens.node.op == "Const" else None
        if known is not None:
            if len(set(known.tolist())) > 1:
                raise ShapeError(f"{where}: lengths {known.tolist()} differ; a Turnout TensorArray's elements "
                                 "share one shape")
            piece = int(known[0]) if n else 0
            if piece < 0:
                raise ShapeError(f"{where}: a negative length {piece}")
            rows = n * piece
            if v.shape is not None and v.shape[0] is not None and v.shape[0] != rows:
                raise ShapeError(f"{where}: lengths summing to {rows} for a value of {v.shape[0]} rows")
            if v.shape is None or v.shape[0] is None:
                v = with_length(v, _scalar(rows), f"{where}: the value's rows are not the lengths' sum")
            rest = None if v.shape is None else v.shape[1:]
            if rest is not None and all(d is not None for d in rest):
                return self.unstack(_reshaped(v, [n, piece, *rest], None), name=name)  # type: ignore[list-item]
            return self.unstack(_reshaped(v, _cut_shape(v, _scalar(n), _scalar(piece)), None), name=name)
        piece_t = lens[0] if n else _scalar(0)
        same = assert_true(reduce_all(equal(lens, piece_t)), v, f"{where}: the lengths differ; a Turnout "
                           "TensorArray's elements share one shape", data=[lens], name="split_lengths_check")
        checked_v = with_length(same, _scalar(n) * piece_t, f"{where}: the value's rows are not the lengths' sum")
        return self.unstack(_reshaped(checked_v, _cut_shape(checked_v, _scalar(n), piece_t), None), name=name)

    def identity(self, name: Optional[str] = None) -> TensorArray:
        """The same array as a new value (TensorFlow's ``TensorArray.identity``): a point to hang control
        edges on, as ``tn.identity`` is for a tensor."""
        from turnout.ops import identity

        return TensorArray(_tensor=identity(self.tensor, name=name or "ta_identity"))

    def close(self, name: Optional[str] = None) -> Any:
        """A node that does nothing (TensorFlow's ``TensorArray.close``, which frees the array's
        resource): a TensorArray here is a value, freed when nothing reads it, so there is nothing to
        close. Returned so that TensorFlow 1 code may run it or wait on it."""
        from turnout.ops import no_op

        return no_op(name=name or "ta_close")

    def _index_vector(self, indices: Any, what: str, noun: str = "indices") -> Tensor:
        from turnout.ops import convert_to_tensor

        idx = convert_to_tensor(indices, dtype=dt.int32)
        if idx.shape is None or len(idx.shape) != 1 or idx.shape[0] is None:
            raise GraphBuildError(f"TensorArray.{what}: {noun} must be an int32 vector whose length is known while "
                                  f"building, got {idx.name} of shape {sh.fmt(idx.shape)}")
        return idx

    def __repr__(self) -> str:
        return f"<tn.TensorArray {self.tensor.name} of {self.dtype.name}{sh.fmt(self.element_shape)}>"


def _int_operand(x: Any, builder: str, argument: str) -> Tensor:
    """A size or an index of a TensorArray op: a tensor passes as it is, so that the op's shape rule
    names a wrong dtype or shape with the op and the operand (``shape_rules.SCALAR_OPERANDS``); any
    other value becomes an int32 tensor, or a GraphBuildError naming ``builder`` and ``argument``
    (a tensor of another dtype was "expected a int32 tensor", naming neither)."""
    from turnout.ops import convert_argument

    return x if isinstance(x, Tensor) else convert_argument(x, builder, argument, dtype=dt.int32)


def _scalar(k: int) -> Tensor:
    from turnout.ops import constant

    return constant(k, dtype=dt.int32)


def _reshaped(x: Tensor, shape: Any, name: Optional[str]) -> Tensor:
    """``x`` reshaped to ``shape``: a list of ints, known while building (``Reshape``, whose result
    keeps its static shape), or an int32 vector computed when it runs (``ReshapeTo``)."""
    from turnout.ops import reshape

    if isinstance(shape, list):
        return reshape(x, shape, name=name)
    return x.graph.create_node("ReshapeTo", [x, shape], name=name or "ta_reshape").outputs[0]


def _cut_shape(v: Tensor, n: Tensor, piece: Tensor) -> Tensor:
    """``[n, piece, *v.shape[1:]]``, computed when it runs: ``v``'s rows as ``n`` pieces of ``piece``."""
    from turnout.ops import concat, shape, stack

    return concat([stack([n, piece]), shape(v)[1:]], 0)


def _length(v: Tensor) -> int:
    """The static length of a vector that ``_index_vector`` accepted."""
    assert v.shape is not None and v.shape[0] is not None
    return int(v.shape[0])


def _count_known(v: Tensor, ta: Tensor) -> bool:
    """Whether the builder has already checked that ``v`` has as many elements as ``ta`` has slots."""
    size = static_size(ta)
    return size is not None and v.shape is not None and len(v.shape) > 0 and v.shape[0] == size


def with_length(v: Tensor, n: Tensor, message: str, name: str = "length_check") -> Tensor:
    """``v``, once its leading dimension is ``n`` when it runs; else a KernelError on every backend,
    whose data are the expected length, then the one found. Why one check: an unstack of a count known
    only at run time into a TensorArray of another size, and elems of different run-time lengths given
    to map_fn/scan/fold, were both silent (a longer value made a larger array, or lost its last
    elements) where TensorFlow fails."""
    from turnout.ops import assert_true, equal, shape

    found = shape(v)[0]
    return assert_true(equal(found, n), v, message, data=[n, found], name=name)


#: Ops whose TensorArray output has the size of their first input's array (writes, and the frame and
#: cond plumbing a TensorArray value crosses).
_SAME_SIZE = frozenset({"TensorArrayWrite", "TensorArrayAccumulate", "Enter", "Exit", "NextIteration", "Switch",
                        "Identity"})
#: Ops whose TensorArray output has the size of all their array inputs, when they agree.
_JOIN_SIZE = frozenset({"Merge", "TensorArrayAdd"})


def static_size(t: Tensor) -> Optional[int]:
    """The number of slots TensorArray value ``t`` has whenever it runs, when the graph fixes it while
    building: traced back through writes, loop frames and conds to a ``TensorArrayNew`` of constant
    size that is not ``dynamic_size``, or to an unstack of a tensor of known leading dimension. A
    Merge's inputs must agree (a loop's back edge, met again on the way round, says nothing). None
    where it is not fixed."""
    unknown, any_size = object(), object()
    seen: set[int] = set()

    def walk(t: Tensor) -> Any:
        n = t.node
        while n.op in _SAME_SIZE and n.inputs:
            if id(n) in seen:
                return any_size
            seen.add(id(n))
            n = n.inputs[0].node
        if n.op == "TensorArrayNew":
            size = n.inputs[0]
            if n.attrs.get("dynamic_size") or size.node.op != "Const":
                return unknown
            return int(np.asarray(size.node.attrs["value"]))
        if n.op == "TensorArrayUnstack":
            shape = n.inputs[0].shape
            return unknown if shape is None or not shape or shape[0] is None else int(shape[0])
        if n.op in _JOIN_SIZE:
            if id(n) in seen:
                return any_size
            seen.add(id(n))
            sizes = {walk(x) for x in n.inputs} - {any_size}
            return sizes.pop() if len(sizes) == 1 else (unknown if sizes else any_size)
        return unknown

    got = walk(t)
    return got if isinstance(got, int) else None


def unstack(value: Any, name: Optional[str] = None) -> TensorArray:
    """A TensorArray whose elements are the slices of ``value`` along its first axis (``tf.TensorArray.unstack``),
    the input ``scan`` and ``map_fn`` read their elements from."""
    from turnout.ops import convert_to_tensor

    v = convert_to_tensor(value)
    node = (v.graph if isinstance(v, Tensor) else get_default_graph()).create_node(
        "TensorArrayUnstack", [v], name=name or "ta_unstack")
    return TensorArray(_tensor=node.outputs[0])


def to_graph_value(v: Any) -> Any:
    """TensorArray -> its tensor (builders thread tensors through the primitives)."""
    return v.tensor if isinstance(v, TensorArray) else v


def from_graph_value(t: Tensor) -> Any:
    """A tensor of TensorArray type -> a TensorArray object (what user functions see)."""
    return TensorArray(_tensor=t) if t.dtype == dt.tensor_array else t
