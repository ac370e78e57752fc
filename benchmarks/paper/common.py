"""What the paper experiments share: forced host devices, where results and plots go.

Why a flag before jax: XLA reads ``--xla_force_host_platform_device_count`` once, when jax is first
imported, so every experiment calls ``force_host_devices`` before it imports jax or ``turnout.fast``.
On a GPU machine the flag only adds host devices; the GPUs are used where an experiment asks for them.

Results go to ``benchmarks/results/paper/<name>.json`` (untracked); a plot goes there too, and to
``docs/_static/paper/<name>.png`` when the run is asked to refresh the docs (``--docs``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "paper")
DOCS_STATIC = os.path.join(ROOT, "docs", "_static", "paper")


def force_host_devices(n: int = 8) -> None:
    """Ask XLA for ``n`` host (CPU) devices; must run before jax is imported."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" in flags:
        return  # already asked for (the test suite's conftest, or an earlier call)
    if "jax" in sys.modules:
        raise RuntimeError("force_host_devices must run before jax is imported")
    os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={n}").strip()


def write_results(name: str, data: dict[str, Any]) -> str:
    """Write ``data`` (with the machine description) to ``benchmarks/results/paper/<name>.json``."""
    from benchmarks.common import machine

    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump({"machine": machine(), **data}, f, indent=2)
    return path


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files (the Agg backend), or None, said once, when the optional
    ``plots`` extra is not installed: the experiments' figures do not depend on it."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[plots]'): no plot")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_plot(fig: Any, name: str, docs: bool = False) -> list[str]:
    """Save a matplotlib figure as ``<name>.png`` under the results folder (and the docs' when ``docs``)."""
    paths = [os.path.join(RESULTS, f"{name}.png")]
    if docs:
        paths.append(os.path.join(DOCS_STATIC, f"{name}.png"))
    for p in paths:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fig.savefig(p, dpi=110, bbox_inches="tight")
    return paths
