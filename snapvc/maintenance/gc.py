"""Garbage collection: plan what no root reaches, then sweep it, safely beside writers.

Roots (invariant 5 of docs/design.md):

- every ref (branches, tags, a detached HEAD);
- every reflog entry younger than the reflog expiry (older entries are expired by the
  sweep, so no entry ever names a deleted commit);
- every object, and every commit of the commit index, younger than the grace period (by
  its ``mtime``, which a put of an existing id refreshes): what a writer in another
  process stored but no ref reaches yet is safe for that long. In a format 3 SQLite
  file an object's age is its block's time in table ``packs`` (a sealed pack: the
  youngest block it joined), and deleting rewrites each pack holding garbage without
  it; after the sweep every pack still to seal is sealed and the pages freed go back
  to the file system (``release_space``).

What roots reach is kept: commits through all their parents, their trees, and the delta
bases of every kept frame (transitively: a base may itself be a delta); compression
dictionaries are never deleted. The rest is the plan's garbage. Anything a ref, a
reflog entry or HEAD reaches that cannot be read stops gc before it deletes anything;
below commits that are roots only for their age, what cannot be read (history a sweep
removed before them) is named in the report instead (``_Marker``).

The sweep runs in one write transaction, which excludes every writer. Inside it, the
roots are read again and what they reach beyond the plan is kept too (a commit made
between plan and sweep), and each doomed object's age is read again (a writer may have
put it again since); the delta bases of both are kept with them. Then it deletes,
expires the reflog, and bumps the gc epoch in the same transaction. A writer compares
the epoch its caches were built after with the current one inside its own commit
transaction (``Repository.commit``): encoder caches, delta bases held in memory and
objects found stored before a sweep may name deleted objects, so a changed epoch drops
them all and the commit is encoded again from scratch.

Retention (``Keep``) thins a branch's first-parent history like ``restic forget``: keep
the last N commits, and the newest commit of each of the last N hours, days, weeks that
have commits. Kept commits older than the first dropped one keep their ids; every newer
kept commit is written again with the same tree, author, time, message and metadata and
a single parent, the previous kept commit (so its id changes, and a kept merge commit
loses its second parents). The branch moves by compare-and-swap with a reflog entry; a
branch another writer moved meanwhile is left as it was and named in the report. The
old commits stay reachable from the reflog until their entries expire: pass
``reflog_expiry=0`` to free their space in the same run. Tags keep what they point at.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any


from snapvc.maintenance.stats import format_bytes, plural
from snapvc.errors import DamagedRowsError, InvalidArgumentError, RefConflictError, RepositoryError, SnapvcError, UnsafeGcError
from snapvc.ids import ObjectId
from snapvc.maintenance.graph import (
    Progress,
    batches,
    no_progress,
    read_batch,
    read_children,
    read_commit,
    read_frames,
    ref_roots,
    reflog_roots,
    with_bases,
)
from snapvc.objects import Commit
from snapvc.refs.names import HEADS
from snapvc.store.codec import open_object_store

if TYPE_CHECKING:
    from snapvc.repository.roles import Versioned

__all__ = ["Keep", "Rewrite", "GcPlan", "GcReport", "plan_gc", "sweep", "gc", "thin_history", "DEFAULT_GRACE",
           "DEFAULT_REFLOG_EXPIRY"]

DEFAULT_GRACE = timedelta(hours=1)
DEFAULT_REFLOG_EXPIRY = timedelta(days=30)
_SHOWN = 5  # ids named per kind of damage in a report


def _duration(seconds: float) -> str:
    """``90`` -> ``1m30s``: a grace period as the command line writes it."""
    whole = round(seconds)
    if whole != seconds or whole < 60:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)


def _seconds(value: timedelta | float, name: str) -> float:
    """A period given as a ``timedelta`` or seconds, in seconds. NaN is refused: every
    comparison with it is false, so no object would count as younger than a NaN grace
    period, and none would be below the safe minimum either."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgumentError(name, f"{name} is a timedelta or seconds, not {value!r}")
    if math.isnan(seconds):
        raise InvalidArgumentError(name, f"{name} is a number of seconds, not {value!r}")
    if seconds < 0:
        raise InvalidArgumentError(name, f"{name} must not be negative, got {value!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class Keep:
    """A retention policy for each branch's first-parent history (``restic forget``'s
    ``--keep-last/hourly/daily/weekly``). A commit is kept if any rule keeps it; the tip
    always is. ``branches``: the branches it applies to (default: all)."""

    last: int = 0
    hourly: int = 0
    daily: int = 0
    weekly: int = 0
    branches: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("last", "hourly", "daily", "weekly"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgumentError(f"Keep.{name}", f"Keep.{name} is a count >= 0, got {value!r}")
        if not (self.last or self.hourly or self.daily or self.weekly):
            raise InvalidArgumentError("Keep", "a Keep policy needs at least one of last, hourly, daily, weekly")

    def __str__(self) -> str:
        rules = [f"{name} {getattr(self, name)}" for name in ("last", "hourly", "daily", "weekly") if getattr(self, name)]
        return "keep " + ", ".join(rules)

    def select(self, chain: list[Commit]) -> set[ObjectId]:
        """The ids kept of ``chain`` (a first-parent history, newest first)."""
        kept = {c.id for c in chain[: max(self.last, 1)]}
        for count, bucket in ((self.hourly, _hour), (self.daily, _day), (self.weekly, _week)):
            seen: set[Any] = set()
            for c in chain:
                if len(seen) >= count:
                    break
                b = bucket(c.timestamp_us)
                if b not in seen:
                    seen.add(b)
                    kept.add(c.id)
        return kept


def _utc(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def _hour(us: int) -> Any:
    return us // 3_600_000_000


def _day(us: int) -> Any:
    return _utc(us).date()


def _week(us: int) -> Any:
    return _utc(us).isocalendar()[:2]


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A branch whose history retention thinned: its tip before and after, and how many
    of its first-parent commits were kept of how many."""

    branch: str
    old_tip: ObjectId
    new_tip: ObjectId
    kept: int
    total: int


@dataclass
class GcPlan:
    """What a gc would delete, and why the rest stays. Built by ``plan_gc``; ``sweep``
    carries it out."""

    now: float
    grace_seconds: float
    reflog_before: float
    reachable_objects: set[ObjectId]
    reachable_commits: set[ObjectId]
    garbage_objects: dict[ObjectId, int]  # id -> stored bytes
    garbage_commits: dict[ObjectId, int]  # id -> canonical bytes (kept in the commit index)
    frame_bases: dict[ObjectId, ObjectId]  # each delta frame the plan listed -> its base
    young_objects: int  # unreachable, kept by the grace period
    delta_bases: int  # unreachable, kept because a kept frame is a delta on them
    total_objects: int
    total_commits: int
    rewrites: list[Rewrite] = field(default_factory=list)
    skipped_branches: list[str] = field(default_factory=list)
    # Damaged rows of objects nothing reached (the sweep drops them: row -> what is wrong),
    # and what the sweep met that it could not remove, as sentences for the report.
    damaged_rows: dict[str, str] = field(default_factory=dict)
    damage: list[str] = field(default_factory=list)
    # Of the reachable: what refs, reflog entries and HEAD reach (the rest is reached only
    # from commits younger than the grace period), and what marking from those young
    # commits could not read (id -> what, why, the error; see ``_Marker``).
    held_commits: set[ObjectId] = field(default_factory=set)
    held_objects: set[ObjectId] = field(default_factory=set)
    tolerated: dict[ObjectId, tuple[str, str, str]] = field(default_factory=dict)

    @property
    def bytes_to_free(self) -> int:
        return sum(self.garbage_objects.values()) + sum(self.garbage_commits.values())


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a gc did (or, with ``dry_run``, would do): objects and commits removed, by id,
    the bytes freed, what was kept and why, and the branches retention rewrote."""

    dry_run: bool
    removed_objects: tuple[ObjectId, ...]
    removed_commits: tuple[ObjectId, ...]
    bytes_freed: int
    objects_before: int
    commits_before: int
    kept_young: int  # unreachable objects younger than the grace period
    kept_delta_bases: int
    expired_reflog_entries: int
    rewrites: tuple[Rewrite, ...]
    skipped_branches: tuple[str, ...]  # retention left them: another writer moved them
    seconds: float
    # Damage met on the way: damaged rows dropped (nothing reached them), damaged garbage
    # left (it could not be removed without losing what is kept beside it), and history
    # missing below commits kept only for their age (no ref, reflog entry or HEAD reaches
    # them; see ``_Marker``).
    damage: tuple[str, ...] = ()

    def __str__(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        text = (f"{verb} {len(self.removed_objects):,} of {plural(self.objects_before, 'object')} and "
                f"{len(self.removed_commits):,} of {plural(self.commits_before, 'commit')}, "
                f"{format_bytes(self.bytes_freed)}; kept {self.kept_young:,} younger than the grace period "
                f"and {plural(self.kept_delta_bases, 'delta base')}")
        if self.expired_reflog_entries:
            text += (f"; {'would expire' if self.dry_run else 'expired'} "
                     f"{plural(self.expired_reflog_entries, 'reflog entry', 'reflog entries')}")
        for r in self.rewrites:
            text += f"\n{r.branch}: kept {r.kept:,} of {plural(r.total, 'commit')} ({r.old_tip.short} -> {r.new_tip.short})"
        for b in self.skipped_branches:
            text += f"\n{b}: not thinned, another writer moved it meanwhile"
        for d in self.damage:
            text += f"\ndamage: {d}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-safe values (ids in hex)."""
        return {
            "dry_run": self.dry_run, "removed_objects": [o.hex for o in self.removed_objects],
            "removed_commits": [c.hex for c in self.removed_commits], "bytes_freed": self.bytes_freed,
            "objects_before": self.objects_before, "commits_before": self.commits_before,
            "kept_young": self.kept_young, "kept_delta_bases": self.kept_delta_bases,
            "expired_reflog_entries": self.expired_reflog_entries,
            "rewrites": [{"branch": r.branch, "old_tip": r.old_tip.hex, "new_tip": r.new_tip.hex, "kept": r.kept,
                          "total": r.total} for r in self.rewrites],
            "skipped_branches": list(self.skipped_branches), "seconds": round(self.seconds, 3),
            "damage": list(self.damage),
        }


# -- retention ------------------------------------------------------------------------------


def _first_parent_chain(repo: Versioned, tip: ObjectId) -> list[Commit]:
    chain: list[Commit] = []
    oid: ObjectId | None = tip
    while oid is not None:
        commit = repo.get_commit(oid, walking=True)
        chain.append(commit)
        oid = commit.parent
    return chain


def thin_history(repo: Versioned, keep: Keep, *, dry_run: bool = False) -> tuple[list[Rewrite], list[str], dict[ObjectId, Commit]]:
    """Apply ``keep`` to every branch (see the module docstring): the rewrites, the
    branches left because another writer moved them, and the new commits (written unless
    ``dry_run``)."""
    rewrites: list[Rewrite] = []
    skipped: list[str] = []
    made: dict[ObjectId, Commit] = {}
    for name, tip in repo.refs.list(HEADS).items():
        branch = name[len(HEADS):]
        if keep.branches is not None and branch not in keep.branches:
            continue
        chain = _first_parent_chain(repo, tip)
        kept = keep.select(chain)
        if len(kept) == len(chain):
            continue
        new_commits: list[Commit] = []
        previous: Commit | None = None
        rewriting = False
        for commit in reversed(chain):
            if commit.id not in kept:
                rewriting = True
                continue
            if rewriting:
                # Its metadata as stored: one made before today's rules on metadata is kept, not refused.
                commit, _ = commit.moved((previous.id,) if previous is not None else (),
                                         1 + (previous.generation if previous is not None else 0))
                new_commits.append(commit)
            previous = commit
        assert previous is not None
        rewrite = Rewrite(branch, tip, previous.id, len(kept), len(chain))
        if not dry_run:
            try:
                with repo.write_lock, repo.backend.transaction():
                    for commit in new_commits:
                        repo.commits.add(commit)
                    repo.check_stored(previous.id, name)  # a ref moves only to a commit stored
                    if not repo.refs.compare_and_swap(name, tip, previous.id, f"gc: {keep}, {len(kept)} of {len(chain)} commits"):
                        raise RefConflictError(name, tip, repo.refs.get(name))
            except RefConflictError:
                skipped.append(branch)
                continue
        made.update((c.id, c) for c in new_commits)
        rewrites.append(rewrite)
    return rewrites, skipped, made


# -- marking --------------------------------------------------------------------------------


class _Marker:
    """What roots reach: commits (all parents) and the objects of their trees.

    Roots come in two kinds. What a ref, a reflog entry or HEAD reaches (``held``) must
    read whole: anything missing or damaged there stops gc before it deletes anything.
    A commit that is a root only because it is younger than the grace period (no ref,
    reflog entry or HEAD reaches it) may lack history: on S3, where nothing excludes
    writers from a sweep, a commit whose compare-and-swap lost to a reset of its branch
    stays stored, and a sweep may have removed its parent meanwhile (old, and reached by
    nothing once the branch moved). What such roots reach and cannot be read is recorded
    in ``tolerated`` and marking goes on: it is garbage whose history went before it.

    Why that cannot delete what a ref reaches: ``mark_all`` marks every held root first,
    to the end, stopping at the first thing it cannot read; only then does it mark from
    the young roots, skipping what is marked already. So everything below a held root is
    marked (kept) or has stopped gc, and a failure met from a young root is below no held
    root. Tolerating it only leaves unmarked what sits below the missing or damaged
    object, which no held root reaches either. The sweep marks the held roots again as
    they are then (a ref moved since to a young commit included), strictly.
    """

    def __init__(self, repo: Versioned, store: Any, extra_commits: dict[ObjectId, Commit],
                 stored: set[ObjectId]) -> None:
        self.repo = repo
        self.store = store
        self.extra = extra_commits  # commits of a dry run's thinning, not written
        self.stored = stored  # every id in the object store (commit objects of older files included)
        self.commits: set[ObjectId] = set()
        self.objects: set[ObjectId] = set()
        # Met below young roots only and not read: id -> (what it is, why marked, the error).
        self.tolerated: dict[ObjectId, tuple[str, str, str]] = {}

    def mark_all(self, held: Iterable[tuple[ObjectId, str]], young: Iterable[tuple[ObjectId, str]]) -> None:
        """Mark ``held`` (reached by a ref, a reflog entry, HEAD) strictly and to the end,
        then ``young`` (roots only for their age), tolerating what they lack: the order
        is what keeps this safe (class docstring)."""
        self.mark(held)
        self.mark(young, young_only=True)

    def mark(self, roots: Iterable[tuple[ObjectId, str]], *, young_only: bool = False) -> None:
        trees: list[ObjectId] = []
        waiting = [(oid, why) for oid, why in roots]
        while waiting:
            oid, why = waiting.pop()
            if oid in self.commits:
                continue
            commit = self.extra.get(oid)
            if commit is None:
                try:
                    commit = read_commit(self.repo, self.store, oid)
                except SnapvcError as exc:
                    if young_only:
                        self.tolerated.setdefault(oid, ("commit", why, str(exc)))
                        continue
                    raise RepositoryError(f"gc stopped before deleting anything: commit {oid} ({why}) cannot be "
                                          f"read: {exc}; run 'snapvc fsck'") from None
            self.commits.add(oid)
            if oid in self.stored:
                self.objects.add(oid)  # an older file's commit object
            if commit.tree not in self.objects:
                trees.append(commit.tree)
            waiting.extend((p, f"parent of {oid.short}") for p in commit.parents)
        self._mark_trees(trees, young_only)

    def _mark_trees(self, level: list[ObjectId], young_only: bool = False) -> None:
        """Mark ``level`` and everything below it, one level of the trees per batch read.
        ``young_only``: below roots that are roots only for their age, what cannot be read
        is recorded in ``tolerated`` (it stays marked: a damaged object stored is kept)."""
        level = [oid for oid in dict.fromkeys(level) if oid not in self.objects]
        while level:
            self.objects.update(level)
            found, errors = read_batch(self.store, level)
            if errors and young_only:
                for oid, exc in errors.items():
                    self.tolerated.setdefault(oid, ("object", "below a commit no ref reaches", str(exc)))
                errors = {}
            if errors:
                oid, exc = next(iter(errors.items()))
                raise RepositoryError(f"gc stopped before deleting anything: reachable object {oid} cannot be read "
                                      f"({exc}); {len(errors)} such; run 'snapvc fsck'")
            following: list[ObjectId] = []
            for oid, data in found.items():
                try:
                    children = read_children(oid, data)
                except SnapvcError as exc:
                    if young_only:
                        self.tolerated.setdefault(oid, ("object", "below a commit no ref reaches", str(exc)))
                        continue
                    raise RepositoryError(f"gc stopped before deleting anything: reachable object {oid} does not "
                                          f"decode ({exc}); run 'snapvc fsck'") from None
                following.extend(c for c, _ in children if c not in self.objects)
            level = list(dict.fromkeys(following))


def _roots(repo: Versioned, now: float, reflog_before: float, grace: float, commit_ages: dict[ObjectId, float],
           moved: dict[str, ObjectId] | None = None) -> tuple[list[tuple[ObjectId, str]], list[tuple[ObjectId, str]]]:
    """The roots held by a ref (HEAD included) or a reflog entry, and the commits that
    are roots only because they are younger than the grace period."""
    held = [((moved or {}).get(name, oid), name) for name, oid in ref_roots(repo).items()]
    held += [(oid, why) for oid, why in reflog_roots(repo, reflog_before).items()]
    young = [(oid, "younger than the grace period") for oid, t in commit_ages.items()
             if t >= now - grace and repo.commits.get(oid) is not None]
    return held, young


def _tolerated(tolerated: dict[ObjectId, tuple[str, str, str]]) -> list[str]:
    """What marking met below young roots only and could not read, as report sentences."""
    out: list[str] = []
    commits = [(oid, why, error) for oid, (what, why, error) in tolerated.items() if what == "commit"]
    for oid, why, error in commits[:_SHOWN]:
        out.append(f"commit {oid.short} ({why}) cannot be read: {error}; only commits no ref, reflog entry or HEAD "
                   f"reaches lead to it (kept while younger than the grace period): their history went before them")
    if len(commits) > _SHOWN:
        out.append(f"and {plural(len(commits) - _SHOWN, 'more commit')} like it")
    objects = [(oid, error) for oid, (what, _, error) in tolerated.items() if what == "object"]
    if objects:
        shown = "; ".join(f"{oid.short}: {error}" for oid, error in objects[:_SHOWN])
        out.append(f"{plural(len(objects), 'object')} below commits no ref, reflog entry or HEAD reaches (kept only "
                   f"while younger than the grace period) cannot be read: {shown}")
    return out


def _frames(repo: Versioned, ids: list[ObjectId], progress: Progress) -> tuple[dict[ObjectId, int], dict[ObjectId, ObjectId]]:
    """Stored size of each object and the base of each delta frame, from the raw frames."""
    sizes: dict[ObjectId, int] = {}
    bases: dict[ObjectId, ObjectId] = {}
    parts = batches(ids)
    for batch in progress(parts, len(parts), "reading frames"):
        try:
            got_sizes, got_bases = read_frames(repo.backend.objects, batch)
        except SnapvcError:
            if not repo.backend.objects.capabilities.compresses:
                raise
            # A damaged pack: its objects one by one. Those that cannot be read have no
            # size here (and no delta base: a pack holds raw frames); if a root reaches
            # one, marking stops gc, else it is garbage like any.
            got_sizes, got_bases = {}, {}
            for oid in batch:
                try:
                    got_sizes.update(read_frames(repo.backend.objects, [oid])[0])
                except SnapvcError:
                    continue
        sizes.update(got_sizes)
        bases.update(got_bases)
    return sizes, bases


def _bases_of(repo: Versioned, ids: set[ObjectId], known: dict[ObjectId, ObjectId]) -> dict[ObjectId, ObjectId]:
    """``known`` (the plan's delta frames) with the bases of ``ids`` and of their bases,
    transitively, read from the frames the plan did not list (written since)."""
    bases = dict(known)
    read: set[ObjectId] = set()
    unread = [oid for oid in ids if oid not in bases]
    while unread:
        read.update(unread)
        for batch in batches(unread):
            bases.update(read_frames(repo.backend.objects, batch)[1])
        unread = list({bases[oid] for oid in unread if oid in bases} - read - bases.keys())
    return bases


@contextmanager
def _stopped_by_damage() -> Iterator[None]:
    """Reads before gc deletes anything: a damaged file (a row of the wrong type or size, a
    page SQLite cannot read, a damaged ref) stops gc there, naming the damage; gc never
    guesses an age or a root."""
    try:
        yield
    except SnapvcError as exc:
        raise RepositoryError(f"gc stopped before deleting anything: {exc}") from None


def plan_gc(repo: Versioned, *, grace: timedelta | float = DEFAULT_GRACE,
            reflog_expiry: timedelta | float = DEFAULT_REFLOG_EXPIRY, extra_commits: dict[ObjectId, Commit] | None = None,
            moved: dict[str, ObjectId] | None = None, extra_roots: Iterable[tuple[ObjectId, str]] = (),
            progress: Progress = no_progress) -> GcPlan:
    """Mark from the roots and list what is garbage; nothing is changed. ``extra_commits``,
    ``moved`` (ref -> tip) and ``extra_roots`` describe refs moved to commits not written
    (a dry run of thinning)."""
    grace_s, expiry_s = _seconds(grace, "grace"), _seconds(reflog_expiry, "reflog_expiry")
    now = float(repo.clock())
    store = open_object_store(repo.backend.objects)  # a fresh stack: nothing served from caches
    damaged_rows: dict[str, str] = {}
    with _stopped_by_damage():
        try:
            ids = list(repo.backend.objects.iter_ids())
        except DamagedRowsError as exc:
            # Rows whose objects cannot be read: droppable if marking below reads every
            # object a root reaches without them (a store that can drop them).
            if not hasattr(repo.backend.objects, "drop_damaged") or not isinstance(exc.readable, list):
                raise
            ids, damaged_rows = exc.readable, exc.damaged
        sizes, bases = _frames(repo, ids, progress)
        commit_ages = repo.commits.mtimes()
        held, young_roots = _roots(repo, now, now - expiry_s, grace_s, commit_ages, moved)
        # Read here too, so that their damage stops gc before it starts: the epoch the
        # sweep bumps, and HEAD, which every command reads.
        repo.backend.gc_epoch()
        repo.refs.get_symbolic("HEAD")
    marker = _Marker(repo, store, extra_commits or {}, set(ids))
    try:
        marker.mark(held + list(extra_roots))
        held_commits, held_objects = set(marker.commits), set(marker.objects)
        marker.mark(young_roots, young_only=True)
    except RepositoryError as exc:
        if not damaged_rows:
            raise
        rows = "; ".join(f"{row}: {what}" for row, what in damaged_rows.items())
        raise RepositoryError(f"{exc}; the file holds damaged rows: {rows}") from None
    ages = {}
    unreachable = [oid for oid in ids if oid not in marker.objects]
    with _stopped_by_damage():
        for batch in batches(unreachable):
            ages.update(repo.backend.objects.mtimes(batch))
        all_commits = repo.commits.ids()
        garbage_commits = {oid: len(c.encode()) for oid in all_commits if oid not in marker.commits
                           and (c := repo.commits.get(oid)) is not None}
    young = {oid for oid in unreachable if ages.get(oid, 0.0) >= now - grace_s}
    keep = with_bases(marker.objects | young, bases)
    garbage_objects = {oid: sizes.get(oid, 0) for oid in ids if oid not in keep}
    if extra_commits:
        garbage_commits = {oid: n for oid, n in garbage_commits.items() if oid not in extra_commits}
    return GcPlan(
        now=now, grace_seconds=grace_s, reflog_before=now - expiry_s,
        reachable_objects=marker.objects, reachable_commits=marker.commits,
        garbage_objects=garbage_objects, garbage_commits=garbage_commits,
        frame_bases=bases, young_objects=len(young),
        delta_bases=len(keep) - len(marker.objects | young),
        total_objects=len(ids), total_commits=len(all_commits), damaged_rows=damaged_rows,
        held_commits=held_commits, held_objects=held_objects, tolerated=dict(marker.tolerated),
        damage=_tolerated(marker.tolerated),
    )


# -- sweeping -------------------------------------------------------------------------------


def sweep(repo: Versioned, plan: GcPlan, progress: Progress = no_progress) -> tuple[list[ObjectId], list[ObjectId], int, int]:
    """Delete ``plan``'s garbage in one write transaction, after keeping whatever the
    roots reach now and whatever was put again since (see the module docstring).
    Returns the objects and commits deleted, the bytes freed and the reflog entries
    expired."""
    store = open_object_store(repo.backend.objects)
    with repo.write_lock, repo.backend.transaction():
        ids = set(plan.garbage_objects) | plan.reachable_objects
        marker = _Marker(repo, store, {}, ids)
        # Only what the held roots reached is taken as marked: a ref moved since the plan
        # to a commit the plan reached only for its age is marked again, strictly.
        marker.commits, marker.objects = set(plan.held_commits), set(plan.held_objects)
        commit_ages = repo.commits.mtimes()
        # Roots as they are now: refs and reflog entries written since the plan, commits
        # made since; the ages use the plan's time, so nothing the plan kept is dropped.
        marker.mark_all(*_roots(repo, plan.now, plan.reflog_before, plan.grace_seconds, commit_ages))
        marker.objects |= plan.reachable_objects  # kept by the plan (young roots of its time)
        marker.commits |= plan.reachable_commits
        if marker.tolerated.keys() - plan.tolerated.keys():
            met = {oid: got for oid, got in marker.tolerated.items() if oid not in plan.tolerated}
            plan.damage += _tolerated(met)
        doomed = [oid for oid in plan.garbage_objects if oid not in marker.objects]
        ages: dict[ObjectId, float] = {}
        for batch in batches(doomed):
            ages.update(repo.backend.objects.mtimes(batch))
        # Kept now though the plan did not keep it: reached by a commit made since (which
        # may reuse doomed objects, or store frames based on them), or put again. Their
        # delta bases stay too.
        spared = marker.objects - plan.reachable_objects
        spared.update(oid for oid in doomed if oid in ages and ages[oid] >= plan.now - plan.grace_seconds)
        if spared:
            spared = with_bases(spared, _bases_of(repo, spared, plan.frame_bases))
        doomed = [oid for oid in doomed if oid in ages and oid not in spared]
        doomed_commits = [oid for oid in plan.garbage_commits if oid not in marker.commits
                          and commit_ages.get(oid, 0.0) < plan.now - plan.grace_seconds]
        removed = 0
        # A store that compresses itself (a format 3 file's packs) rewrites every pack
        # holding a doomed object: all of them in one call, so each pack is rewritten once.
        parts = [doomed] if doomed and repo.backend.objects.capabilities.compresses else batches(doomed)
        # On S3 nothing excludes writers from this sweep: the backend keeps what was
        # stored again at or after the cutoff since the ages above were read.
        cutoff = plan.now - plan.grace_seconds
        for batch in progress(parts, len(parts), "deleting objects"):
            removed += repo.backend.delete_garbage(batch, commits=False, older_than=cutoff)
        if doomed and repo.backend.objects.capabilities.compresses:
            # A damaged pack that also holds objects to keep is left whole: its garbage stays.
            left = repo.backend.objects.has_many(doomed)
            if left:
                doomed = [oid for oid in doomed if oid not in left]
                plan.damage.append(f"{plural(len(left), 'object')} of damaged packs not removed: they share a pack "
                                   f"with objects kept (run 'snapvc fsck'): {', '.join(o.short for o in sorted(left)[:5])}")
        if plan.damaged_rows:
            dropped = getattr(repo.backend.objects, "drop_damaged")()  # noqa: B009 - plan_gc checked the store has it
            plan.damage += [f"dropped {row}: {what}" for row, what in dropped.items()]
        repo.backend.delete_garbage(doomed_commits, commits=True, older_than=cutoff)
        # Entries at or before ``reflog_before`` were no roots: none may outlive its commits.
        expired = repo.refs.expire_reflog(math.nextafter(plan.reflog_before, math.inf))
        repo.commits.forget_mtimes(plan.now - plan.grace_seconds)
        if doomed or doomed_commits:
            repo.backend.bump_gc_epoch()
    repo.backend.release_space()  # (not inside the transaction: an SQLite file frees pages after it)
    freed = sum(plan.garbage_objects[o] for o in doomed) + sum(plan.garbage_commits[c] for c in doomed_commits)
    return doomed, doomed_commits, freed, expired


def gc(repo: Versioned, *, dry_run: bool = False, grace: timedelta | float = DEFAULT_GRACE,
       reflog_expiry: timedelta | float = DEFAULT_REFLOG_EXPIRY, keep: Keep | None = None,
       progress: Progress = no_progress, force: bool = False) -> GcReport:
    """Thin history by ``keep`` (if given), plan, then sweep (unless ``dry_run``). A grace
    below the backend's safe minimum beside writers (``Backend.min_gc_grace``: on S3,
    ``snapvc.backends.s3.GcTiming.min_grace``) is refused unless ``force``: say so only
    when no other client is writing."""
    started = time.perf_counter()
    grace_s, expiry_s = _seconds(grace, "grace"), _seconds(reflog_expiry, "reflog_expiry")
    minimum = repo.backend.min_gc_grace()
    if grace_s < minimum and not dry_run and not force:
        raise UnsafeGcError(
            repo.location, grace_s, minimum,
            f"{repo.location}: gc refused: a grace period of {_duration(grace_s)} is below {_duration(minimum)}, the "
            f"shortest that keeps what concurrent writers rely on here; with no other client writing, pass "
            f"force=True (snapvc gc --force)")
    rewrites: list[Rewrite] = []
    skipped: list[str] = []
    extra: dict[ObjectId, Commit] = {}
    if keep is not None:
        rewrites, skipped, extra = thin_history(repo, keep, dry_run=dry_run)
    # A dry run plans as if the branches had moved: their new tips (commits kept in
    # ``extra`` only) are roots, and their old tips too while the reflog would name them.
    moved = {HEADS + r.branch: r.new_tip for r in rewrites} if dry_run else {}
    old_tips = [(r.old_tip, f"{HEADS}{r.branch}@{{reflog}}") for r in rewrites] if dry_run and expiry_s > 0 else []
    plan = plan_gc(repo, grace=grace_s, reflog_expiry=expiry_s, extra_commits=extra, moved=moved,
                   extra_roots=old_tips, progress=progress)
    if dry_run:
        objects, commits, freed = list(plan.garbage_objects), list(plan.garbage_commits), plan.bytes_to_free
        plan.damage += [f"would drop {row}: {what}" for row, what in plan.damaged_rows.items()]
        expired = sum(1 for name in repo.refs.reflog_names() for e in repo.refs.reflog(name)
                      if e.time <= plan.reflog_before)
    else:
        objects, commits, freed, expired = sweep(repo, plan, progress)
        repo.invalidate_caches()
    return GcReport(
        dry_run=dry_run, removed_objects=tuple(objects), removed_commits=tuple(commits), bytes_freed=freed,
        objects_before=plan.total_objects, commits_before=plan.total_commits,
        kept_young=plan.young_objects, kept_delta_bases=plan.delta_bases,
        expired_reflog_entries=expired, rewrites=tuple(rewrites), skipped_branches=tuple(skipped),
        seconds=time.perf_counter() - started, damage=tuple(plan.damage),
    )
