"""Placement as a GraphDef records it: ``NodeDef.device`` strings and ``_class`` colocation attrs.

Why a module of its own: the importer keeps both on the Turnout nodes (``Node.device``,
``Graph.colocation``), so that ``tn.Session(graph, devices=[...])`` places an imported model where
TensorFlow placed it, and the exporter writes them back; the mapping from TensorFlow's device names to
Turnout's is one function, used by both and documented in docs/interop.rst.

TensorFlow's device names and Turnout's share a syntax (``/job:worker/task:1/device:CPU:0``), with
differences that ``tf_device`` settles:

* ``""`` (no annotation) is no device: the node is placed by Turnout's rules (or an outer ``tn.device``
  scope of the import).
* the parts may come in any order; a missing or ``*`` job, task or index means the local job
  (``localhost``), task 0, index 0, as Turnout reads a missing part;
* ``/replica:0`` is dropped (Turnout has no replicas); another replica is refused;
* TensorFlow's XLA devices (``XLA_CPU``, ``XLA_GPU``) are the CPU and GPU they compile for;
* the legacy short forms (``/cpu:0``, ``/gpu:1``) are those devices.

A name that reads as none of these is a ``PlacementError`` naming the node and the string.
"""

from __future__ import annotations

import re
from typing import Optional

from turnout.devices.names import DeviceSpec, parse
from turnout.errors import PlacementError

_JOB = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
#: TensorFlow device types that run on a device Turnout names otherwise
_TYPE_ALIASES = {"XLA_CPU": "CPU", "XLA_GPU": "GPU"}
#: what a ``_class`` colocation entry starts with
LOC_PREFIX = "loc:@"


def tf_device(name: str, where: str = "a device annotation", scope: Optional[str] = None) -> Optional[str]:
    """The Turnout device name for TensorFlow's device string ``name`` (see the module docstring), or
    None for ``""``. The string is kept as written when Turnout reads it to the same device, so an
    exported GraphDef carries what was imported; otherwise it is the canonical Turnout name. ``where``
    names the node in the error for a string that is not a device name.

    ``scope``: the Turnout device scope the import runs under (``tn.device``), or None. A partial
    annotation takes the parts it does not name (job, task, device type and index) from the scope, as
    TensorFlow merges a node's device into the device scope of ``tf.import_graph_def``; an annotation
    naming every part, or none, is as without a scope (``""`` is then the scope's, by the graph)."""
    if not isinstance(name, str):
        raise PlacementError(f"{where}: a device name must be a string, got {type(name).__name__}")
    text = name.strip()
    if not text:
        return None
    spec, given = _parse_tf(text, where)
    if scope is not None and given != _ALL_PARTS:
        outer = parse(scope)
        merged = DeviceSpec(job=spec.job if "job" in given else outer.job,
                            task=spec.task if "task" in given else outer.task,
                            type=spec.type if "device" in given else outer.type,
                            index=spec.index if "device" in given else outer.index)
        if merged != spec:
            return merged.name
    try:
        if parse(text) == spec:
            return text
    except PlacementError:
        pass
    return spec.name


#: the parts a TensorFlow device string may name (``_parse_tf``)
_ALL_PARTS = frozenset({"job", "task", "device"})


def _parse_tf(text: str, where: str) -> tuple[DeviceSpec, frozenset[str]]:
    """TensorFlow's grammar of full device names (components in any order, each at most once): the
    device, and which of job, task and device (type and index) the string named."""
    def bad(why: str) -> PlacementError:
        return PlacementError(f"{where}: cannot read TensorFlow device {text!r} ({why}); TensorFlow device names "
                              "look like '/job:worker/replica:0/task:1/device:CPU:0', '/device:GPU:0' or '/cpu:0'")

    if not text.startswith("/"):
        text = "/" + text
    seen: dict[str, str] = {}
    for part in text.split("/")[1:]:
        key, sep, value = part.partition(":")
        if not sep:
            raise bad(f"component {part!r} has no ':'")
        low = key.lower()
        if low in ("job", "replica", "task"):
            field = low
        elif low == "device":
            field = "device"
            if value.count(":") != 1:
                raise bad(f"'/device:' needs a type and an index, got {value!r}")
        elif _TYPE.match(key) and ":" not in value:  # the legacy '/cpu:0'
            field, value = "device", f"{key}:{value}"
        else:
            raise bad(f"unknown component {part!r}")
        if field in seen:
            raise bad(f"{field} is given twice")
        seen[field] = value
    job = seen.get("job", "*")
    if job != "*" and not _JOB.match(job):
        raise bad(f"job name {job!r}")
    numbers: dict[str, int] = {}
    for field in ("replica", "task"):
        v = seen.get(field, "*")
        if v != "*" and not v.isdigit():
            raise bad(f"{field} {v!r} is not a number")
        numbers[field] = 0 if v == "*" else int(v)
    if numbers["replica"] != 0:
        raise bad("Turnout has no replicas: only replica 0 reads as a Turnout device")
    dtype, index = "CPU", 0
    if "device" in seen:
        dtype, _, idx = seen["device"].partition(":")
        if not _TYPE.match(dtype):
            raise bad(f"device type {dtype!r}")
        dtype = _TYPE_ALIASES.get(dtype.upper(), dtype.upper())
        if not dtype.isalpha():
            raise bad(f"device type {dtype!r} has no Turnout counterpart")
        if idx != "*" and not idx.isdigit():
            raise bad(f"device index {idx!r} is not a number")
        index = 0 if idx == "*" else int(idx)
    spec = DeviceSpec(job="localhost" if job == "*" else job, task=numbers["task"], type=dtype, index=index)
    return spec, frozenset(k for k in seen if k in _ALL_PARTS and seen[k] != "*")


def colocation_targets(values: list[str]) -> list[str]:
    """The node names of a ``_class`` attr's ``loc:@name`` entries (other entries are not placement)."""
    return [v[len(LOC_PREFIX):] for v in values if isinstance(v, str) and v.startswith(LOC_PREFIX)]


__all__ = ["LOC_PREFIX", "colocation_targets", "tf_device"]
