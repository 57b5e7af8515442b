"""What an export to git or an import from git reports (no dulwich needed to name them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from snapvc.ids import ObjectId
from snapvc.maintenance.stats import plural

__all__ = ["ExportResult", "ImportResult"]


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What ``export_git`` did: the git repository's ``path``; ``commits`` written
    (new to it), ``objects`` written in all, the ``refs`` set (name → git commit sha,
    hex) and, after a push, the refs the remote took (``pushed``)."""

    path: str
    commits: int
    objects: int
    refs: dict[str, str]
    pushed: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        text = (f"{plural(self.commits, 'new commit')} ({plural(self.objects, 'object')}) written to {self.path}; "
                f"{plural(len(self.refs), 'ref')}")
        return text + (f"; pushed {', '.join(self.pushed)}" if self.pushed else "")


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What ``import_git`` did: ``commits`` read from git, of which ``new`` were not in
    the repository yet; the ``branches`` and ``tags`` set (name → snapvc commit id);
    ``inexact``: git commits that carry a ``Snapvc-Commit`` trailer but rebuilt to
    another id (their history was changed in git after the export)."""

    commits: int
    new: int
    branches: dict[str, ObjectId]
    tags: dict[str, ObjectId]
    inexact: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (f"{plural(self.commits, 'commit')} read ({self.new:,} new); "
                f"{plural(len(self.branches), 'branch', 'branches')}, {plural(len(self.tags), 'tag')}"
                + (f"; {len(self.inexact):,} rebuilt inexactly" if self.inexact else ""))
