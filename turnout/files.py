"""File names handed to the readers and writers of outside data, checked before any file is opened.

Why one function: every reader and writer (``tn.load``/``tn.save``, ``tn.checkpoint.read``/``save``,
the TensorFlow checkpoint functions, ``import_graph_def`` of a path, ``read_events``) takes a path,
and each used to pass it straight to ``open``. An ``int`` there opened that file descriptor, ``None``
reached Python's ``TypeError``, a name with a NUL byte Python's ``ValueError``, and a ``bytes`` path
became the text ``"b'...'"`` in the names the TensorFlow checkpoint functions build from a prefix. Here
a path is a ``str`` (or an ``os.PathLike`` or ``bytes`` decoded as the file system does), or an
``ArgumentError`` naming the function; a NUL byte is a ``SerializationError``, as an unreadable file is.
"""

from __future__ import annotations

import os
from typing import Any

from turnout.errors import ArgumentError, SerializationError


def file_path(path: Any, who: str, param: str = "path") -> str:
    """``path`` as the ``str`` file name that ``who`` (the public function, for messages) reads or
    writes; ``param`` names the argument."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        raise ArgumentError(f"{who}: {param} must be a file name (a str or an os.PathLike), "
                            f"got {type(path).__name__} {path!r:.60}")
    if "\0" in path:
        raise SerializationError(f"{who}: cannot read or write {path!r}: a file name cannot hold a NUL byte")
    return path
