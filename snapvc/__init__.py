"""snapvc: a git-like, content-addressed snapshot repository for AI-agent state.

    import snapvc
    repo = snapvc.open("agent.snapvc")
    repo.commit({"messages": [...]}, branch="main", message="step 1", metadata={"step": 1})
    state = repo.checkout("main")

    work = repo.state("main")           # a working copy: dotted paths, cheap snapshots
    work.set("research.findings", ["a"])
    checkpoint = work.snapshot(message="step 2")

    thread = repo.thread("run-001", session="s-1")   # an agent framework's thread id
    thread.latest, thread.get(version=1), thread.list_versions()
    snapvc.Runner(thread, [fetch, analyze, report]).run()   # a checkpoint per step; resumes

``snapvc.aio`` has the same operations as coroutines.

The public API is what this module exports (``__all__``), with ``snapvc.aio``,
``snapvc.errors`` and ``snapvc.integrations.*``. Every other module is internal: its
names may move between releases (``docs/design.md`` maps them, layer by layer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snapvc.encoding.adapters import register_type
from snapvc.encoding.jsonable import from_jsonable, to_jsonable
from snapvc.encoding.reader import MapView, SeqView
from snapvc.lazy import lazy_names
from snapvc.errors import (
    AmbiguousRevisionError,
    CorruptObjectError,
    DamagedRowsError,
    ExtraMissingError,
    FormatVersionError,
    InvalidArgumentError,
    InvalidCommitError,
    InvalidObjectIdError,
    InvalidRefNameError,
    InvalidRevisionError,
    InvalidStepError,
    MalformedJsonError,
    NotARepositoryError,
    ObjectError,
    ObjectNotFoundError,
    PatchError,
    GitError,
    PathError,
    PushRejectedError,
    RefConflictError,
    RefError,
    RefExistsError,
    RefNotFoundError,
    RepositoryError,
    RepositoryFolderError,
    RepositoryNotFoundError,
    ResumeError,
    RevisionError,
    RunnerError,
    SnapvcError,
    StepContractError,
    UnknownRevisionError,
    UnsupportedOperationError,
    RequestRefusedError,
    CheckpointNotFoundError,
    TypeAdapterError,
    UnknownTypeError,
    NumpyMissingError,
    UnsafeGcError,
    UnsupportedValueError,
)
from snapvc.repository.history import HistoryEntry
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.refs.base import ReflogEntry
from snapvc.api import Repository, clone, import_git, open
from snapvc.agent.state import Checkpoint, State
from snapvc.agent.threads import Session, Thread, parse_thread_branch, thread_branch

if TYPE_CHECKING:
    from snapvc import aio
    from snapvc.agent.runner import END, Runner, Step
    from snapvc.diff.changes import Change, KeyChanges, key_changes
    from snapvc.diff.merge import ABSENT, Conflict, MergeResult, merge_values
    from snapvc.diff.patch import DiffStat, apply_changes, apply_patch, diff_stat, to_json_patch
    from snapvc.maintenance import FsckReport, GcReport, Keep
    from snapvc.maintenance.git.results import ExportResult, ImportResult
    from snapvc.maintenance.stats import BranchStats, RepoStats
    from snapvc.maintenance.sync import FetchResult, PullResult, PushResult, Remote, TransferStats

# Public names whose module loads when one is first read, not with ``import snapvc``
# (``snapvc.lazy``): a process that commits and checks out does not pay for diffs,
# merges, maintenance, the runner or asyncio (``snapvc.aio``).
_LAZY: dict[str, str] = {
    "aio": "snapvc.aio",
    **dict.fromkeys(("END", "Runner", "Step"), "snapvc.agent.runner"),
    **dict.fromkeys(("Change", "KeyChanges", "key_changes"), "snapvc.diff.changes"),
    **dict.fromkeys(("ABSENT", "Conflict", "MergeResult", "merge_values"), "snapvc.diff.merge"),
    **dict.fromkeys(("DiffStat", "apply_changes", "apply_patch", "diff_stat", "to_json_patch"), "snapvc.diff.patch"),
    "FsckReport": "snapvc.maintenance.fsck",
    **dict.fromkeys(("GcReport", "Keep"), "snapvc.maintenance.gc"),
    **dict.fromkeys(("ExportResult", "ImportResult"), "snapvc.maintenance.git.results"),
    **dict.fromkeys(("BranchStats", "RepoStats"), "snapvc.maintenance.stats"),
    **dict.fromkeys(("FetchResult", "PullResult", "PushResult", "Remote", "TransferStats"), "snapvc.maintenance.sync"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__version__ = "0.1.0"

__all__ = [
    "open",
    "Repository",
    "Commit",
    "Change",
    "merge_values",
    "Conflict",
    "MergeResult",
    "ABSENT",
    "HistoryEntry",
    "apply_changes",
    "apply_patch",
    "to_json_patch",
    "diff_stat",
    "DiffStat",
    "KeyChanges",
    "key_changes",
    "ObjectId",
    "RepoStats",
    "BranchStats",
    "import_git",
    "ExportResult",
    "ImportResult",
    "Keep",
    "GcReport",
    "FsckReport",
    "ReflogEntry",
    "State",
    "Checkpoint",
    "Thread",
    "Session",
    "thread_branch",
    "parse_thread_branch",
    "Runner",
    "Step",
    "END",
    "aio",
    "MapView",
    "SeqView",
    "register_type",
    "to_jsonable",
    "from_jsonable",
    "SnapvcError",
    "InvalidArgumentError",
    "InvalidObjectIdError",
    "UnsupportedValueError",
    "UnknownTypeError",
    "NumpyMissingError",
    "ExtraMissingError",
    "TypeAdapterError",
    "MalformedJsonError",
    "PathError",
    "PatchError",
    "InvalidCommitError",
    "GitError",
    "UnsupportedOperationError",
    "RequestRefusedError",
    "RunnerError",
    "InvalidStepError",
    "StepContractError",
    "ResumeError",
    "RepositoryError",
    "RepositoryNotFoundError",
    "RepositoryFolderError",
    "NotARepositoryError",
    "FormatVersionError",
    "DamagedRowsError",
    "UnsafeGcError",
    "ObjectError",
    "ObjectNotFoundError",
    "CorruptObjectError",
    "RevisionError",
    "UnknownRevisionError",
    "CheckpointNotFoundError",
    "AmbiguousRevisionError",
    "InvalidRevisionError",
    "RefError",
    "InvalidRefNameError",
    "RefNotFoundError",
    "RefExistsError",
    "RefConflictError",
    "PushRejectedError",
    "clone",
    "Remote",
    "PushResult",
    "FetchResult",
    "PullResult",
    "TransferStats",
    "__version__",
]
