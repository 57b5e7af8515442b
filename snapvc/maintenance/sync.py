"""Sync between repositories, as git remotes do: push, fetch, pull, clone.

Any two repositories sync, whatever their backends (embedded file, ``memory://``,
``s3://bucket/prefix``). Only what the destination lacks travels:

1. **Commits.** Walk back from the tips being sent until commits the destination
   knows (its commit index, read once). Each is checked before anything is written
   (fields that hash to its id, of the right types and values, its generation): a
   commit the destination could not keep as it is stops the sync, naming it.
2. **Objects.** Walk the trees of those commits level by level, asking the destination
   which ids it has (``Backend.reusable``, a batch per level; on S3 only bytes stored
   recently count, see ``snapvc.backends.s3.packs``): a subtree it has is skipped whole,
   unread. A delta frame travels with its base unless the destination has it.
3. **Frames travel as stored**, not decompressed and compressed again — except frames
   compressed with a zstd dictionary the destination does not share (dictionaries are
   numbered per store): those are re-framed on the way. A clone into an empty
   repository ships the dictionaries first, under the same numbers, so nothing needs
   re-framing. When either side compresses what it keeps itself
   (``StoreCapabilities.compresses``: a format 3 SQLite file, whose frames are raw and
   whose packs compress them together), every object is re-framed: its canonical bytes
   are written through the destination's compressor, so a format 3 file receives raw
   frames for its packs, and any other store compressed frames (never raw ones).
4. **Writes in order** (invariant 1): objects in batches of about ``BATCH_BYTES`` (on
   S3 each batch is one pack), the deepest level of the trees first, so an object the
   destination holds never lacks what it refers to unless an ancestor is missing too;
   the commit rows with the last batch, and only then the destination's ref, by
   compare-and-swap, in a transaction that first checks the commit is stored there
   (``RepositoryCore.swap_ref``). A push that is not a fast-forward is refused (``PushRejectedError``)
   unless forced; a ref that moved meanwhile raises ``RefConflictError``. An interrupted
   sync leaves only unreferenced objects, and the next one sends what it left out.

A *remote* is a name for another repository's location, kept in the repository
(``Repository.add_remote``). Syncing with a named remote keeps remote-tracking refs,
``refs/remotes/<remote>/<branch>``: where that branch was when last pushed or fetched
(``repo.log("refs/remotes/origin/main")``). Credentials are never stored: S3 clients
read them from the environment.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from snapvc.errors import (
    CorruptObjectError,
    InvalidCommitError,
    PushRejectedError,
    RefConflictError,
    RefNotFoundError,
    RepositoryError,
)
from snapvc.repository.history import commits_behind
from snapvc.ids import ObjectId
from snapvc.maintenance.graph import read_children
from snapvc.maintenance.stats import format_bytes, plural
from snapvc.objects import Commit
from snapvc.refs.names import HEADS, TAGS, branch_ref, check_ref_name, short_name
from snapvc.repository.core import RepositoryCore, open_repository
from snapvc.repository.roles import Versioned
from snapvc.store.codec import CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT, frame_base, frame_dictionary

if TYPE_CHECKING:
    from snapvc.diff.merge import MergeResult, Resolve

__all__ = [
    "Remote", "TransferStats", "PushResult", "FetchResult", "PullResult",
    "push", "fetch", "pull", "clone", "add_remote", "remotes", "remove_remote", "copy_history",
]

REMOTES = "refs/remotes/"
BATCH_BYTES = 8 << 20
_LEVEL_BATCH = 2000
_SETTING = "remotes"

Progress = Callable[[int, int], None]


def no_progress(done: int, total: int) -> None:
    pass


@dataclass(frozen=True)
class Remote:
    """A named repository location (``options``: ``endpoint``, ``region`` for S3)."""

    name: str
    location: str
    options: Mapping[str, str] = field(default_factory=dict)

    def open(self, *, create: bool = False) -> RepositoryCore:
        """The repository at this remote's location (``create``: made if missing)."""
        options: dict[str, Any] = dict(self.options)
        return open_repository(self.location, create=create, **options)


