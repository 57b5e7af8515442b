"""The public ``Repository``: the repository core and everything the layers above it do
with a repository, as methods — threads and the working copy (``snapvc.agent``), gc,
fsck, stats, sync and git (``snapvc.maintenance``) — and ``open``, ``clone`` and
``import_git``. ``snapvc/__init__.py`` exports these; this is the one module that knows
every layer, so that none of those layers needs to know the public class.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from snapvc.agent.state import Checkpoint, State, checkpoint_at
from snapvc.agent.threads import Session, Thread, delete_thread, threads_of
from snapvc.encoding.paths import StatePath
from snapvc.encoding.reader import Loader
from snapvc.ids import ObjectId
from snapvc.refs.names import short_name
from snapvc.repository.core import RepositoryCore, open_repository
from snapvc.store.codec import open_object_store

if TYPE_CHECKING:
    # The layers below load when a method of theirs first runs (``import snapvc`` stays
    # light for a process that only commits and checks out): sync, gc, fsck, stats and
    # git from ``snapvc.maintenance``, diffs and merges from ``snapvc.diff``.
    from snapvc.backends.base import UpgradeResult
    from snapvc.diff.changes import Change
    from snapvc.diff.merge import Resolve
    from snapvc.maintenance.fsck import FsckReport
    from snapvc.maintenance.gc import GcReport, Keep
    from snapvc.maintenance.git.results import ExportResult, ImportResult
    from snapvc.maintenance.graph import Progress
    from snapvc.maintenance.stats import BranchStats, RepoStats
    from snapvc.maintenance.sync import FetchResult, PullResult, PushResult, Remote

__all__ = ["Repository", "open", "clone", "import_git"]


class Repository(RepositoryCore):
    """A snapvc repository. Open one with ``snapvc.open(path_or_url)``.

    Thread-safe: writes are serialized per repository object; several processes may
    write one embedded repository at once (refs move by compare-and-swap).
    """

    # -- the working copy, threads and sessions (snapvc.agent) ------------------------------

    def state(self, branch: str | None = None) -> State:
        """A working copy of ``branch`` (default: HEAD's branch): its latest state, loaded
        now, to change with dotted paths and commit with ``snapshot()`` at a cost that
        follows what changed (see ``snapvc.State``). A branch with no commit yet starts
        empty; the first snapshot creates it."""
        self._require_open()
        return State(self, short_name(self.branch_ref(branch)))

    def thread(self, thread_id: str, namespace: str = "", *, session: str | None = None,
               metadata: Mapping[str, Any] | None = None) -> Thread:
        """The checkpoints of a thread (a run, task or workflow of an agent framework),
        on the branch ``snapvc.thread_branch(thread_id, namespace)``; ``session`` and
        ``metadata`` are stamped on every checkpoint made through it (``snapvc.agent.threads``)."""
        self._require_open()
        return Thread(self, thread_id, namespace, session=session, metadata=metadata)

    def threads(self, session: str | None = None) -> list[Thread]:
        """Every branch as a thread (``snapvc.parse_thread_branch``), by branch name; with
        ``session``, only those whose latest checkpoint has that ``session_id``."""
        return threads_of(self, session)

    def session(self, session_id: str) -> Session:
        """The threads and checkpoints of one session (``snapvc.agent.threads``)."""
        return Session(self, session_id)

    def delete_thread(self, thread_id: str) -> list[str]:
        """Delete the branches of a thread, every namespace of it; returns them (empty if
        it has none). The commits stay reachable from the reflog until gc expires them."""
        return delete_thread(self, thread_id)

    def checkpoint(self, rev: str | ObjectId = "HEAD") -> Checkpoint:
        """The checkpoint record of the commit at ``rev`` (an id, a prefix, any rev): its
        ``branch`` is the branch ``rev`` names, else the first branch (by name) whose
        first-parent history holds the commit, else ""."""
        return checkpoint_at(self, rev)

    def diff(self, a: str | ObjectId | Mapping[str, Any], b: str | ObjectId | Mapping[str, Any],
             paths: StatePath | Iterable[StatePath] | None = None) -> list[Change]:
        """What changed from ``a`` to ``b``: ``Change(path, kind, old, new)`` for every
        added, removed or modified path (see ``snapvc.diff.changes`` for lists' indices).

        ``a`` and ``b`` are revs, ``Checkpoint``s, or states in memory (a dict, a
        ``State``, a snapshot). A state in memory is encoded first, without storing
        anything, at the cost of a first commit of it; then both sides are compared as
        stored trees: subtrees under the same id are skipped unread. ``paths`` (dotted, or
        tuples of keys and indices) limits the diff to what lies at or below them; only
        those subtrees are read."""
        return super().diff(a.values if isinstance(a, Checkpoint) else a,
                            b.values if isinstance(b, Checkpoint) else b, paths)

    # -- git (snapvc.maintenance.git) -------------------------------------------------------

    def export_git(self, path: str | os.PathLike[str], branches: Iterable[str] | None = None, *, bare: bool = True,
                   push: str | None = None, force: bool = False,
                   progress: Callable[[int, int], None] | None = None) -> ExportResult:
        """Write the history of ``branches`` (default: all, and every tag) as a git
        repository at ``path`` (bare, or with HEAD's files checked out when ``bare`` is
        False), incrementally, and push it to the git remote ``push`` if given (``force``
        for a non-fast-forward): see ``snapvc.maintenance.git``. The same history always gives the
        same git commit ids. ``progress(done, total)`` hears of each commit written."""
        from snapvc.maintenance.git.export import export_git  # dulwich loads here, not with snapvc

        self._require_open()
        return export_git(self, path, branches, bare=bare, push=push, force=force, progress=progress)

    def import_git(self, path: str | os.PathLike[str], branches: Iterable[str] | None = None) -> ImportResult:
        """Read the history of a git repository's ``branches`` (default: all, and its
        tags) into this repository, and point branches and tags of the same names at
        it: see ``snapvc.maintenance.git``. An exported history comes back to the same commit ids."""
        from snapvc.maintenance.git.export import import_git  # dulwich loads here, not with snapvc

        self._require_open()
        return import_git(self, path, branches)

    # -- sync (snapvc.maintenance.sync) -----------------------------------------------------

    def add_remote(self, name: str, location: str, **options: str) -> Remote:
        """Name another repository's ``location`` (``options`` to open it: ``endpoint=``,
        ``region=`` for S3) for ``push``, ``fetch`` and ``pull``: see ``snapvc.maintenance.sync``."""
        from snapvc.maintenance import sync as _sync

        return _sync.add_remote(self, name, location, **options)

    def remotes(self) -> dict[str, Remote]:
        """This repository's remotes, by name."""
        from snapvc.maintenance import sync as _sync

        return _sync.remotes(self)

    def push(self, remote: str | RepositoryCore, branch: str | None = None, *, remote_branch: str | None = None,
             force: bool = False, progress: Callable[[int, int], None] | None = None, **options: Any) -> PushResult:
        """Send ``branch`` (default: HEAD's) and what it needs to ``remote`` (a remote's
        name, a location, or a ``Repository``): only what the remote lacks travels, then
        its branch moves by compare-and-swap. Not a fast-forward: ``PushRejectedError``
        unless ``force``. See ``snapvc.maintenance.sync``."""
        from snapvc.maintenance import sync as _sync

        self._require_open()
        return _sync.push(self, remote, branch, remote_branch=remote_branch, force=force,
                          progress=progress or _sync.no_progress, **options)

    def fetch(self, remote: str | RepositoryCore, branches: Iterable[str] | None = None, *,
              progress: Callable[[int, int], None] | None = None, **options: Any) -> FetchResult:
        """Copy ``remote``'s branches (default: all) here and move its remote-tracking
        refs (``refs/remotes/<remote>/<branch>``); no local branch moves."""
        from snapvc.maintenance import sync as _sync

        self._require_open()
        return _sync.fetch(self, remote, branches, progress=progress or _sync.no_progress, **options)

    def pull(self, remote: str | RepositoryCore, branch: str | None = None, *, resolve: Resolve = None,
             progress: Callable[[int, int], None] | None = None, **options: Any) -> PullResult:
        """Fetch ``branch`` (default: HEAD's) from ``remote`` and merge it into the local
        branch: a fast-forward, or a three-way merge (``resolve`` as in ``merge``)."""
        from snapvc.maintenance import sync as _sync

        self._require_open()
        return _sync.pull(self, remote, branch, resolve=resolve, progress=progress or _sync.no_progress, **options)

    # -- maintenance (snapvc.maintenance) ---------------------------------------------------

    def gc(self, *, dry_run: bool = False, grace: timedelta | float | None = None,
           reflog_expiry: timedelta | float | None = None, keep: Keep | None = None,
           progress: Progress | None = None, force: bool = False) -> GcReport:
        """Delete what no ref, recent reflog entry or young object reaches (see
        ``snapvc.maintenance.gc``): plan, then sweep, safely beside other writers.
        ``grace`` (default 1 hour) protects objects and commits stored that recently;
        on S3 it may not be shorter than ``GcTiming.min_grace`` (30 minutes by default)
        unless ``force``, for when no other client is writing (``snapvc.backends.s3``);
        ``reflog_expiry`` (default 30 days) is how long reflog entries keep their commits
        (older entries are expired); ``keep`` thins each branch's history first
        (``snapvc.Keep``). ``dry_run`` changes nothing and reports what would go."""
        from snapvc.maintenance import gc as _gc
        from snapvc.maintenance.graph import no_progress

        self._require_open()
        return _gc.gc(self, dry_run=dry_run, grace=_gc.DEFAULT_GRACE if grace is None else grace,
                      reflog_expiry=_gc.DEFAULT_REFLOG_EXPIRY if reflog_expiry is None else reflog_expiry, keep=keep,
                      progress=progress or no_progress, force=force)

    def fsck(self, *, progress: Progress | None = None) -> FsckReport:
        """Read and verify every object, commit, ref and reflog entry (see
        ``snapvc.maintenance.fsck``): the problems found, each naming the object and the
        refs and state paths that reach it; ``report.ok`` when there are none."""
        from snapvc.maintenance import fsck as _fsck
        from snapvc.maintenance.graph import no_progress

        self._require_open()
        return _fsck.fsck(self, progress=progress or no_progress)

    def upgrade(self) -> UpgradeResult:
        """Move the repository to the newest storage format (an embedded file of format 1
        or 2 to format 3: objects in packs, lean commit and reflog rows; see
        ``snapvc.backends.sqlite.upgrade``), in one atomic step; a repository at the
        newest format already is left as it is. This object goes on working in the new
        format; other processes that have the file open must open it again.
        ``UnsupportedOperationError`` for a backend with one format only (memory, S3)."""
        self._require_open()
        with self.write_lock:
            result = self.backend.upgrade()
            if result.old_format != result.new_format:
                # The backend's stores were made again in the new layout: read through them.
                self.store = open_object_store(self.backend.objects)
                self.refs = self.backend.refs
                self.commits = self.backend.commits
                self.loader = Loader(self.store.get_many, self.loader.cache)
                self.invalidate_caches()
        return result

    def stats(self) -> RepoStats:
        """Objects, bytes stored, bytes the states would take stored whole, and the ratio.
        Commits count as objects, of their canonical size (they live in the commit index)."""
        from snapvc.maintenance import stats as _stats

        return _stats.repo_stats(self)

    def branch_stats(self, branch: str, *, _logical: dict[bytes, int] | None = None) -> BranchStats:
        """What ``branch``'s history holds (see ``BranchStats``): every commit reachable
        from its tip, and every object their states are made of, read once each.
        (``_logical`` carries tree sizes from one branch's call to the next.)"""
        from snapvc.maintenance import stats as _stats

        return _stats.branch_stats(self, branch, _logical)


