"""TensorFlow interop: GraphDef import and export, and TensorBoard event files.

``import_graph_def`` reads a TensorFlow v1 GraphDef (``.pb`` / ``.pbtxt``) with its control flow into
a Turnout graph that every backend runs; ``export_graph_def`` writes a Turnout graph (gradients
included) as a GraphDef that TensorFlow v1 runs and TensorBoard draws; ``EventWriter`` writes scalar
summaries (and the graph) to a TensorBoard event file. The protobuf definitions come from the ``tf``
extra (``pip install 'turnout[tf]'``); TensorFlow itself is never needed. See docs/interop.rst.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Lazy: the importer and exporter (with their rule tables) load on first use.
    if name in ("import_graph_def", "ImportedGraph", "parse_graph_def", "unsupported_ops"):
        from turnout.graphdef import importer

        return getattr(importer, name)
    if name == "SUPPORTED_OPS":
        from turnout.graphdef import importer

        return frozenset(importer.IMPORT_RULES)
    if name in ("export_graph_def", "EXPORTABLE_PRIMITIVES"):
        from turnout.graphdef import exporter

        return exporter.export_graph_def if name == "export_graph_def" else frozenset(exporter.EXPORT_RULES)
    if name == "EventWriter":
        from turnout.graphdef.events import EventWriter

        return EventWriter
    raise AttributeError(f"module 'turnout.graphdef' has no attribute {name!r}")