@dataclass
class TransferStats:
    """What one sync sent: commits, objects and their bytes as stored at the source (the
    frames sent, and the commits; an object's canonical bytes when either side compresses
    itself, as no frame of it travels), objects re-framed for the destination,
    dictionaries shipped."""

    commits: int = 0
    objects: int = 0
    bytes: int = 0
    reframed: int = 0
    dictionaries: int = 0

    def __str__(self) -> str:
        return f"{plural(self.commits, 'commit')}, {plural(self.objects, 'object')}, {format_bytes(self.bytes)}"


@dataclass(frozen=True)
class PushResult:
    """A push of one branch: the remote ``ref`` moved from ``old`` to ``new``
    (``up_to_date``: it was there already; ``forced``: not a fast-forward)."""

    remote: str
    ref: str
    old: ObjectId | None
    new: ObjectId
    transfer: TransferStats
    up_to_date: bool = False
    forced: bool = False

    def __str__(self) -> str:
        if self.up_to_date:
            return f"{self.remote} {short_name(self.ref)}: already up to date"
        move = f"{self.old.short if self.old else '(new)'} -> {self.new.short}"
        return f"{self.remote} {short_name(self.ref)}: {move}{' (forced)' if self.forced else ''}; sent {self.transfer}"


@dataclass(frozen=True)
class FetchResult:
    """A fetch: each remote branch's tip (by short name), the remote-tracking refs
    moved (for a named remote), and what was received."""

    remote: str
    tips: dict[str, ObjectId]
    updated: dict[str, ObjectId]
    transfer: TransferStats


@dataclass(frozen=True)
class PullResult:
    """A pull of one branch: the fetch, then the merge into the local branch (None when
    the branch did not exist here and was created at the remote tip)."""

    branch: str
    fetch: FetchResult
    merge: MergeResult | None
    created: bool = False

    @property
    def ok(self) -> bool:
        return self.merge is None or self.merge.ok

    def __str__(self) -> str:
        if self.created:
            return f"{self.branch}: created at {self.fetch.tips[self.branch].short}; received {self.fetch.transfer}"
        return f"{self.branch}: {self.merge}; received {self.fetch.transfer}"


# -- remotes --------------------------------------------------------------------------------


def remotes(repo: Versioned) -> dict[str, Remote]:
    """The repository's remotes, by name."""
    raw = repo.backend.get_setting(_SETTING)
    try:
        found = json.loads(raw) if raw else {}
        return {name: Remote(name, v["location"], v.get("options", {})) for name, v in sorted(found.items())}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # written by another tool, or damaged
        raise RepositoryError(f"{repo.location!r}: its setting {_SETTING!r} (the remotes) is damaged: "
                              f"{type(exc).__name__}: {exc}") from None


def _save(repo: Versioned, all_remotes: Mapping[str, Remote]) -> None:
    repo.backend.set_setting(_SETTING, json.dumps(
        {r.name: {"location": r.location, "options": dict(r.options)} for r in all_remotes.values()}, sort_keys=True))


def add_remote(repo: Versioned, name: str, location: str, **options: str) -> Remote:
    """Name ``location`` (with ``options`` to open it, e.g. ``endpoint=``) as a remote;
    replaces a remote of that name."""
    check_ref_name(name)
    remote = Remote(name, str(location), {k: str(v) for k, v in options.items() if v is not None})
    _save(repo, {**remotes(repo), name: remote})
    return remote


def remove_remote(repo: Versioned, name: str) -> None:
    """Forget remote ``name`` and its remote-tracking refs."""
    found = remotes(repo)
    if name not in found:
        raise RepositoryError(f"{repo.location!r} has no remote {name!r} (it has: {', '.join(found) or 'none'})")
    del found[name]
    _save(repo, found)
    for ref, oid in repo.refs.list(f"{REMOTES}{name}/").items():
        repo.refs.compare_and_swap(ref, oid, None, f"remote: {name} removed")


