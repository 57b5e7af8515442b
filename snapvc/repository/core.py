"""The repository core: commits of agent state on branches, and everything read from them.

``RepositoryCore`` is the repository layer: commit, checkout, snapshot, branches and tags,
reset, log, history, diff and merge, over a backend's object store, ref store and commit
index. The public ``snapvc.Repository`` (``snapvc.api``) adds to it what the layers above
do with a repository (maintenance, sync, git, threads, the working copy); those layers
take the narrow roles of ``snapvc.repository.roles``, which this class fills.

Write order (invariant 1): a commit's objects, the commit object and its index row are
written before the branch ref moves, and on the embedded store all of it is one SQLite
transaction, so a crash at any instant leaves the repository at its last completed
commit. The ref moves by compare-and-swap (invariant 2): a writer that lost a race gets
``RefConflictError`` and nothing it wrote is referenced. Every ref move is in the reflog
(invariant 3), so ``reset`` is undone with ``repo.reset(branch, to=f"{branch}@{{1}}")``.
"""

from __future__ import annotations

import getpass
import heapq
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Self

from snapvc import tracing
from snapvc.backends.base import Backend
from snapvc.backends.open import open_backend
from snapvc.encoding.paths import StatePath, parse_path
from snapvc.encoding.reader import BuildLog, Loader, MapView, ObjectCache
from snapvc.encoding.seed import LoadRecord, Seeder
from snapvc.encoding.writer import EncodeCache, Encoder
from snapvc.errors import (
    CorruptObjectError,
    DamagedRowsError,
    InvalidArgumentError,
    InvalidCommitError,
    ObjectNotFoundError,
    RefConflictError,
    RefError,
    RefExistsError,
    RefNotFoundError,
    RepositoryError,
    UnknownRevisionError,
)
from snapvc.ids import ObjectId
from snapvc.objects import COMMIT, KIND_NAMES, Commit, metadata_filter, split_object
from snapvc.refs.base import ReflogEntry
from snapvc.refs.names import (
    HEADS,
    TAGS,
    branch_ref,
    short_name,
    tag_ref,
)
from snapvc.refs.revs import resolve_rev_ref
from snapvc.repository.history import FieldVersions, HistoryEntry, PathProbe, path_changes, path_history, touches
from snapvc.store.codec import open_object_store

if TYPE_CHECKING:  # the diff layer loads when a diff or a merge runs (``import snapvc`` stays light)
    from snapvc.diff.changes import Change
    from snapvc.diff.merge import MergeResult, Resolve

__all__ = ["RepositoryCore", "open_repository", "DEFAULT_BRANCH"]

DEFAULT_BRANCH = "main"
_GC_RETRIES = 3
# Branches' encode caches: this many are always kept (the most recently used); more are
# kept while all of them together hold at most ``_BRANCH_CACHES_BYTES``, as estimated
# (``EncodeCache.size_bytes`` when each was last kept, shared entries counted in each
# cache: a running total, so that keeping one costs the same with 10,000 branches as with
# ten), so that a fork's first commit finds its parent's cache whatever the number of branches.
_MAX_BRANCH_CACHES = 8
_BRANCH_CACHES_BYTES = 32 << 20
_PREFETCH_COMMITS = 256
_MAX_CACHED_COMMITS = 200_000
# The most commits an encode cache's encodings may come
# from (its last commit and the states loaded since), and the most commits walked to find
# them among a new commit's ancestors (``RepositoryCore._may_rely_on``).
_MAX_CACHE_SOURCES = 4
_ANCESTRY_WALK = 256


def _default_author() -> str:
    try:
        return os.environ.get("SNAPVC_AUTHOR") or getpass.getuser()
    except Exception:  # no user database entry (some containers)
        return "snapvc"


