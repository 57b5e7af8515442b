"""Maintenance of a repository: garbage collection (``gc``) and integrity checks (``fsck``).

``Repository.gc()`` and ``Repository.fsck()`` delegate here; results are values
(``GcReport``, ``FsckReport``) to inspect, print or turn into JSON.
"""

from typing import TYPE_CHECKING

from snapvc.lazy import lazy_names

if TYPE_CHECKING:
    from snapvc.maintenance.fsck import FsckReport, Problem, salvage
    from snapvc.maintenance.gc import GcPlan, GcReport, Keep, Rewrite

__all__ = ["GcPlan", "GcReport", "Keep", "Rewrite", "FsckReport", "Problem", "salvage"]

# Loaded when first read: a module of this package (``stats``, ``graph``) does not load
# gc, fsck and sync with it.
__getattr__, __dir__ = lazy_names(__name__, {
    **dict.fromkeys(("FsckReport", "Problem", "salvage"), "snapvc.maintenance.fsck"),
    **dict.fromkeys(("GcPlan", "GcReport", "Keep", "Rewrite"), "snapvc.maintenance.gc"),
})