class _Opened:
    """The other side of a sync: a repository given, or opened from a remote or location
    (and closed again); ``create``: a push creates a repository that is not there yet."""

    def __init__(self, repo: Versioned, other: Versioned | str, options: Mapping[str, Any], *,
                 create: bool = False) -> None:
        self.name: str | None = None
        self.owned = False
        if isinstance(other, RepositoryCore):
            self.repo = other
            self.label = other.location
            return
        named = remotes(repo).get(str(other))
        if named is not None:
            self.name = named.name
            self.repo = named.open(create=create)
            self.label = named.name
        else:
            self.repo = open_repository(str(other), create=create, **options)
            self.label = str(other)
        self.owned = True

    def close(self) -> None:
        if self.owned:
            self.repo.close()


def _track(repo: Versioned, remote: str | None, branch: str, tip: ObjectId, reason: str) -> str | None:
    """Move ``refs/remotes/<remote>/<branch>`` to ``tip`` (a named remote only)."""
    if remote is None:
        return None
    ref = f"{REMOTES}{remote}/{branch}"
    for _ in range(3):
        old = repo.refs.get(ref)
        if old == tip or repo.swap_ref(ref, old, tip, reason):
            return ref
    raise RefConflictError(ref, None, repo.refs.get(ref))


# -- what travels ---------------------------------------------------------------------------


def missing_commits(src: Versioned, dst: Versioned, tips: Iterable[ObjectId]) -> list[Commit]:
    """The commits reachable from ``tips`` in ``src`` that ``dst`` lacks, parents first."""
    known = set(dst.commits.ids())
    return commits_behind(lambda oid: src.get_commit(oid, walking=True), tips,
                          lambda batch: known.intersection(batch))


def _check_incoming(src: Versioned, dst: Versioned, commits: list[Commit]) -> None:
    """Refuse, before anything is written, a commit ``dst`` could not keep as it is: one
    whose fields do not hash to its id (a damaged copy: the history walk does not check
    them), of the wrong type or value (``Commit.check``: a message of None, which an
    older snapvc let through and SQLite's commit index cannot hold), or whose generation
    is not 1 + its parents' largest. ``commits`` come parents first."""
    generations: dict[ObjectId, int] = {}
    for commit in commits:
        if ObjectId.of(commit.encode()) != commit.id:
            raise CorruptObjectError(commit.id, f"its fields in {src.location!r} do not hash to its id; nothing "
                                                f"was copied to {dst.location!r}")
        try:
            commit.check()
            expected = 1 + max((generations[p] if p in generations else dst.get_commit(p, walking=True).generation
                                for p in commit.parents), default=0)
            if commit.generation != expected:
                raise InvalidCommitError("generation", f"is {commit.generation}, not 1 + its parents' largest "
                                                       f"({expected})", commit.id)
        except InvalidCommitError as exc:
            raise InvalidCommitError(exc.field, f"{exc.reason}; {dst.location!r} cannot keep it as it is, so nothing "
                                                f"was copied (it stays in {src.location!r})", commit.id) from None
        generations[commit.id] = commit.generation


def _refresh(repo: Versioned) -> None:
    """Let a store that caches what it knows (S3) read what others wrote meanwhile."""
    if repo.backend.objects.capabilities.refresh:
        repo.backend.objects.refresh()


def _ship_dictionaries(src: Versioned, dst: Versioned, stats: TransferStats) -> set[int]:
    """The dictionary numbers whose frames can travel as they are: the same dictionary
    under the same number on both sides. An empty destination gets the source's first."""
    if not (src.backend.objects.capabilities.dictionaries and dst.backend.objects.capabilities.dictionaries):
        return set()  # no dictionary frames on one side or none kept on the other: all travel re-framed
    theirs = src.backend.objects.dictionaries()
    mine = dst.backend.objects.dictionaries()
    if theirs and not mine:
        for number in sorted(theirs):
            if dst.backend.objects.put_dictionary(theirs[number]) != number:
                break  # another writer trained one meanwhile: frames are re-framed instead
            mine[number] = theirs[number]
            stats.dictionaries += 1
        dst.store.forget_all()  # its compressor reads the dictionaries again
    return {n for n, data in theirs.items() if mine.get(n) == data}


