"""Devices, placement and partitioned execution (docs/design.rst, "Devices").

Not built yet: no issue has scheduled it. The fast backend compiles the whole graph for one device.
See docs/missing.rst.
"""
