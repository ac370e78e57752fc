"""The builders: cond, case, while_loop, scan/map_fn/foldl, TensorArray, lowered to the primitives."""