def copy_history(src: Versioned, dst: Versioned, tips: Iterable[ObjectId], *,
                 progress: Progress = no_progress) -> TransferStats:
    """Copy into ``dst`` every commit reachable from ``tips`` in ``src`` and every object
    they need that ``dst`` lacks (see the module docstring). Moves no ref."""
    stats = TransferStats()
    commits = missing_commits(src, dst, tips)  # (reads dst's commit index afresh: on S3, lists its packs)
    if not commits:
        return stats
    _check_incoming(src, dst, commits)
    raw_src = src.backend.objects
    # A store that compresses itself keeps raw frames and wants raw frames: frames travel
    # as stored only between two stores that keep them compressed one by one.
    as_stored = not (raw_src.capabilities.compresses or dst.backend.objects.capabilities.compresses)
    shared = _ship_dictionaries(src, dst, stats) if as_stored else set()
    seen: set[ObjectId] = set()
    level = list(dict.fromkeys(c.tree for c in commits))
    # What travels, spooled level by level while the trees are walked from their roots:
    # (id, offset, length, canonical) - a frame as stored, or canonical bytes to write
    # through dst's compressor (a dictionary dst lacks).
    levels: list[list[tuple[ObjectId, int, int, bool]]] = []
    done = 0
    with tempfile.TemporaryFile() as spool:
        while level:
            spooled: list[tuple[ObjectId, int, int, bool]] = []
            next_level: list[ObjectId] = []
            for start in range(0, len(level), _LEVEL_BATCH):
                batch = [oid for oid in level[start : start + _LEVEL_BATCH] if oid not in seen]
                seen.update(batch)
                present = dst.backend.reusable(batch)  # what dst holds and a write there may rely on
                wanted = [oid for oid in batch if oid not in present]
                if not wanted:
                    continue
                canonical = src.store.get_many(wanted)  # verified: nothing damaged travels
                frames = raw_src.get_many(wanted) if as_stored else canonical
                for oid in wanted:
                    frame = frames.get(oid)
                    data = canonical.get(oid)
                    if frame is None or data is None:
                        raise RepositoryError(f"{src.location!r} lacks object {oid}, which commits being sent need")
                    reframed = not as_stored or (bool(frame) and frame[0] == CODEC_ZSTD_DICT
                                                 and frame_dictionary(oid, frame) not in shared)
                    payload = data if reframed else frame
                    spooled.append((oid, spool.tell(), len(payload), reframed))
                    spool.write(payload)
                    stats.reframed += reframed
                    stats.objects += 1
                    stats.bytes += len(frame)
                    # Its children, without rebuilding typed values; a node that hashes right but
                    # whose layout is damaged is a CorruptObjectError naming it.
                    next_level.extend(child for child, _ in read_children(oid, data))
                    if not reframed and frame and frame[0] == CODEC_ZSTD_DELTA:
                        base = frame_base(oid, frame)  # a delta's base travels too, unless dst has it
                        if base is not None and base not in seen:
                            next_level.append(base)
                done += len(wanted)
                progress(done, done + len(next_level))
            levels.append(spooled)
            level = [oid for oid in dict.fromkeys(next_level) if oid not in seen]
        stats.commits = len(commits)
        stats.bytes += sum(len(c.encode()) for c in commits)
        _write_deepest_first(dst, levels, spool, commits)
    progress(done, done)
    return stats