class RepositoryCore:
    """The repository layer of a snapvc repository (see the module docstring); open
    one with ``snapvc.open(path_or_url)``, which gives the public ``snapvc.Repository``.

    Thread-safe: writes are serialized per repository object (``write_lock``); several
    processes may write one embedded repository at once (refs move by compare-and-swap).
    """

    #: The class a location is opened as (``open_repository``, and so a sync that opens
    #: a remote): the public ``snapvc.Repository`` once ``snapvc.api`` is imported, which
    #: sets it, so a repository opened anywhere has every operation. This layer needs only
    #: the core, and does not import the layers above it to make one.
    opened_as: ClassVar[type[RepositoryCore]]

    def __init__(self, backend: Backend, *, clock: Callable[[], float] = time.time, author: str | None = None,
                 cache_bytes: int = 64 << 20) -> None:
        self.backend = backend
        self.location = backend.location
        self.store = open_object_store(backend.objects)
        self.refs = backend.refs
        self.commits = backend.commits
        self.clock = clock
        self._author = author  # None: ``_default_author()``, looked up by the first commit that needs it
        self.loader = Loader(self.store.get_many, ObjectCache(cache_bytes))
        self._encode_caches: dict[str, EncodeCache] = {}
        # Each kept cache's estimated size when it was last kept, and their sum.
        self._cache_sizes: dict[str, int] = {}
        self._caches_bytes = 0
        # ref -> (its encode cache, what the state loaded last for it was built as): taught
        # to that cache by the next commit on the ref (``_seed``), if the cache is still its
        self._loads: dict[str, tuple[EncodeCache, LoadRecord]] = {}
        # Held by every write of this object (commits, ref moves, gc's sweep, a sync's
        # writes): one writer at a time per repository object, across threads.
        self.write_lock = threading.RLock()
        self._closed = False
        self._commit_cache: dict[ObjectId, Commit] = {}  # commits are immutable
        self._verified_commits: set[ObjectId] = set()  # read from the index and found sound
        self._versions = FieldVersions(self.loader)
        # A damaged gc epoch or HEAD does not stop the opening (fsck must run): a commit
        # reads the epoch again and refuses, naming it; what reads HEAD names it too.
        try:
            self._gc_epoch = backend.gc_epoch()  # the gc sweeps the caches below were built after
        except DamagedRowsError:
            self._gc_epoch = -1
        try:
            no_head = self.refs.get_symbolic("HEAD") is None and self.refs.get("HEAD") is None
        except DamagedRowsError:
            no_head = False  # kept as it is, not replaced
        if no_head:
            self.refs.set_symbolic("HEAD", branch_ref(DEFAULT_BRANCH))

    @property
    def author(self) -> str:
        """Who commits made here are by, unless a commit names another: the ``author``
        the repository was opened with, else ``SNAPVC_AUTHOR`` or the login (looked up
        once, when first needed: a repository that only reads never asks)."""
        if self._author is None:
            self._author = _default_author()
        return self._author

    @author.setter
    def author(self, author: str) -> None:
        self._author = author

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the repository (folds SQLite's write-ahead log into the file) and free
        what its caches hold, even while something still refers to this object. Idempotent."""
        if not self._closed:
            self._closed = True
            self.backend.close()
            with self.write_lock:
                self._forget_cached()

    def _require_open(self) -> None:
        if self._closed:
            raise RepositoryError(f"{self.location!r} is closed; open it again with snapvc.open()")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<snapvc.Repository {self.location!r}>"

    # -- names --------------------------------------------------------------------------

    @property
    def head(self) -> str:
        """The branch HEAD is on (short name)."""
        target = self.refs.get_symbolic("HEAD")
        return short_name(target) if target else "HEAD"

    def branch_ref(self, branch: str | None) -> str:
        """The full ref name of ``branch`` (short, or ``refs/heads/...``); of HEAD's
        branch when None (``main`` while HEAD points nowhere)."""
        if branch is None:
            target = self.refs.get_symbolic("HEAD")
            return target if target else branch_ref(DEFAULT_BRANCH)
        if branch.startswith(HEADS):
            return branch_ref(branch[len(HEADS):])
        return branch_ref(branch)

    def resolve(self, rev: str | ObjectId = "HEAD") -> ObjectId:
        """The commit id ``rev`` names: a branch, tag, id prefix, ``HEAD``, ``rev~N``,
        ``rev^N`` or ``ref@{N}``."""
        return self._resolve_ref(rev)[0]

    def _resolve_ref(self, rev: str | ObjectId) -> tuple[ObjectId, str]:
        """``resolve``, with the full name of the ref ``rev`` names alone, read in the same
        lookup (``""`` for an id, or a rev with steps such as ``main~1``)."""
        self._require_open()
        if isinstance(rev, ObjectId):
            return rev, ""
        oid, ref = resolve_rev_ref(rev, refs=self.refs, find_prefix=self._find_prefix, parents=self._parents)
        self.get_commit(oid, rev=rev)
        return oid, ref

    def _find_prefix(self, prefix: str) -> list[ObjectId]:
        # Commits live in the commit index; older repositories have them in the store too.
        found = dict.fromkeys(self.commits.ids_with_prefix(prefix, 2))
        found.update(dict.fromkeys(self.store.ids_with_prefix(prefix, 2)))
        return list(found)[:2]

    def _parents(self, oid: ObjectId) -> tuple[ObjectId, ...]:
        return self.get_commit(oid, walking=True).parents

    def get_commit(self, oid: ObjectId, *, rev: str | None = None, walking: bool = False) -> Commit:
        """The commit ``oid``; ``UnknownRevisionError`` if it is not a commit.

        ``walking``: the caller is reading history backwards (log, ``main~400``), so the
        commit's first-parent chain is fetched from the index in the same query."""
        commit = self._commit_cache.get(oid)
        if commit is None:
            chain = self.commits.first_parent_chain(oid, _PREFETCH_COMMITS if walking else 1)
            if chain:
                self._cache_commits(chain)
                commit = chain[0]
        if commit is not None:
            # The commit index holds the only copy of a commit: a read that goes on to the
            # state checks that its fields still hash to its id (a walk of the history
            # does not; fsck checks every commit).
            if not walking and commit.id not in self._verified_commits:
                if ObjectId.of(commit.encode()) != commit.id:
                    raise CorruptObjectError(commit.id, "the commit index holds a damaged copy: its fields do not hash to its id")
                self._verified_commits.add(commit.id)
            return commit
        try:
            data = self.store.get(oid)
        except ObjectNotFoundError:
            raise UnknownRevisionError(f"{rev or oid}: no commit {oid}") from None
        kind, payload = split_object(oid, data)
        if kind != COMMIT:
            raise UnknownRevisionError(f"{rev or oid}: object {oid.short} is a {_kind_name(kind)}, not a commit")
        commit = Commit.decode(oid, payload)
        try:
            commit.check()
        except InvalidCommitError:
            # An older snapvc stored it with a field the index cannot hold (a message of
            # None). Nothing is lost by not indexing it: it stays readable from the store.
            pass
        else:
            self.commits.add(commit)
        self._cache_commits([commit])
        return commit

    def _cache_commits(self, commits: list[Commit]) -> None:
        cache = self._commit_cache
        if len(cache) > _MAX_CACHED_COMMITS:
            cache.clear()
            self._verified_commits.clear()
        for commit in commits:
            cache[commit.id] = commit

    # -- writing ------------------------------------------------------------------------

    def commit(
        self,
        state: Mapping[str, Any],
        branch: str | None = None,
        message: str = "",
        metadata: dict[str, Any] | None = None,
        *,
        author: str | None = None,
        parents: tuple[str | ObjectId, ...] | None = None,
        date: datetime | None = None,
        _dirty_paths: Iterable[tuple[Any, ...]] | None = None,
        _objects: Mapping[ObjectId, bytes] | None = None,
    ) -> Commit:
        """Store ``state`` as a new commit on ``branch`` (default: HEAD's branch).

        The new commit's parent is the branch's current tip. ``parents`` (ids or revs)
        names them instead (a merge, or a commit built on a tip read earlier): the branch then moves
        only if it still points at the first parent (or does not exist yet, for
        ``parents=()``). Raises ``RefConflictError`` if the branch is not where this commit
        expects it, e.g. because another writer moved it meanwhile: re-read and retry.
        Unchanged parts of a state that holds the same Python objects as the last commit
        on the branch (or as a checkout of it handed out, also inside containers rebuilt
        at the same paths) are not encoded again. ``date`` (an aware datetime) is the commit's
        time instead of now (the repository's clock), for history brought from elsewhere.

        ``_dirty_paths`` is ``State``'s promise that nothing outside those paths changed
        since its last commit (see ``Encoder.encode_root``); it is trusted, not checked.
        ``_objects`` are objects the state refers to that were built outside the encoder
        (a merge's spliced trees): they are written with the commit, in its transaction.
        """
        ref = self.branch_ref(branch)
        # Inside an active OpenTelemetry span, the commit and the span name each other.
        span = tracing.active_span()
        commit = self._write_commit(state, ref, message, tracing.link_metadata(metadata, span), author, parents, date,
                                    _dirty_paths, _objects)
        tracing.record_commit(span, commit.id.hex, ref)
        return commit

    def commit_tree(self, state: Mapping[str, Any], parents: Sequence[str | ObjectId] = (), message: str = "",
                    metadata: dict[str, Any] | None = None, *, author: str | None = None,
                    date: datetime | None = None) -> Commit:
        """Store ``state`` as a commit with ``parents`` without moving any ref (as
        ``git commit-tree``): for building history first and pointing branches at it
        after, as an import does. The commit is reachable once a ref points at it (or
        at a descendant); until then gc may remove it after its grace period."""
        return self._write_commit(state, None, message, metadata, author, tuple(parents), date, None, None)

    def _write_commit(self, *args: Any) -> Commit:
        """``_write_commit_once``, again from scratch if a gc swept meanwhile (its caches
        may have named what the sweep deleted; see ``snapvc.maintenance.gc``)."""
        for _ in range(_GC_RETRIES):
            try:
                return self._write_commit_once(*args)
            except _SweptMeanwhile:
                self.invalidate_caches()
        raise RepositoryError(f"{self.location!r}: gc swept {_GC_RETRIES} times during one commit; commit again")

    def invalidate_caches(self) -> None:
        """Forget everything cached that could name an object gc deleted: encodings,
        recent objects and delta bases, read objects, commits (invariant 5). gc calls it
        after a sweep; a commit calls it when it finds that a sweep ran meanwhile."""
        with self.write_lock:
            self._forget_cached()
            self._gc_epoch = self.backend.gc_epoch()

    def _forget_cached(self) -> None:
        """Empty every cache this object owns (the caller holds ``write_lock``)."""
        self._encode_caches.clear()
        self._cache_sizes.clear()
        self._caches_bytes = 0
        self._loads.clear()
        self.store.forget_all()
        self.loader.cache.clear()
        self._commit_cache.clear()
        self._verified_commits.clear()
        self._versions = FieldVersions(self.loader)

    def _write_commit_once(self, state: Mapping[str, Any], ref: str | None, message: str,
                           metadata: dict[str, Any] | None, author: str | None,
                           parents: tuple[str | ObjectId, ...] | None, date: datetime | None,
                           dirty_paths: Iterable[tuple[Any, ...]] | None,
                           extra_objects: Mapping[ObjectId, bytes] | None) -> Commit:
        """``commit`` and ``commit_tree``: the commit on ``ref`` (moved by compare-and-swap),
        or on no ref when ``ref`` is None."""
        self._require_open()
        if isinstance(state, MapView):
            state = state.to_dict()
        if date is not None and (not isinstance(date, datetime) or date.tzinfo is None):
            raise InvalidCommitError("date", f"must be an aware datetime (with a time zone), not {date!r}")
        with self.write_lock:
            tip = self.refs.get(ref) if ref is not None else None
            if parents is None:
                parents = (tip,) if tip is not None else ()
            else:
                parents = tuple(self.resolve(p) for p in parents)
            expected = parents[0] if parents else None
            if ref is not None and expected != tip:  # the caller built on a tip that has moved since
                raise RefConflictError(ref, expected, tip)
            cache = self._encode_cache(ref if ref is not None else "", parents)
            self._teach(ref if ref is not None else "", cache)
            encoder = Encoder(cache, self.loader)
            try:
                tree = encoder.encode_root(state, dirty_paths)
                generation = 1 + max((self.get_commit(p).generation for p in parents), default=0)
                commit, _ = Commit.create(
                    tree=tree,
                    parents=tuple(parents),
                    author=author or self.author,
                    timestamp_us=(int(self.clock() * 1_000_000) if date is None
                                  else (date - _EPOCH) // timedelta(microseconds=1)),
                    message=message,
                    metadata=metadata,
                    generation=generation,
                )
                objects = encoder.objects  # the commit itself is kept by the commit index
                if extra_objects:
                    objects = {**extra_objects, **objects}
                # Re-putting an object only refreshes its age, but costs compression:
                # skip the ones already stored when a commit brings many objects (those a
                # write may rely on: on S3, bytes stored recently, see ``Backend.reusable``).
                present = self.backend.reusable(list(objects)) if len(objects) > 16 else set()
                with self.backend.transaction():
                    # The one read of the epoch a commit makes: a sweep since the caches
                    # were built (here or in another process) may have deleted what they name.
                    # Where sweeps run beside writers (S3) a sweep may still run after it;
                    # what the commit relies on is kept by other rules (``_may_rely_on``).
                    if self.backend.gc_epoch() != self._gc_epoch:
                        raise _SweptMeanwhile
                    self.store.put_many([(oid, data) for oid, data in objects.items() if oid not in present],
                                        encoder.bases)
                    self.commits.add(commit)
                    if ref is None and self.commits.capabilities.touch:  # no ref reaches it: gc's grace period protects it
                        self.commits.touch([commit.id])
                    self.check_stored(commit.id, ref)
                    reason = f"commit: {message.splitlines()[0] if message else '(no message)'}"
                    if ref is not None and not self.refs.compare_and_swap(ref, expected, commit.id, reason):
                        raise RefConflictError(ref, expected, self.refs.get(ref))
            except BaseException:
                cache.discard()
                self.store.forget(encoder.objects)  # nothing of a failed commit stays cached
                raise
            cache.commit()
            # Everything the cache names is now part of this commit: what it reused was
            # part of its parents (``_encode_cache``), and the rest it stored.
            cache.sources = {commit.id}
            self._cache_commits([commit])
            for oid, data in objects.items():
                self.loader.cache.put(oid, data)
            return commit

    def _encode_cache(self, ref: str, parents: tuple[ObjectId, ...] | None = None) -> EncodeCache:
        """The encode cache of ``ref``, for a commit with ``parents`` (if given). When
        ``ref``'s own does not hold its first parent (the first commit on a branch just
        forked, or moved) but another branch's cache does (it stored or loaded that
        commit), a fork of that one (``EncodeCache.fork``): the commit costs the change
        from the parent. A new, empty one when the commit may not rely on either
        (``_may_rely_on``)."""
        cache = self._encode_caches.pop(ref, None)
        if parents and (cache is None or parents[0] not in cache.sources):
            holder = self._cache_holding(parents[0])
            if holder is not None and self._may_rely_on(holder, parents):
                cache = holder.fork()
        if cache is None or (parents is not None and not self._may_rely_on(cache, parents)):
            cache = EncodeCache()
        self._keep_encode_cache(ref, cache)
        return cache

    def _cache_holding(self, oid: ObjectId) -> EncodeCache | None:
        """The most recently used encode cache that holds commit ``oid`` (stored or loaded
        it last: ``EncodeCache.sources``), if one does; it counts as used now (a branch
        forked from it next finds it too, however many forks were made before)."""
        caches = self._encode_caches
        ref = next((r for r in reversed(caches) if oid in caches[r].sources), None)
        if ref is None:
            return None
        holder = caches[ref] = caches.pop(ref)  # most recently used last
        return holder

    def _keep_encode_cache(self, ref: str, cache: EncodeCache) -> None:
        """Keep ``cache`` as ``ref``'s, the most recently used; the least recently used
        others go past ``_MAX_BRANCH_CACHES`` while all hold more than ``_BRANCH_CACHES_BYTES``."""
        caches = self._encode_caches
        caches.pop(ref, None)
        caches[ref] = cache  # most recently used last
        size = cache.size_bytes()
        self._caches_bytes += size - self._cache_sizes.get(ref, 0)
        self._cache_sizes[ref] = size
        while len(caches) > _MAX_BRANCH_CACHES and self._caches_bytes > _BRANCH_CACHES_BYTES:
            self._drop_encode_cache(next(iter(caches)))

    def _drop_encode_cache(self, ref: str) -> None:
        """Forget ``ref``'s encode cache and what a load recorded for it."""
        self._encode_caches.pop(ref, None)
        self._caches_bytes -= self._cache_sizes.pop(ref, 0)
        self._loads.pop(ref, None)

    def _may_rely_on(self, cache: EncodeCache, parents: tuple[ObjectId, ...]) -> bool:
        """Whether a commit with ``parents`` may reuse what ``cache`` names without storing
        it. Where a gc sweeps beside writers (S3), only when all of it is part of the
        parents, so that a gc keeps it while the branch holds the parent
        (``snapvc.backends.s3.packs``, "gc beside writers", case 3): when each commit the
        cache's encodings came from (``EncodeCache.sources``) is a parent or an ancestor
        of one. Not so after another client reset the branch, or when the state was
        checked out of a commit the branch does not reach: the state is then encoded
        afresh, and what it holds is uploaded unless its bytes are recent. In the usual
        case (the cache holds the branch's tip, which this writer stored or checked out)
        this costs no read."""
        if not self.backend.sweeps_beside_writers:
            return True  # a sweep excludes writers: the gc epoch checked inside the commit suffices
        left = cache.sources - set(parents)
        if not left:
            return True
        try:
            floor = min(self.get_commit(oid, walking=True).generation for oid in left)
            seen = set(parents)
            waiting = [p for p in parents if self.get_commit(p, walking=True).generation > floor]
            walked = 0
            while waiting and left and walked < _ANCESTRY_WALK:
                walked += 1
                for p in self.get_commit(waiting.pop(), walking=True).parents:
                    if p not in seen:
                        seen.add(p)
                        left.discard(p)
                        # A commit's ancestors have lower generations: none of ``left`` is
                        # above one at or below the floor.
                        if self.get_commit(p, walking=True).generation > floor:
                            waiting.append(p)
        except UnknownRevisionError:  # a source is gone (a gc removed it): so may be what it held
            return False
        return not left

    def check_stored(self, oid: ObjectId, ref: str | None) -> None:
        """Raise unless commit ``oid`` is stored here: its fields in the commit index,
        hashing to its id (or, in a repository written before the index held commits, its
        object in the store), and its root tree in the object store.

        Called inside the transaction that moves ``ref`` to it, after the commit's own
        writes: a ref moves only to a commit verifiably there (invariant 1). A write that
        a store skipped, or a gc that deleted the commit since it was read, fails here,
        and the ref stays where it was, instead of pointing at nothing."""
        where = f"; {ref} stays where it was" if ref is not None else ""
        commit = self.commits.get(oid)
        if commit is None:
            data = self.store.get_many([oid]).get(oid)
            if data is None:
                raise UnknownRevisionError(f"commit {oid} is not stored in {self.location!r} (if no ref reached it, "
                                           f"it may have been removed by gc since it was read){where}")
            kind, payload = split_object(oid, data)
            if kind != COMMIT:
                raise UnknownRevisionError(f"object {oid} is a {_kind_name(kind)}, not a commit{where}")
            commit = Commit.decode(oid, payload)
        elif ObjectId.of(commit.encode()) != oid:
            raise CorruptObjectError(oid, f"its row in the commit index of {self.location!r} does not hash to its "
                                          f"id{where}")
        if not self.backend.objects.has_many([commit.tree]):
            raise ObjectNotFoundError(commit.tree, f"the tree of commit {oid}{where}")

    def swap_ref(self, ref: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        """``refs.compare_and_swap``, once ``new`` is checked to be stored, in the same
        transaction (``check_stored``): every move of a ref to a commit goes through
        here or ``_move``, wherever the commit came from (a merge, a sync)."""
        with self.write_lock, self.backend.transaction():
            if new is not None:
                self.check_stored(new, ref)
            return self.refs.compare_and_swap(ref, expected, new, reason)

    def _move(self, ref: str, new: ObjectId | None, reason: str, *, must_exist: bool = False,
              must_not_exist: bool = False) -> ObjectId | None:
        with self.write_lock, self.backend.transaction():
            old = self.refs.get(ref)
            if must_exist and old is None:
                raise RefNotFoundError(ref)
            if must_not_exist and old is not None:
                raise RefExistsError(ref)
            # A commit no ref reached may have been deleted by a gc since it was resolved.
            if new is not None:
                self.check_stored(new, ref)
            if not self.refs.compare_and_swap(ref, old, new, reason):
                raise RefConflictError(ref, old, self.refs.get(ref))
            return old

    def branch(self, name: str, at: str | ObjectId = "HEAD", *, force: bool = False) -> Commit:
        """Create branch ``name`` at ``at`` (fork); ``force`` moves an existing one."""
        ref = branch_ref(name)
        commit = self.get_commit(self.resolve(at))
        with self.write_lock:
            self._move(ref, commit.id, f"branch: created from {at}", must_not_exist=not force)
            # The new branch starts from what the cache holding its tip holds, so that its
            # first commit costs the change, even if that cache's branch moves on first.
            holder = self._cache_holding(commit.id)
            if holder is not None:
                self._keep_encode_cache(ref, holder.fork())
        return commit

    def branches(self) -> dict[str, ObjectId]:
        """Branch name -> tip commit id, sorted by name."""
        return {name[len(HEADS):]: oid for name, oid in self.refs.list(HEADS).items()}

    def delete_branch(self, name: str) -> ObjectId:
        """Delete a branch; its commits stay reachable through the reflog until gc expires it."""
        ref = branch_ref(name)
        if self.refs.get_symbolic("HEAD") == ref:
            raise RefError(ref, f"cannot delete branch {name!r}: HEAD is on it; check out another branch first")
        old = self._move(ref, None, "branch: deleted", must_exist=True)
        self._drop_encode_cache(ref)
        assert old is not None
        return old

    def tag(self, name: str, at: str | ObjectId = "HEAD", *, force: bool = False) -> Commit:
        """Create tag ``name`` at ``at``."""
        commit = self.get_commit(self.resolve(at))
        self._move(tag_ref(name), commit.id, f"tag: created at {at}", must_not_exist=not force)
        return commit

    def tags(self) -> dict[str, ObjectId]:
        return {name[len(TAGS):]: oid for name, oid in self.refs.list(TAGS).items()}

    def delete_tag(self, name: str) -> ObjectId:
        old = self._move(tag_ref(name), None, "tag: deleted", must_exist=True)
        assert old is not None
        return old

    def reset(self, branch: str, to: str | ObjectId) -> Commit:
        """Move ``branch`` to ``to`` (time travel on the same branch). The reflog keeps
        the old tip: ``repo.reset(branch, to=f"{branch}@{{1}}")`` undoes it."""
        ref = self.branch_ref(branch)
        commit = self.get_commit(self.resolve(to))
        self._move(ref, commit.id, f"reset: moving to {to}", must_exist=True)
        return commit

    def switch(self, branch: str) -> None:
        """Make ``branch`` HEAD's branch (where ``commit`` goes by default)."""
        ref = self.branch_ref(branch)
        if self.refs.get(ref) is None:
            raise UnknownRevisionError(f"{branch}: no such branch")
        self.refs.set_symbolic("HEAD", ref)

    # -- durability -------------------------------------------------------------------

    @property
    def durability(self) -> str:
        """The durability mode of commits from now on: ``"sync"``, ``"normal"`` or
        ``"batch"`` (see ``snapvc.backends.sqlite.file``). Settable: a runner that must make
        each checkpoint survive a power loss sets ``"sync"`` for its run."""
        return self.backend.durability

    @durability.setter
    def durability(self, mode: str) -> None:
        self.backend.set_durability(mode)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A block whose commits and ref moves are written together when it ends: one
        transaction instead of one per commit (faster), made durable at the end
        however the block ends, an exception included (the exception then goes on).

        A process crash inside the block loses everything the block did: the repository
        stays as it was before it. Other threads and processes wait to write (and, in
        this process, to read) until the block ends: inside the block, do not wait for
        another thread that uses this repository (``asyncio.to_thread``, ``snapvc.aio``),
        it would wait for the block in turn."""
        self._require_open()
        error: BaseException | None = None
        with self.write_lock, self.backend.transaction():
            try:
                yield
            except BaseException as exc:  # written anyway: each commit in it is whole
                error = exc
        if error is not None:
            raise error

    def reflog(self, ref: str = "HEAD", limit: int | None = None) -> list[ReflogEntry]:
        """The moves of a branch (or full ref name), newest first."""
        if ref == "HEAD":
            full = self.refs.get_symbolic("HEAD") or "HEAD"
        elif ref.startswith("refs/"):
            full = ref
        elif self.refs.get(tag_ref(ref)) is not None and self.refs.get(branch_ref(ref)) is None:
            full = tag_ref(ref)
        else:
            full = branch_ref(ref)
        return self.refs.reflog(full, limit)

    # -- reading ------------------------------------------------------------------------

    def checkout(self, rev: str | ObjectId = "HEAD") -> dict[str, Any]:
        """The state at ``rev`` as a fresh dict (a deep copy you may change). A read:
        HEAD stays where it is (``switch`` moves it). The next commit of the state, changed,
        to the branch ``rev`` names (short or in full; HEAD's for ``HEAD`` and any other
        rev) costs the change."""
        # The branch whose cache learns the state is the one ``rev`` was looked up
        # through (symbolic refs followed: HEAD gives its branch), by the same read.
        oid, ref = self._resolve_ref(rev)
        commit = self.get_commit(oid)
        built = BuildLog()
        state: dict[str, Any] = self.loader.materialize(commit.tree, built)
        self._seed(ref if ref.startswith(HEADS) else None, commit, built)
        return state

    def load_state(self, commit_id: ObjectId, ref: str) -> dict[str, Any]:
        """The state of commit ``commit_id`` as a fresh dict, taught to ``ref``'s encode
        cache (``State`` loads its working copy so)."""
        commit = self.get_commit(commit_id)
        built = BuildLog()
        state: dict[str, Any] = self.loader.materialize(commit.tree, built)
        self._seed(ref, commit, built)
        return state

    def _seed(self, ref: str | None, commit: Commit, built: BuildLog) -> None:
        """Record for the encode cache of ``ref`` (default: HEAD's branch, where a commit
        of the state goes by default) what the state just materialized from ``commit``'s
        tree was built as (``built``): the next commit on ``ref`` is taught it first
        (``_teach``), so that the state, changed, costs the change (see
        ``snapvc.encoding.seed``), if ``commit`` is that commit's parent or an ancestor of
        it (``_may_rely_on``). What an earlier load recorded or taught is forgotten."""
        record = LoadRecord(bytes(commit.tree), built)  # before the caller can change the state
        with self.write_lock:
            key = ref or self.branch_ref(None)
            cache = self._encode_cache(key)
            if commit.id not in cache.sources:
                if len(cache.sources) >= _MAX_CACHE_SOURCES:  # a cache taught by many states: start again
                    if self.backend.sweeps_beside_writers:
                        cache = self._encode_caches[key] = EncodeCache()
                    else:  # (elsewhere the sources only tell a fork which cache holds its parent)
                        cache.sources.clear()
                cache.sources.add(commit.id)
            cache.start_loading()
            # What a load recorded holds the state it built, for the commit that follows:
            # the most recent _MAX_BRANCH_CACHES are kept (listing many branches' states
            # keeps none of the others alive).
            self._loads.pop(key, None)
            self._loads[key] = (cache, record)
            while len(self._loads) > _MAX_BRANCH_CACHES:
                del self._loads[next(iter(self._loads))]

    def _teach(self, ref: str, cache: EncodeCache) -> None:
        """Teach ``cache``, about to encode a commit on ``ref``, what the state loaded last
        for ``ref`` was built as (``_seed``), if it was recorded for this very cache."""
        cache_and_record = self._loads.pop(ref, None)
        if cache_and_record is None or cache_and_record[0] is not cache:
            return
        try:
            Seeder(self.loader, cache).seed(cache_and_record[1])
        except (ObjectNotFoundError, CorruptObjectError):  # (a sweep meanwhile): the state is encoded anew
            cache.start_loading()

    def snapshot(self, rev: str | ObjectId = "HEAD") -> MapView:
        """A lazy, read-only view of the state at ``rev``: reading one key loads only the
        objects on its path."""
        commit = self.get_commit(self.resolve(rev))
        view = self.loader.view(commit.tree)
        assert isinstance(view, MapView)
        return view

    def log(
        self,
        rev: str | ObjectId | Sequence[str | ObjectId] = "HEAD",
        limit: int | None = None,
        where: Mapping[str, Any] | Callable[[Commit], bool] | None = None,
        *,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        paths: StatePath | Iterable[StatePath] | None = None,
    ) -> Iterator[Commit]:
        """Commits reachable from ``rev`` (or from any of several revs), newest first:
        a commit always comes before its parents, then by generation and time.

        ``where`` keeps commits whose metadata has all the given values (keys may be
        dotted paths into nested metadata: ``{"usage.tokens": 10}``), or for which a
        callable returns True. ``since`` and ``until`` keep commits made at or after,
        at or before a time: a ``datetime`` (an aware one compared exactly, a naive one
        taken as local time, as git does) or Unix seconds. ``paths`` (a dotted path or
        a tuple of steps, or a list of them) keeps commits that changed the value at any
        of them, compared with every parent as ``history`` does. Every filter given
        must hold. Answered from the commit index and the nodes on ``paths``: no state
        is read whole.
        """
        revs = [rev] if isinstance(rev, (str, ObjectId)) else list(rev)
        match = metadata_filter(where)
        lo, hi = _timestamp_us(since, "since"), _timestamp_us(until, "until")
        probes = None if paths is None else [PathProbe(self.loader, p) for p in _parse_paths(paths)]
        seen: set[ObjectId] = set()
        heap: list[tuple[int, int, bytes, Commit]] = []
        for r in revs:
            start = self.get_commit(self.resolve(r))
            if start.id not in seen:
                seen.add(start.id)
                heap.append((-start.generation, -start.timestamp_us, start.id, start))
        heapq.heapify(heap)
        produced = 0
        while heap and (limit is None or produced < limit):
            _, _, _, commit = heapq.heappop(heap)
            if ((lo is None or commit.timestamp_us >= lo) and (hi is None or commit.timestamp_us <= hi)
                    and (match is None or match(commit))
                    and (probes is None or touches(probes, self._commit_to_read(commit.id).tree,
                                                   [self._commit_to_read(p).tree for p in commit.parents]))):
                produced += 1
                yield commit
            for p in commit.parents:
                if p not in seen:
                    seen.add(p)
                    pc = self.get_commit(p, walking=True)
                    heapq.heappush(heap, (-pc.generation, -pc.timestamp_us, pc.id, pc))

    def history(self, rev: str | ObjectId | Sequence[str | ObjectId], path: StatePath, *,
                limit: int | None = None, oldest_first: bool = False) -> Iterator[HistoryEntry]:
        """The commits reachable from ``rev`` that changed the value at ``path`` (dotted,
        or a tuple of keys and indices), lazily newest first (``oldest_first`` reverses that),
        at most ``limit`` (the newest, or the oldest when ``oldest_first``): each a
        ``HistoryEntry(commit, kind, value, old)``. A commit is one where the value
        differs from its value in every parent (a merge that kept one parent's value is
        not), or a root commit that holds the path (see ``snapvc.repository.history``). Only the
        nodes on the path are read, and a value whole only for the commits returned.
        ``PathError`` if ``path`` is malformed."""
        probe = PathProbe(self.loader, parse_path(path))
        if not oldest_first:
            return path_history(self.log(rev), self._commit_to_read, probe, limit)
        found = list(path_changes(self.log(rev), self._commit_to_read, probe))
        found.reverse()
        return (probe.entry(*change) for change in found[:limit])

    def versions(self, rev: str | ObjectId = "HEAD") -> dict[str, int]:
        """Per-field version counters at ``rev``: for each top-level key of its state,
        how many commits along its first-parent history added the key or changed its
        value (QitOS's ``state_versions``): ``{"scratchpad": 3, "step": 5}``. Reads the
        root maps of the history once; later calls reuse what earlier ones counted."""
        return self._versions.at(self.get_commit(self.resolve(rev)), self._walk_commit)

    def _commit_to_read(self, oid: ObjectId) -> Commit:
        """A commit met walking history whose state is read next: fetched with its
        first-parent chain (one commit index query for many), then checked."""
        self.get_commit(oid, walking=True)
        return self.get_commit(oid)

    def diff(self, a: str | ObjectId | Mapping[str, Any], b: str | ObjectId | Mapping[str, Any],
             paths: StatePath | Iterable[StatePath] | None = None) -> list[Change]:
        """What changed from ``a`` to ``b``: ``Change(path, kind, old, new)`` for every
        added, removed or modified path (see ``snapvc.diff.changes`` for lists' indices).

        ``a`` and ``b`` are revs, or states in memory (a dict, a ``State``, a snapshot;
        ``snapvc.Repository.diff`` takes ``Checkpoint``s too). A state in memory is encoded first, without storing anything, at the cost of a
        first commit of it; then both sides are compared as stored trees: subtrees
        under the same id are skipped unread. ``paths`` (dotted, or tuples of keys and
        indices) limits the diff to what lies at or below them; only those subtrees are
        read."""
        from snapvc.diff.changes import Change, diff_values, plain_value

        old, new = self._diff_side(a, "a"), self._diff_side(b, "b")
        if paths is None:
            return list(diff_values(old, new))
        wanted = _parse_paths(paths)
        changes: list[Change] = []
        for path in wanted:
            if any(len(w) < len(path) and path[: len(w)] == w for w in wanted):
                continue  # below another path asked for
            x, y = _value_at(old, path), _value_at(new, path)
            if x is _MISSING and y is not _MISSING:
                changes.append(Change(path, "added", None, plain_value(y)))
            elif y is _MISSING and x is not _MISSING:
                changes.append(Change(path, "removed", plain_value(x), None))
            elif x is not _MISSING:
                changes.extend(diff_values(x, y, path))
        return changes

    def _diff_side(self, side: str | ObjectId | Mapping[str, Any], name: str) -> MapView:
        """A side of a diff (the argument ``name``) as a stored tree: a rev's snapshot, or
        a state in memory encoded into objects kept in memory only, read through a loader
        of their own."""
        if isinstance(side, MapView):
            return side
        if isinstance(side, (str, ObjectId)):
            return self.snapshot(side)
        if not isinstance(side, Mapping):
            raise InvalidArgumentError(name, f"a diff compares revs or states (mappings); {name} is a "
                                             f"{type(side).__name__}")
        encoder = Encoder(loader=self.loader)
        root = encoder.encode_root(dict(side))
        objects = encoder.objects
        get_stored = self.store.get_many

        def get_many(ids: list[Any]) -> dict[Any, bytes]:
            found = {oid: objects[oid] for oid in ids if oid in objects}
            rest = [oid for oid in ids if oid not in found]
            if rest:
                found.update(get_stored(rest))
            return found

        view = Loader(get_many, ObjectCache(16 << 20)).view(root)
        assert isinstance(view, MapView)
        return view

    # -- merging ------------------------------------------------------------------------

    def merge_base(self, a: str | ObjectId, b: str | ObjectId) -> ObjectId | None:
        """The best common ancestor of two revs (see ``snapvc.diff.merge``), None if none."""
        from snapvc.diff.merge import find_merge_base

        return find_merge_base(self._walk_commit, self.resolve(a), self.resolve(b))

    def _walk_commit(self, oid: ObjectId) -> Commit:
        return self.get_commit(oid, walking=True)

    def merge(self, source: str | ObjectId, into: str | None = None, message: str | None = None,
              resolve: Resolve = None, *, metadata: dict[str, Any] | None = None, author: str | None = None,
              no_ff: bool = False) -> MergeResult:
        """Merge ``source`` (a rev) into branch ``into`` (default: HEAD's branch).

        ``source`` already in ``into``'s history: up to date, nothing written. ``into`` in
        ``source``'s history: the branch fast-forwards to it (``no_ff`` makes a merge
        commit instead). Otherwise a three-way merge against the merge base (an empty
        state if there is none; see ``snapvc.diff.merge``), decided by ``resolve`` (None,
        ``"ours"``, ``"theirs"`` or a callable taking a ``Conflict``): with conflicts left,
        nothing is written and they are in the result. The merge commit's parents are
        ``into``'s tip and ``source``; if the branch moved meanwhile, ``RefConflictError``.
        Large maps and lists changed on both sides are stored as new trees built from
        the old ones: a merge reads and writes what changed, not the whole state.
        """
        from snapvc.diff.merge import MergeResult, check_resolve

        check_resolve(resolve)
        ref = self.branch_ref(into)
        name = short_name(ref)
        tip = self.refs.get(ref)
        if tip is None:
            raise RefNotFoundError(ref, f"cannot merge into {name!r}: there is no such branch")
        theirs = self.resolve(source)
        base = self.merge_base(tip, theirs)
        if base == theirs:
            return MergeResult(None, [], base, up_to_date=True)
        if base == tip and not no_ff:
            if not self.swap_ref(ref, tip, theirs, f"merge {source}: Fast-forward"):
                raise RefConflictError(ref, tip, self.refs.get(ref))
            return MergeResult(self.get_commit(theirs), [], base, fast_forward=True)
        label = source.short if isinstance(source, ObjectId) else source
        return self._three_way(ref, tip, base, self.snapshot(base) if base is not None else {}, theirs, resolve,
                               message if message is not None else f"Merge {label} into {name}",
                               metadata, author, parents=(tip, theirs))

    def revert(self, commit: str | ObjectId, branch: str | None = None, message: str | None = None,
               resolve: Resolve = None, *, mainline: int = 1) -> MergeResult:
        """A new commit on ``branch`` (default: HEAD's) that undoes ``commit``'s changes:
        a three-way merge of the branch tip with ``commit``'s parent, from ``commit``
        (for a merge commit, its parent number ``mainline``; a root commit is undone
        towards an empty state). Nothing to undo: up to date, nothing written."""
        from snapvc.diff.merge import check_resolve

        check_resolve(resolve)
        target, parent = self._change_of(commit, mainline)
        first = target.message.splitlines()[0] if target.message else target.id.short
        text = message if message is not None else f'Revert "{first}"\n\nThis reverts commit {target.id.hex}.'
        ref, tip = self._tip_of(branch)
        return self._three_way(ref, tip, target.id, self.snapshot(target.id), parent, resolve, text, None, None,
                               parents=(tip,))

    def cherry_pick(self, commit: str | ObjectId, onto: str | None = None, message: str | None = None,
                    resolve: Resolve = None, *, mainline: int = 1) -> MergeResult:
        """Apply ``commit``'s changes (against its parent, or parent number ``mainline``
        of a merge commit) onto branch ``onto`` (default: HEAD's) as a new commit with its
        message, metadata and author; the message notes where it was picked from."""
        from snapvc.diff.merge import check_resolve

        check_resolve(resolve)
        target, parent = self._change_of(commit, mainline)
        text = (message if message is not None else target.message) + f"\n\n(cherry picked from commit {target.id.hex})"
        ref, tip = self._tip_of(onto)
        return self._three_way(ref, tip, parent, self.snapshot(parent) if parent is not None else {}, target.id,
                               resolve, text, dict(target.metadata), target.author, parents=(tip,))

    def _tip_of(self, branch: str | None) -> tuple[str, ObjectId]:
        ref = self.branch_ref(branch)
        tip = self.refs.get(ref)
        if tip is None:
            raise RefNotFoundError(ref, f"branch {short_name(ref)!r} does not exist, or has no commit yet")
        return ref, tip

    def _change_of(self, rev: str | ObjectId, mainline: int) -> tuple[Commit, ObjectId | None]:
        """A commit and the parent its changes are taken against."""
        target = self.get_commit(self.resolve(rev), rev=str(rev))
        if not target.parents:
            return target, None
        if not (isinstance(mainline, int) and not isinstance(mainline, bool) and 1 <= mainline <= len(target.parents)):
            raise InvalidArgumentError("mainline", f"{rev}: mainline {mainline!r} is not a parent number of commit "
                                                   f"{target.id.short} (it has {len(target.parents)})")
        return target, target.parents[mainline - 1]

    def _three_way(self, ref: str, tip: ObjectId, base_id: ObjectId | None, base: Any, theirs: ObjectId | None,
                   resolve: Resolve, message: str, metadata: dict[str, Any] | None, author: str | None,
                   parents: tuple[ObjectId, ...]) -> MergeResult:
        """Merge ``base`` -> tip and ``base`` -> ``theirs`` (None: an empty state), and
        commit the result on ``ref`` with ``parents`` unless conflicts remain. New trees
        of large containers are written with the commit, in its transaction."""
        from snapvc.diff.merge import MergeResult, merge_states

        done = merge_states(base, self.snapshot(tip), self.snapshot(theirs) if theirs is not None else {}, self.loader,
                            resolve)
        if done.state is None:
            return MergeResult(None, done.conflicts, base_id)
        if done.unchanged and len(parents) == 1:
            return MergeResult(None, [], base_id, up_to_date=True, resolved=done.resolved)
        commit = self.commit(done.state, short_name(ref), message, metadata, author=author, parents=parents,
                             _objects=done.objects)
        return MergeResult(commit, [], base_id, resolved=done.resolved)

class _SweptMeanwhile(Exception):
    """A commit found the gc epoch changed inside its transaction: encode it again."""


def _value_at(value: Any, path: tuple[str | int, ...]) -> Any:
    """What lies at ``path`` below ``value`` (views read lazily), or ``_MISSING``."""
    for step in path:
        if isinstance(value, Mapping):
            value = value.get(step, _MISSING) if isinstance(step, str) else _MISSING
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            index = step if isinstance(step, int) else int(step) if step.isdigit() else None
            value = value[index] if index is not None and 0 <= index < len(value) else _MISSING
        else:
            return _MISSING
        if value is _MISSING:
            return value
    return value


def _kind_name(kind: int) -> str:
    return KIND_NAMES.get(kind, f"kind {kind:#04x}")


_MISSING = object()


def _timestamp_us(when: datetime | float | None, name: str) -> int | None:
    """A ``log`` time bound in microseconds since the epoch: a naive ``datetime`` is
    local time (``datetime.timestamp``), a number is Unix seconds."""
    if when is None:
        return None
    if isinstance(when, datetime):
        aware = when if when.tzinfo is not None else when.astimezone()
        return (aware - _EPOCH) // timedelta(microseconds=1)
    if isinstance(when, int) and not isinstance(when, bool):
        return when * 1_000_000
    if isinstance(when, float):
        if not math.isfinite(when):  # int() of it would raise ValueError or OverflowError
            raise InvalidArgumentError(name, f"{name}= is a datetime or Unix seconds, not {when!r}")
        return int(when * 1_000_000)
    raise InvalidArgumentError(name, f"{name}= is a datetime or Unix seconds, not a {type(when).__name__}")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _parse_paths(paths: StatePath | Iterable[StatePath]) -> list[tuple[str | int, ...]]:
    """``log``'s ``paths``: a str or a tuple is one path, anything else holds several."""
    if isinstance(paths, (str, tuple)):
        return [parse_path(paths)]
    return list(dict.fromkeys(parse_path(p) for p in paths))


def open_repository(location: str | os.PathLike[str] = "agent.snapvc", *, create: bool = True,
                    durability: str = "normal", clock: Callable[[], float] | None = None, author: str | None = None,
                    **options: Any) -> RepositoryCore:
    """Open (or create) the repository at ``location`` as ``RepositoryCore.opened_as``:
    a file path for the embedded default, ``"memory://"``, or ``"s3://bucket/prefix"`` on
    S3-compatible storage (``options``: ``endpoint=``, ``region=``, ``cache_dir=``;
    credentials from the environment; see ``snapvc.backends.s3.backend``).

    ``durability`` is ``"sync"``, ``"normal"`` (default) or ``"batch"`` (see
    ``snapvc.backends.sqlite.file``). ``clock`` and ``author`` are injectable for reproducible runs.

    Nothing that is not a repository is opened or changed: a folder, a pipe, a device, a
    file of another format or an SQLite database of another program raise
    ``NotARepositoryError``, and so does an empty file (or an empty SQLite database)
    unless ``create``, which makes a missing or empty file a new repository.
    """
    backend = open_backend(location, create=create, durability=durability, clock=clock, **options)
    return RepositoryCore.opened_as(backend, clock=clock or time.time, author=author)


RepositoryCore.opened_as = RepositoryCore
