"""Devices, placement and partitioned execution (DESIGN.md section 7).

Not built yet: no issue has scheduled it. The fast backend compiles the whole graph for one device.
See docs/missing.rst.
"""
