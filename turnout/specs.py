"""A tensor's static type: its dtype and shape (``TensorSpec``).

Why a module of its own: graphs carry specs on their tensors, and the shape rules
(``turnout.shape_rules``) compute them from the specs of their inputs; a graph creates each node with
the rules' specs. Kept apart from both, the spec is what the two share, and neither imports the other
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from turnout import dtypes as _dt
from turnout import shapes as _sh


@dataclass(frozen=True)
class TensorSpec:
    """Static type of a tensor. For TensorArray values, elem_* describe the elements."""

    dtype: _dt.DType
    shape: _sh.Shape
    elem_dtype: Optional[_dt.DType] = None
    elem_shape: _sh.Shape = None


__all__ = ["TensorSpec"]