# Every repository opened at a location (here, by a sync, by a remote) is the public one.
RepositoryCore.opened_as = Repository


def open(location: str | os.PathLike[str] = "agent.snapvc", *, create: bool = True, durability: str = "normal",
         clock: Callable[[], float] | None = None, author: str | None = None, **options: Any) -> Repository:
    """Open (or create) a repository: a file path for the embedded default, ``"memory://"``,
    or ``"s3://bucket/prefix"`` on S3-compatible storage (``options``: ``endpoint=``,
    ``region=``, ``cache_dir=``; credentials from the environment; see ``snapvc.backends.s3``).

    ``durability`` is ``"sync"``, ``"normal"`` (default) or ``"batch"`` (see
    ``snapvc.backends.sqlite``). ``clock`` and ``author`` are injectable for reproducible runs.

    Nothing that is not a repository is opened or changed: a folder, a pipe, a device, a
    file of another format or an SQLite database of another program raise
    ``NotARepositoryError``, and so does an empty file (or an empty SQLite database)
    unless ``create``, which makes a missing or empty file a new repository.
    """
    # RepositoryCore.opened_as is Repository (set above): the cast only tells the type checker.
    return cast(Repository, open_repository(location, create=create, durability=durability, clock=clock, author=author,
                                            **options))


def clone(src: RepositoryCore | str, dst: str, *, progress: Callable[[int, int], None] | None = None,
          origin: str = "origin", src_options: Mapping[str, Any] | None = None, **options: Any) -> Repository:
    """A new repository at ``dst`` (``options`` open it: ``endpoint=``...) holding every
    branch and tag of ``src`` (a location or a ``Repository``), HEAD on the same branch,
    and ``src`` as remote ``origin`` with its remote-tracking refs (when ``src`` is a
    location). ``RepositoryError`` if ``dst`` holds commits already."""
    from snapvc.maintenance import sync as _sync

    return cast(Repository, _sync.clone(src, dst, progress=progress or _sync.no_progress, origin=origin,
                                        src_options=src_options, **options))


def import_git(path: str | os.PathLike[str], into: str | os.PathLike[str] | Repository = "agent.snapvc",
               branches: Iterable[str] | None = None) -> ImportResult:
    """Read a git repository's history into the snapvc repository ``into`` (a
    ``Repository``, or a location opened, created if missing, and closed again): see
    ``Repository.import_git``."""
    if isinstance(into, Repository):
        return into.import_git(path, branches)
    with open(into) as repo:
        return repo.import_git(path, branches)
