"""snapvc: a git-like, content-addressed snapshot repository for AI-agent state.

    import snapvc
    repo = snapvc.open("agent.snapvc")
    repo.commit({"messages": [...]}, branch="main", message="step 1", metadata={"step": 1})
    state = repo.checkout("main")

See ``docs/`` and ``DESIGN.md`` for the model: objects, refs, commits.
"""

from __future__ import annotations

from snapvc.diff import Change
from snapvc.encoding.adapters import register_type
from snapvc.encoding.reader import MapView, SeqView
from snapvc.errors import (
    AmbiguousRevisionError,
    CorruptObjectError,
    FormatVersionError,
    InvalidRefNameError,
    InvalidRevisionError,
    NotARepositoryError,
    ObjectError,
    ObjectNotFoundError,
    RefConflictError,
    RefError,
    RefExistsError,
    RefNotFoundError,
    RepositoryError,
    RepositoryNotFoundError,
    RevisionError,
    SnapvcError,
    UnknownRevisionError,
    UnknownTypeError,
    UnsupportedValueError,
)
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.refs.base import ReflogEntry
from snapvc.repository import Repository, RepoStats, open

__version__ = "0.1.0"

__all__ = [
    "open",
    "Repository",
    "Commit",
    "Change",
    "ObjectId",
    "RepoStats",
    "ReflogEntry",
    "MapView",
    "SeqView",
    "register_type",
    "SnapvcError",
    "UnsupportedValueError",
    "UnknownTypeError",
    "RepositoryError",
    "RepositoryNotFoundError",
    "NotARepositoryError",
    "FormatVersionError",
    "ObjectError",
    "ObjectNotFoundError",
    "CorruptObjectError",
    "RevisionError",
    "UnknownRevisionError",
    "AmbiguousRevisionError",
    "InvalidRevisionError",
    "RefError",
    "InvalidRefNameError",
    "RefNotFoundError",
    "RefExistsError",
    "RefConflictError",
    "__version__",
]
