"""What an export to git or an import from git reports (no dulwich needed to name them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from snapvc.ids import ObjectId

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
        text = f"{self.commits} new commits ({self.objects} objects) written to {self.path}; {len(self.refs)} refs"
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
        return (f"{self.commits} commits read ({self.new} new); {len(self.branches)} branches, "
                f"{len(self.tags)} tags" + (f"; {len(self.inexact)} rebuilt inexactly" if self.inexact else ""))
