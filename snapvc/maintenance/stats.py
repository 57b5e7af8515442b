"""What a repository holds: objects, bytes stored, and what the states would take stored
whole (``Repository.stats``), per repository and per branch (``snapvc stats``)."""

from __future__ import annotations

from dataclasses import dataclass

from snapvc.encoding.nodes import children_of
from snapvc.errors import RefNotFoundError
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, COMMIT, KIND_NAMES, split_object
from snapvc.refs.names import HEADS, TAGS, short_name
from snapvc.repository.roles import Versioned

__all__ = ["RepoStats", "BranchStats", "format_bytes", "plural", "repo_stats", "branch_stats"]

# A child reference inside a node: its 32-byte id and two bytes of framing.
_REF_BYTES = 34


@dataclass(frozen=True, slots=True)
class RepoStats:
    """What a repository holds. ``objects`` (and ``objects_by_kind``) are the objects
    states are made of, as ``fsck`` counts them; ``commits`` are counted apart.
    ``stored_bytes`` is what both take as stored; ``logical_bytes`` is what storing
    every commit's whole state separately would take (uncompressed); ``dedup_ratio``
    is that over ``stored_bytes``."""

    objects: int
    stored_bytes: int
    logical_bytes: int
    commits: int
    branches: int
    tags: int
    objects_by_kind: dict[str, int]

    @property
    def dedup_ratio(self) -> float:
        return self.logical_bytes / self.stored_bytes if self.stored_bytes else 0.0

    def __str__(self) -> str:
        kinds = ", ".join(f"{n:,} {k}" for k, n in sorted(self.objects_by_kind.items()))
        return (
            f"{plural(self.commits, 'commit')} on {plural(self.branches, 'branch', 'branches')}, "
            f"{plural(self.tags, 'tag')}; {plural(self.objects, 'object')}" + (f" ({kinds})" if kinds else "")
            + f"; stored {format_bytes(self.stored_bytes)} for {format_bytes(self.logical_bytes)} of states: "
            f"{self.dedup_ratio:.1f}x"
        )


@dataclass(frozen=True, slots=True)
class BranchStats:
    """What one branch's history holds: its ``commits``; ``logical_bytes``, what their
    states would take stored whole, each separately (uncompressed); ``objects`` and
    ``distinct_bytes``, the distinct objects those states are made of and their
    uncompressed size. ``dedup_ratio`` is logical over distinct: how much sharing
    unchanged parts between checkpoints saves, before compression."""

    branch: str
    commits: int
    logical_bytes: int
    objects: int
    distinct_bytes: int

    @property
    def dedup_ratio(self) -> float:
        return self.logical_bytes / self.distinct_bytes if self.distinct_bytes else 0.0

    def __str__(self) -> str:
        return (f"{self.branch}: {plural(self.commits, 'commit')}; {plural(self.objects, 'object')}, "
                f"{format_bytes(self.distinct_bytes)} "
                f"for {format_bytes(self.logical_bytes)} of states: {self.dedup_ratio:.1f}x")


def format_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``94.7 MiB``: binary units (1 KiB = 1,024 bytes), the
    units of every size snapvc prints (``diff --stat`` too)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 branch``, ``2 branches``, ``1,024 objects``: a count with its noun agreeing
    (``words``, the plural, when adding an s will not do)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"




def repo_stats(repo: Versioned) -> RepoStats:
    """Objects, commits, bytes stored, bytes the states would take stored whole, and
    the ratio. Commits are counted apart from objects; their bytes (their canonical
    size where they live in the commit index) count in ``stored_bytes``."""
    sizes = repo.store.sizes()
    by_kind: dict[str, int] = {}
    ids = list(repo.store.iter_ids())
    logical_of: dict[bytes, int] = {}
    in_store: set[ObjectId] = set()
    for start in range(0, len(ids), 500):
        batch = ids[start : start + 500]
        for oid, data in repo.store.get_many(batch).items():
            kind = data[0]
            if kind == COMMIT:  # a commit in the object store (older files): counted with the commits
                in_store.add(oid)
                continue
            name = KIND_NAMES.get(kind, f"kind {kind:#04x}")
            by_kind[name] = by_kind.get(name, 0) + 1
    only_in_index = [oid for oid in repo.commits.ids() if oid not in in_store]
    logical = 0
    for cid in [*in_store, *only_in_index]:
        logical += _logical_size(repo, repo.get_commit(cid).tree, logical_of)
    index_bytes = sum(len(repo.get_commit(cid).encode()) for cid in only_in_index)
    return RepoStats(
        objects=sizes.objects - len(in_store),
        stored_bytes=sizes.stored_bytes + index_bytes,
        logical_bytes=logical,
        commits=len(in_store) + len(only_in_index),
        branches=len(repo.refs.list(HEADS)),
        tags=len(repo.refs.list(TAGS)),
        objects_by_kind=by_kind,
    )


def branch_stats(repo: Versioned, branch: str, logical_of: dict[bytes, int] | None = None) -> BranchStats:
    """What ``branch``'s history holds (see ``BranchStats``): every commit reachable
    from its tip, and every object their states are made of, read once each.
    ``logical_of`` remembers the whole size of each tree across calls (branches share
    most of their trees)."""
    memo: dict[bytes, int] = {} if logical_of is None else logical_of
    ref = repo.branch_ref(branch)
    tip = repo.refs.get(ref)
    if tip is None:
        raise RefNotFoundError(ref, f"no branch {short_name(ref)!r}")
    commits = list(repo.log(tip))
    distinct: dict[bytes, int] = {}
    waiting: list[bytes] = [c.tree for c in commits]
    while waiting:
        oid = waiting.pop()
        if oid in distinct:
            continue
        kind, payload = split_object(ObjectId(oid), repo.loader.fetch(oid))
        distinct[oid] = len(payload)
        if kind != BLOB:
            waiting.extend(children_of(kind, repo.loader.node(oid)[1]))
    logical = sum(_logical_size(repo, c.tree, memo) for c in commits)
    return BranchStats(short_name(ref), len(commits), logical, len(distinct), sum(distinct.values()))


def _logical_size(repo: Versioned, oid: bytes, memo: dict[bytes, int]) -> int:
    """The size of the value ``oid`` holds, stored whole: its payload with each child
    reference replaced by the child's own logical size."""
    known = memo.get(oid)
    if known is not None:
        return known
    data = repo.loader.fetch(oid)
    kind, payload = split_object(ObjectId(oid), data)
    if kind == BLOB:
        size = len(payload)
    else:
        _, node = repo.loader.node(oid)
        refs = children_of(kind, node)
        size = len(payload) - _REF_BYTES * len(refs) + sum(_logical_size(repo, r, memo) for r in refs)
    memo[oid] = size
    return size
