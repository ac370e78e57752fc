"""Import rules of TensorFlow's structure ops of TF1 model code (filled in below)."""

from __future__ import annotations