def _write_deepest_first(dst: Versioned, levels: list[list[tuple[ObjectId, int, int, bool]]], spool: IO[bytes],
                         commits: list[Commit]) -> None:
    """Write the spooled objects in batches of about ``BATCH_BYTES``, the deepest level
    first, and the commits with the last batch. An object the destination holds then
    always has what it refers to (its children, a delta's base) or an ancestor still
    missing, so the next sync, which skips what the destination holds, completes what
    an interrupted one left out."""
    frames: list[tuple[ObjectId, bytes]] = []
    reframe: list[tuple[ObjectId, bytes]] = []
    size = 0

    def write(final: bool) -> None:
        nonlocal frames, reframe, size
        try:
            with dst.write_lock, dst.backend.transaction():
                if frames:
                    dst.backend.objects.put_many(frames)
                if reframe:
                    dst.store.put_many(reframe)
                if final:
                    for commit in commits:
                        dst.commits.add(commit)
                    # No ref reaches them until the sync moves one: give them an age, so a gc
                    # meanwhile keeps them for its grace period (as ``commit_tree`` does).
                    if dst.commits.capabilities.touch:  # (else adding them gave them an age)
                        dst.commits.touch([c.id for c in commits])
        except BaseException:
            # The batch was rolled back: nothing of it may stay in the destination's caches
            # (objects taken for stored ones, a dictionary trained on it), as after a failed commit.
            dst.store.forget([oid for oid, _ in reframe])
            raise
        frames, reframe, size = [], [], 0

    for spooled in reversed(levels):
        for oid, offset, length, canonical in spooled:
            spool.seek(offset)
            (reframe if canonical else frames).append((oid, spool.read(length)))
            size += length
            if size >= BATCH_BYTES:
                write(final=False)
    write(final=True)


# -- push, fetch, pull, clone ---------------------------------------------------------------


def _contains(repo: Versioned, tip: ObjectId, old: ObjectId) -> bool:
    """Whether ``old`` is ``tip`` or one of its ancestors in ``repo``."""
    if repo.commits.get(old) is None:
        return False
    return repo.merge_base(old, tip) == old


def push(repo: Versioned, remote: Versioned | str, branch: str | None = None, *, remote_branch: str | None = None,
         force: bool = False, progress: Progress = no_progress, **options: Any) -> PushResult:
    """Send ``branch`` (default: HEAD's) to ``remote`` (a remote's name, a location —
    created if missing — or a ``Repository``) as ``remote_branch`` (default: the same
    name). Refused with
    ``PushRejectedError`` when the remote branch holds commits this one does not
    contain, unless ``force``. ``options`` open a location given directly (``endpoint=``)."""
    ref = repo.branch_ref(branch)
    name = short_name(ref)
    tip = repo.refs.get(ref)
    if tip is None:
        raise RefNotFoundError(ref, f"cannot push {name!r}: there is no such branch here")
    other = _Opened(repo, remote, options, create=True)
    try:
        dst = other.repo
        target = branch_ref(remote_branch or name)
        old = dst.refs.get(target)
        if old == tip:
            _track(repo, other.name, short_name(target), tip, "push: up to date")
            return PushResult(other.label, target, old, tip, TransferStats(), up_to_date=True)
        forced = old is not None and not _contains(repo, tip, old)
        if forced and not force:
            raise PushRejectedError(target, other.label, old, tip)
        transfer = copy_history(repo, dst, [tip], progress=progress)
        reason = f"push: {'forced ' if forced else ''}from {repo.location}"
        if not dst.swap_ref(target, old, tip, reason):
            raise RefConflictError(target, old, dst.refs.get(target))
        _track(repo, other.name, short_name(target), tip, f"push: {old.short if old else '(new)'} -> {tip.short}")
        return PushResult(other.label, target, old, tip, transfer, forced=forced)
    finally:
        other.close()


def _fetch_from(repo: Versioned, other: _Opened, branches: Iterable[str] | None,
                progress: Progress) -> FetchResult:
    src = other.repo
    heads = {name[len(HEADS):]: oid for name, oid in src.refs.list(HEADS).items()}
    if branches is not None:
        wanted = list(branches)
        for b in wanted:
            if b not in heads:
                raise RefNotFoundError(branch_ref(b), f"{other.label} has no branch {b!r}")
        heads = {b: heads[b] for b in wanted}
    _refresh(src)
    transfer = copy_history(src, repo, heads.values(), progress=progress)
    updated = {}
    for b, tip in heads.items():
        ref = _track(repo, other.name, b, tip, f"fetch: {other.label}")
        if ref is not None:
            updated[ref] = tip
    return FetchResult(other.label, heads, updated, transfer)


