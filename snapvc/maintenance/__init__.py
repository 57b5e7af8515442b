"""Maintenance of a repository: garbage collection (``gc``) and integrity checks (``fsck``).

``Repository.gc()`` and ``Repository.fsck()`` delegate here; results are values
(``GcReport``, ``FsckReport``) to inspect, print or turn into JSON.
"""

from snapvc.maintenance.fsck import FsckReport, Problem, salvage
from snapvc.maintenance.gc import GcPlan, GcReport, Keep, Rewrite

__all__ = ["GcPlan", "GcReport", "Keep", "Rewrite", "FsckReport", "Problem", "salvage"]