def fetch(repo: Versioned, remote: Versioned | str, branches: Iterable[str] | None = None, *,
          progress: Progress = no_progress, **options: Any) -> FetchResult:
    """Copy the remote's ``branches`` (default: all) and what they need into ``repo``,
    and move the remote-tracking refs of a named remote. No local branch moves."""
    other = _Opened(repo, remote, options)
    try:
        return _fetch_from(repo, other, branches, progress)
    finally:
        other.close()


def pull(repo: Versioned, remote: Versioned | str, branch: str | None = None, *, resolve: Resolve = None,
         progress: Progress = no_progress, **options: Any) -> PullResult:
    """Fetch ``branch`` (default: HEAD's) from ``remote`` and merge it into the local
    branch of that name: a fast-forward when the local one has nothing of its own, else
    a three-way merge (``resolve`` as in ``Repository.merge``; with conflicts left,
    nothing is written and they are in the result). A branch missing here is created."""
    name = short_name(repo.branch_ref(branch))
    other = _Opened(repo, remote, options)
    try:
        fetched = _fetch_from(repo, other, [name], progress)
    finally:
        other.close()
    theirs = fetched.tips[name]
    ref = branch_ref(name)
    if repo.refs.get(ref) is None:
        if not repo.swap_ref(ref, None, theirs, f"pull: created from {fetched.remote}"):
            raise RefConflictError(ref, None, repo.refs.get(ref))
        return PullResult(name, fetched, None, created=True)
    merged = repo.merge(theirs, into=name, resolve=resolve, message=f"Merge {fetched.remote} {name} into {name}")
    return PullResult(name, fetched, merged)


def clone(src: Versioned | str, dst: str, *, progress: Progress = no_progress, origin: str = "origin",
          src_options: Mapping[str, Any] | None = None, **options: Any) -> RepositoryCore:
    """A new repository at ``dst`` (``options`` open it: ``endpoint=``...) holding every
    branch and tag of ``src`` (a location or a ``Repository``), HEAD on the same branch,
    and ``src`` as remote ``origin`` with its remote-tracking refs (when ``src`` is a
    location). ``RepositoryError`` if ``dst`` holds commits already."""
    source = src if isinstance(src, RepositoryCore) else open_repository(str(src), create=False, **dict(src_options or {}))
    # A clone that fails leaves no half-made repository file behind, as git removes the
    # folder of a failed clone (a file that was there before is left as it was).
    new_file = "://" not in str(dst) and not os.path.lexists(dst)
    try:
        target = open_repository(dst, **options)
        try:
            if target.refs.list(""):
                raise RepositoryError(f"cannot clone into {dst!r}: it holds refs already")
            refs = {**source.refs.list(HEADS), **source.refs.list(TAGS)}
            copy_history(source, target, refs.values(), progress=progress)
            for ref, oid in refs.items():
                if not target.swap_ref(ref, None, oid, f"clone: from {source.location}"):
                    raise RefConflictError(ref, None, target.refs.get(ref))
            head = source.refs.get_symbolic("HEAD")
            if head is not None:
                target.refs.set_symbolic("HEAD", head)
            if not isinstance(src, RepositoryCore):
                add_remote(target, origin, str(src), **dict(src_options or {}))
                for ref, oid in refs.items():
                    if ref.startswith(HEADS):
                        _track(target, origin, ref[len(HEADS):], oid, f"clone: from {src}")
        except BaseException:
            target.close()
            if new_file:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{dst}{suffix}").unlink(missing_ok=True)
            raise
        return target
    finally:
        if source is not src:
            source.close()
