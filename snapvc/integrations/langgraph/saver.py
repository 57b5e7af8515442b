"""``SnapvcSaver``: LangGraph's checkpointer on a snapvc repository.

How LangGraph's records map onto the repository (``docs/langgraph.md`` shows it in use):

=============================  =========================================================
LangGraph                      snapvc
=============================  =========================================================
thread ``t``, namespace ``ns``  the branch ``thread_branch(t, ns)`` (``snapvc.agent.threads``):
                               ``t``, and ``t/<ns>`` for a subgraph's namespace
checkpoint                     a commit on it; its state is the channel values
                               (``{"messages": [...], ...}``), so ``snapvc log``,
                               ``diff`` and ``checkout`` show what the graph held
checkpoint id, ts, channel     commit metadata ``"langgraph"``; LangGraph's own
versions, versions seen        metadata (``source``, ``step``, ``run_id`` …) sits
                               beside it, so ``repo.log(where={"step": 3})`` finds it
parent checkpoint              the commit's parent
a fork (``update_state`` or a  the branch moves to the new line; the line it leaves
put on an earlier checkpoint)  keeps a branch ``<branch>/+fork/<its head's short id>``
pending writes                 the branch ``<branch>/+writes``: ``{"writes": {checkpoint
                               id: its writes}, "latest": the last writes holding a
                               serialized value}``, a write ``[task_id, channel, value,
                               task_path, idx]``; a commit per ``put_writes``
=============================  =========================================================

The latest checkpoint of a thread is its branch's tip: the last one put (``repo.reset``
on the branch moves it, as time travel does in snapvc). Branch names with ``+`` are
never made by ``thread_branch``, so ``repo.threads()`` does not take the fork and
writes branches for threads, and ``repo.delete_thread`` deletes them with the thread.

Channel values are snapvc values (``snapvc.integrations.langgraph.values``). A put
stores what changed since the parent checkpoint, at a cost that follows the change:
the values LangGraph passes are the channels' own objects, so a put on the branch's tip
goes through the branch's working copy (``snapvc.State``), skipping a channel whose
version did not move since the last put and appending to a list only the elements an
add reducer added (``_commit_working``); other puts are plain commits. Channel
versions are integers, or strings on a thread another saver began
(``get_next_version``). Deleting checkpoints (``delete_for_runs``, ``prune``) rewrites
the lines that held them: the checkpoints after a deleted one are committed again on
its parent, with the same state and metadata. ``copy_thread`` makes branches at the
same commits: it copies nothing.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import gc
import operator
import os
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, TypeVar

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import snapvc
from snapvc.encoding.jsonable import SCALAR_TYPES
from snapvc.errors import InvalidArgumentError, RefConflictError, UnsupportedValueError
from snapvc.ids import ObjectId
from snapvc.integrations.langgraph.values import (
    MISSING,
    Reader,
    Watch,
    decode,
    fresh_copies,
    from_stored,
    is_serialized,
    path_steps,
    storable_type,
    stored_elements,
    to_stored,
    wrap,
)
from snapvc.objects import Commit
from snapvc.refs.names import HEADS
from snapvc.api import Repository
from snapvc.repository.core import DEFAULT_BRANCH
from snapvc.agent.state import State
from snapvc.agent.threads import parse_thread_branch, thread_branch

__all__ = ["SnapvcSaver", "KEY", "FORKS", "WRITES"]

KEY: Final = "langgraph"  # the commit metadata holding a checkpoint's own fields
FORKS: Final = "/+fork/"  # <branch>/+fork/<short commit id>: a line the branch left
WRITES: Final = "/+writes"  # <branch>/+writes: the pending writes of the branch's checkpoints
_REWRITE: Final = "/+rewrite"  # a scratch branch while lines are rewritten
_PAST: Final = "writes"  # in the writes branch's state: checkpoint id -> its writes
_LATEST: Final = "latest"  # ... and the last holding a serialized value, again (sorts before "writes")
_MAX_STATES = 16  # working copies kept, of thread branches and of writes branches each
_LIST_BATCH = 64  # checkpoints a listing reads and builds at a time

T = TypeVar("T")


@dataclass
class _Lines:
    """The checkpoints of one branch and its forks, found by walking back from their heads."""

    heads: dict[str, ObjectId]
    by_id: dict[str, Commit] = field(default_factory=dict)


@dataclass
class _Given:
    """What a channel held when it last went into a working copy (or was handed out from it)."""

    value: Any  # the object LangGraph gave (or the saver handed out)
    version: Any  # its channel version then
    elements: tuple[Any, ...] | None = None  # for a list: its elements (an add reducer's next list starts with them)
    watch: Watch | None = None  # for a list: what its elements held, to see a change made in place


@dataclass
class _HandedOut:
    """The values ``get_tuple`` returned for a branch's tip: the next put on that tip
    recognises them (``_commit_working``)."""

    base: ObjectId  # the commit they were read from
    given: dict[str, _Given]


@dataclass
class _Working:
    """A branch's working copy and what each channel held when it last went in."""

    state: State
    given: dict[str, _Given] = field(default_factory=dict)


def _checkpoint_id(commit: Commit) -> str | None:
    section = commit.metadata.get(KEY)
    return section.get("id") if section is not None else None


def _ids(config: RunnableConfig | None, what: str) -> tuple[str, str, str | None]:
    """(thread id, namespace, checkpoint id or None) of a config; a clear error if it has no thread."""
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise InvalidArgumentError("config", f"{what}: config['configurable'] needs a 'thread_id' (got {configurable!r})")
    namespace = configurable.get("checkpoint_ns") or ""
    checkpoint_id = configurable.get("checkpoint_id") or None
    return str(thread_id), str(namespace), checkpoint_id


def _json(value: Any, where: str) -> Any:
    """``value`` as plain JSON (tuples become lists, as other savers store them)."""
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError as exc:
        raise InvalidArgumentError("metadata", f"{where} must be JSON (str, number, bool, None, list, dict): {exc}") from None


class SnapvcSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer that keeps every thread as a snapvc branch.

    ``SnapvcSaver(repo)`` uses an open ``snapvc.Repository``; ``SnapvcSaver("agent.snapvc")``
    or ``SnapvcSaver.from_conn_string("agent.snapvc")`` opens (or creates) one and closes it
    with ``close()`` or at the end of a ``with`` block. ``serde`` serializes only what
    snapvc cannot store itself; it must not fall back to pickle.

    Thread-safe; the async methods run the same code on one worker thread of the saver.
    """

    def __init__(self, repo: Repository | str | os.PathLike[str], *, serde: SerializerProtocol | None = None) -> None:
        serde = serde if serde is not None else JsonPlusSerializer(pickle_fallback=False)
        if getattr(serde, "pickle_fallback", False):
            raise InvalidArgumentError("serde", "SnapvcSaver never pickles: give a serializer with pickle_fallback=False")
        super().__init__(serde=serde)
        self._owns = not isinstance(repo, Repository)
        self.repo: Repository = snapvc.open(repo) if not isinstance(repo, Repository) else repo
        self._lock = threading.RLock()
        self._lines_cache: dict[str, _Lines] = {}
        self._write_states: dict[str, State] = {}
        self._working: dict[str, _Working] = {}
        self._handed: dict[str, _HandedOut] = {}
        self._wrapped: dict[tuple[str, str], type] = {}  # (branch, channel) -> the type last serialized
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def from_conn_string(cls, location: str | os.PathLike[str], *, serde: SerializerProtocol | None = None) -> SnapvcSaver:
        """A saver on the repository at ``location`` (a path, or ``memory://``), opened
        or created now; usable as a context manager that closes it."""
        return cls(location, serde=serde)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker thread and close the repository if this saver opened it."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._owns:
            self.repo.close()

    def __enter__(self) -> SnapvcSaver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> SnapvcSaver:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __repr__(self) -> str:
        return f"<SnapvcSaver on {self.repo.location!r}>"

    # -- reading ------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), else its thread's latest;
        None if there is none."""
        thread_id, namespace, checkpoint_id = _ids(config, "get_tuple")
        branch = thread_branch(thread_id, namespace)
        with self._lock:
            if checkpoint_id is not None:
                commit = self._lines(branch).by_id.get(checkpoint_id)
            else:
                commit = self._latest(branch)
            if commit is None:
                return None
            reader = Reader(self.repo.loader)
            stored: dict[str, Any] = {}
            again = self._unchanged(branch, commit)
            found = self._tuple(reader, thread_id, namespace, commit, self._writes_tree(branch), stored,
                                {channel: given.value for channel, given in again.items()})
            if commit.id == self.repo.refs.get(HEADS + branch):
                self._hand_out(branch, commit, found.checkpoint["channel_values"], stored, again)
            return found

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id, within each thread): of ``config``'s
        thread (and namespace, if it names one; one checkpoint if it names one), or of
        every thread for None; those whose metadata has ``filter``'s values, with ids
        below ``before``'s, at most ``limit``. Values met in several checkpoints are
        read once and shared between them (``values.Reader``).

        Lazy: the checkpoints are found now (from commit metadata alone), then built
        and yielded ``_LIST_BATCH`` at a time, so the first comes after one batch is
        read, not the whole history. A listing yields what the repository held when it
        was made (the writes too)."""
        wanted_thread = wanted_ns = wanted_id = None
        configurable = (config or {}).get("configurable") or {}
        if configurable.get("thread_id") is not None:
            wanted_thread, _, wanted_id = _ids(config, "list")
            wanted_ns = configurable.get("checkpoint_ns")
        before_id = before.get("configurable", {}).get("checkpoint_id") if before else None
        with self._lock:
            found: list[tuple[str, str, str, Commit]] = []
            for thread_id, namespace, branch in self._branches(wanted_thread):
                if wanted_ns is not None and namespace != wanted_ns:
                    continue
                for checkpoint_id, commit in self._lines(branch).by_id.items():
                    if wanted_id is not None and checkpoint_id != wanted_id:
                        continue
                    if before_id is not None and checkpoint_id >= before_id:
                        continue
                    if filter and not _matches(commit, filter):
                        continue
                    found.append((thread_id, namespace, checkpoint_id, commit))
            found.sort(key=lambda f: f[2], reverse=True)
            found.sort(key=lambda f: f[0])
            if limit is not None:
                found = found[: max(limit, 0)]
            trees = {(t, ns): self._writes_tree(thread_branch(t, ns)) for t, ns, _, _ in found}
        return self._listing(found, trees)

    def _listing(self, found: builtins.list[tuple[str, str, str, Commit]],
                 trees: dict[tuple[str, str], ObjectId | None]) -> Iterator[CheckpointTuple]:
        """The tuples of ``found`` (see ``list``), built a batch at a time by one reader."""
        reader = Reader(self.repo.loader)
        for start in range(0, len(found), _LIST_BATCH):
            batch = found[start:start + _LIST_BATCH]
            with self._lock, _no_cycle_collection():  # what is built here holds no cycles: collect after
                reader.prefetch([commit.tree for *_, commit in batch])
                built = [self._tuple(reader, t, ns, commit, trees[(t, ns)]) for t, ns, _, commit in batch]
            yield from built  # not under the lock: the caller may put between two items

    # -- writing ------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Commit ``checkpoint`` on its thread's branch, as a child of the checkpoint
        ``config`` names (a root commit if it names none); returns its config."""
        thread_id, namespace, parent_id = _ids(config, "put")
        branch = thread_branch(thread_id, namespace)
        checkpoint_id = checkpoint["id"]
        where = f"thread {thread_id!r}, checkpoint {checkpoint_id}"
        meta = _json(get_checkpoint_metadata(config, metadata), f"{where}: the metadata")
        if KEY in meta:
            raise InvalidArgumentError("metadata", f"{where}: the metadata key {KEY!r} is where SnapvcSaver keeps the checkpoint's fields")
        meta[KEY] = _json({k: v for k, v in checkpoint.items() if k != "channel_values"}, f"{where}: the checkpoint")
        message = f"{meta.get('source', 'checkpoint')} step {meta.get('step', '?')}"
        with self._lock:
            lines = self._lines(branch)
            if checkpoint_id in lines.by_id:
                raise InvalidArgumentError("checkpoint", f"{where}: a checkpoint with this id is already stored on the thread")
            parent = lines.by_id.get(parent_id) if parent_id is not None else None
            values = self._values_to_store(checkpoint, new_versions, parent)
            self._commit(branch, lines, values, meta, message, parent, where)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace, "checkpoint_id": checkpoint_id}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Keep a task's writes with the checkpoint ``config`` names. A write already kept
        for the same task and index stays as it is; an error, interrupt or resume write
        replaces the one before."""
        thread_id, namespace, checkpoint_id = _ids(config, "put_writes")
        if checkpoint_id is None:
            raise InvalidArgumentError("config", f"put_writes: thread {thread_id!r}: config['configurable'] names no checkpoint_id")
        branch = thread_branch(thread_id, namespace)
        # LangGraph may send a checkpoint's writes before its put has finished (both run
        # in the background): the writes are kept by checkpoint id, whether it is stored yet or not.
        with self._lock:
            for attempt in (1, 2):
                stored = self._stored_writes(branch, checkpoint_id)
                at = {(e[0], e[4]): i for i, e in enumerate(stored)}
                new: list[list[Any]] = []
                replaced: dict[int, list[Any]] = {}
                for i, (channel, value) in enumerate(writes):
                    idx = WRITES_IDX_MAP.get(channel, i)
                    if storable_type(value):
                        kept = to_stored(value)
                    else:
                        kept = self._serialize(value, f"thread {thread_id!r}, checkpoint {checkpoint_id}: the write "
                                                      f"to {channel!r} of task {task_id}")
                    entry = [task_id, channel, kept, task_path, idx]
                    if (task_id, idx) not in at:
                        at[(task_id, idx)] = len(stored) + len(new)
                        new.append(entry)
                    elif idx < 0:  # an error, interrupt or resume replaces the one before
                        i_kept = at[(task_id, idx)]
                        if i_kept < len(stored):
                            replaced[i_kept] = entry
                        else:
                            new[i_kept - len(stored)] = entry
                if not new and not replaced:
                    return
                message = f"writes to {', '.join(sorted({str(e[1]) for e in (*new, *replaced.values())}))}"
                try:
                    self._snapshot_writes(branch, checkpoint_id, stored, new, replaced, thread_id, message)
                    return
                except RefConflictError:
                    if attempt == 2:
                        raise
                    self._write_states.pop(branch, None)  # another writer moved it: read it again

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: its branches (every namespace, fork and writes branch)."""
        root = thread_branch(str(thread_id))
        with self._lock, self.repo.deferred():
            for branch in self._family(root):
                self._delete_branch(branch)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, and their
        writes, on every thread; the checkpoints after them are kept (see the module notes)."""
        runs = set(run_ids)
        if not runs:
            return
        with self._lock:
            for _, _, branch in self._branches(None):
                lines = self._lines(branch)
                doomed = {c.id for c in lines.by_id.values() if c.metadata.get("run_id") in runs}
                if doomed:
                    self._rewrite(branch, lines, _not_in(doomed))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Make thread ``target_thread_id`` hold what ``source_thread_id`` holds: its
        branches at the same commits (nothing is copied). A target that already has
        checkpoints is refused; a source without any copies nothing."""
        source, target = thread_branch(str(source_thread_id)), thread_branch(str(target_thread_id))
        with self._lock:
            branches = self.repo.branches()
            family = self._family(source, branches)
            if self._family(target, branches):
                raise InvalidArgumentError("target_thread_id", f"cannot copy thread {source_thread_id!r} to {target_thread_id!r}: the target "
                                 f"already has checkpoints (delete it first)")
            with self.repo.deferred():
                for branch in family:
                    self.repo.branch(target + branch[len(source):], at=branches[branch])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: each namespace of each thread keeps its latest checkpoint and
        its writes, nothing else; ``"delete"``: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgumentError("strategy", f"prune: strategy must be 'keep_latest' or 'delete', got {strategy!r}")
        with self._lock:
            for thread_id in thread_ids:
                if strategy == "delete":
                    self.delete_thread(thread_id)
                    continue
                for _, _, branch in self._branches(str(thread_id)):
                    latest = self._latest(branch)
                    if latest is not None:
                        self._rewrite(branch, self._lines(branch), _only(latest.id))

    # -- versions -----------------------------------------------------------------------

    def get_next_version(self, current: int | str | None, channel: None = None) -> Any:
        """The channel version after ``current``: 1, 2, 3 … on a thread this saver began.
        A thread another saver wrote (InMemorySaver, SqliteSaver, PostgresSaver) has
        versions ``"<32-digit counter>.<random fraction>"``; it is continued with the
        next such string, as those savers do, so that all the versions of a thread stay
        of one type (LangGraph compares them with ``>``)."""
        if current is None:
            return 1
        if isinstance(current, str):
            counter, dot, _ = current.partition(".")
            if not (dot and counter.isdigit()):
                raise InvalidArgumentError("current", f"get_next_version: {current!r} is not a channel version as "
                                                      f"LangGraph's savers write them (<counter>.<fraction>)")
            return f"{int(counter) + 1:032}.{random.random():016}"
        return current + 1

    # -- async --------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapvc-langgraph")
        # In the calling task's context, so an OpenTelemetry span it is in sees the commit.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: context.run(fn, *args, **kwargs))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await self._run(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self._run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self._run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._run(self.prune, thread_ids, strategy=strategy)

    # -- internals: lines ---------------------------------------------------------------

    def _heads(self, branch: str) -> dict[str, ObjectId]:
        heads = dict(self.repo.refs.list(HEADS + branch + FORKS))
        tip = self.repo.refs.get(HEADS + branch)
        if tip is not None:
            heads[HEADS + branch] = tip
        return heads

    def _lines(self, branch: str) -> _Lines:
        """The checkpoints of ``branch``, walked again only when a head moved."""
        heads = self._heads(branch)
        lines = self._lines_cache.get(branch)
        if lines is not None and lines.heads == heads:
            return lines
        lines = _Lines(heads)
        seen: set[ObjectId] = set()
        stack = list(heads.values())
        while stack:
            oid = stack.pop()
            if oid in seen:
                continue
            seen.add(oid)
            commit = self.repo.get_commit(oid, walking=True)
            checkpoint_id = _checkpoint_id(commit)
            if checkpoint_id is not None:
                lines.by_id.setdefault(checkpoint_id, commit)
            stack.extend(commit.parents)
        self._lines_cache[branch] = lines
        return lines

    def _latest(self, branch: str) -> Commit | None:
        """The newest checkpoint on the branch's first-parent line (its tip, unless
        someone committed on the branch by hand)."""
        oid = self.repo.refs.get(HEADS + branch)
        while oid is not None:
            commit = self.repo.get_commit(oid, walking=True)
            if _checkpoint_id(commit) is not None:
                return commit
            oid = commit.parent
        return None

    def _branches(self, thread_id: str | None) -> builtins.list[tuple[str, str, str]]:
        """(thread id, namespace, branch) of every thread branch, or of one thread's."""
        out = []
        names: Iterable[str] = self.repo.branches()
        if thread_id is not None:
            root = thread_branch(thread_id)
            names = dict.fromkeys(self._family(root, names))
        for branch in sorted(names):
            try:
                tid, namespace = parse_thread_branch(branch)
                if thread_branch(tid, namespace) == branch:
                    out.append((tid, namespace, branch))
            except ValueError:  # InvalidRefNameError and UnicodeDecodeError are ValueErrors
                continue  # not a name thread_branch makes
        return out

    def _family(self, root: str, branches: Iterable[str] | None = None) -> builtins.list[str]:
        """A thread's branches, namespaces, forks and writes included, deepest first."""
        names = self.repo.branches() if branches is None else branches
        return sorted((b for b in names if b == root or b.startswith(root + "/")), reverse=True)

    def _delete_branch(self, branch: str) -> None:
        ref = HEADS + branch
        if self.repo.refs.get_symbolic("HEAD") == ref:  # `snapvc checkout <thread>` put HEAD there
            self.repo.refs.set_symbolic("HEAD", HEADS + DEFAULT_BRANCH)
        self.repo.delete_branch(branch)
        if branch.endswith(WRITES):
            self._write_states.pop(branch.removesuffix(WRITES), None)
        self._working.pop(branch, None)
        self._handed.pop(branch, None)
        self._lines_cache.pop(branch, None)

    # -- internals: writing checkpoints -------------------------------------------------

    def _values_to_store(self, checkpoint: Checkpoint, new_versions: ChannelVersions,
                         parent: Commit | None) -> dict[str, Any]:
        """The state to commit: each channel of ``channel_versions`` with the value
        LangGraph gave (the channels' own objects), else the parent's stored value at the
        same version."""
        given = checkpoint["channel_values"]
        values: dict[str, Any] = {}
        parent_view = None
        parent_versions: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            if channel in new_versions or channel in given:
                if channel in given:
                    values[channel] = given[channel]
                continue
            if parent is None:
                continue
            if parent_view is None:
                parent_view = self.repo.snapshot(parent.id)
                parent_versions = parent.metadata[KEY].get("channel_versions", {})
            if parent_versions.get(channel) == version and channel in parent_view:
                values[channel] = parent_view[channel]
        return values

    def _commit(self, branch: str, lines: _Lines, values: dict[str, Any], meta: dict[str, Any], message: str,
                parent: Commit | None, where: str) -> Commit:
        """Commit a checkpoint as a child of ``parent`` (None: a root) and move the branch
        to it; a line the branch leaves keeps a fork branch (see the module notes)."""
        repo = self.repo
        tip = repo.refs.get(HEADS + branch)
        if tip is None or (parent is not None and parent.id == tip):
            commit = self._commit_values(branch, values, meta, message, where, tip=tip)
            heads = {**lines.heads, HEADS + branch: commit.id}  # only the branch moved
        else:
            with repo.deferred():
                tip_commit = repo.get_commit(tip, walking=True)
                if not self._reaches(parent, tip_commit):  # the line the branch leaves keeps a branch
                    repo.branch(branch + FORKS + tip.short, at=tip, force=True)
                if parent is not None:
                    for ref, head in self._heads(branch).items():
                        if head == parent.id and ref != HEADS + branch:  # the new line continues a fork
                            repo.delete_branch(ref[len(HEADS):])
                    repo.reset(branch, parent.id)
                    commit = self._commit_values(branch, values, meta, message, where)
                else:
                    on_head = repo.refs.get_symbolic("HEAD")
                    self._delete_branch(branch)
                    commit = self._commit_values(branch, values, meta, message, where, parents=())
                    if on_head == HEADS + branch:
                        repo.refs.set_symbolic("HEAD", on_head)
            heads = self._heads(branch)
        lines.heads = heads
        lines.by_id[meta[KEY]["id"]] = commit
        self._lines_cache[branch] = lines
        return commit

    def _reaches(self, commit: Commit | None, ancestor: Commit) -> bool:
        """Whether ``ancestor`` is ``commit`` or on its first-parent line."""
        while commit is not None and commit.generation >= ancestor.generation:
            if commit.id == ancestor.id:
                return True
            commit = self.repo.get_commit(commit.parent, walking=True) if commit.parent is not None else None
        return False

    def _commit_values(self, branch: str, values: dict[str, Any], meta: dict[str, Any], message: str, where: str,
                       parents: tuple[ObjectId, ...] | None = None, tip: Any = MISSING) -> Commit:
        """Commit ``values`` on the branch's tip (``tip``, if the caller read it; or on
        ``parents``); a channel snapvc cannot store goes through the serializer."""
        if parents is None:
            return self._commit_working(branch, values, meta, message, where,
                                        self.repo.refs.get(HEADS + branch) if tip is MISSING else tip)
        self._working.pop(branch, None)  # a fork or a new root: the working copy is reloaded when next needed
        for channel, value in values.items():
            if self._wrapped.get((branch, channel)) is type(value):
                values[channel] = self._serialize(value, f"{where}: channel {channel!r}")
            else:
                values[channel] = to_stored(value)
        while True:
            try:
                return self.repo.commit(values, branch=branch, message=message, metadata=meta, parents=parents)
            except UnsupportedValueError as exc:
                channel = self._unstorable(branch, values, exc, where)
                values[channel] = self._serialize(values[channel], f"{where}: channel {channel!r}")

    def _commit_working(self, branch: str, values: dict[str, Any], meta: dict[str, Any], message: str,
                        where: str, tip: ObjectId | None) -> Commit:
        """Commit ``values`` through the branch's working copy (``snapvc.State``), which
        checks and encodes only the channels that changed, so the cost follows the
        change, not the history.

        LangGraph says what changed: a channel it wrote has a new version. A channel
        holding the same object at the same version as last time is skipped; any other
        is stored again, also when it is the same object (an ``operator.iadd`` reducer, a
        ``Topic`` or a join's barrier change their value in place). A list that starts
        with the elements it held last time, none of them changed in place since (a
        ``values.Watch`` of them says so in C-speed passes), has only the rest appended;
        the working copy holds copies of the stored elements (messages as marked dicts,
        ``values.to_stored``). "Last time" is the last put, or the values ``get_tuple``
        handed out for the working copy's commit (``_hand_out``): each ``invoke``
        begins with a ``get_tuple`` whose fresh objects its first put gets back."""
        versions = meta[KEY].get("channel_versions") or {}
        work = self._working.get(branch)
        if work is None or work.state.base != tip:
            work = _Working(self.repo.state(branch))
        _keep_recent(self._working, branch, work)
        state, given = work.state, work.given
        handed = self._handed.pop(branch, None)
        if handed is not None and handed.base == state.base:  # read from what the working copy holds
            given.update(handed.given)
        try:
            for channel in [k for k in state if k not in values]:
                state.delete((channel,))
                given.pop(channel, None)
            for channel, value in values.items():
                version = versions.get(channel)
                before = given.get(channel)
                if (before is not None and before.value is value and version is not None
                        and before.version == version):
                    continue  # LangGraph did not write the channel since it last went in
                given[channel] = self._put_channel(branch, state, channel, value, version, before, where)
            while True:
                try:
                    checkpoint = state.snapshot(message=message, metadata=meta)
                    return self.repo.get_commit(ObjectId.from_hex(checkpoint.id))
                except UnsupportedValueError as exc:
                    channel = self._unstorable(branch, values, exc, where)
                    state.set((channel,), self._serialize(values[channel], f"{where}: channel {channel!r}"))
                    given[channel] = _Given(values[channel], versions.get(channel))
        except BaseException:
            self._working.pop(branch, None)  # nothing half-made stays in the working copy
            raise

    def _put_channel(self, branch: str, state: State, channel: str, value: Any, version: Any,
                     before: _Given | None, where: str) -> _Given:
        """Put one channel's value in the working copy (see ``_commit_working``)."""
        if self._wrapped.get((branch, channel)) is type(value):
            state.set((channel,), self._serialize(value, f"{where}: channel {channel!r}"))
            return _Given(value, version)
        if type(value) is not list:
            state.set((channel,), to_stored(value))
            return _Given(value, version)
        elements = tuple(value)
        if (before is not None and before.watch is not None and before.elements is not None
                and len(elements) >= len(before.elements) and all(map(operator.is_, before.elements, elements))
                and before.watch.same()):  # grown, and none of the old elements changed in place
            tail = elements[len(before.elements):]
            if before.watch.add(tail):
                state.extend((channel,), stored_elements(tail))  # copies: the working copy holds its own
                return _Given(value, version, elements, before.watch)
        if channel in state:
            state.delete((channel,))
        state.extend((channel,), stored_elements(elements))
        watch = Watch()
        return _Given(value, version, elements, watch if watch.add(elements) else None)

    def _unchanged(self, branch: str, commit: Commit) -> dict[str, _Given]:
        """The list channels of ``commit`` that ``get_tuple`` hands out without reading
        them: those the branch's working copy holds at ``commit`` (the last put, or the
        last hand-out before it), whose elements are all proven unchanged since (their
        ``Watch``), so that they equal what was stored. Each is handed out as fresh
        copies of those elements (``values.fresh_copies``), as if built from the stored
        objects: what a caller or a node changes in place in what it was handed changes
        neither the objects LangGraph put nor another answer. The copies are watched in
        turn, for the next put to recognise them."""
        work = self._working.get(branch)
        if work is None or work.state.base != commit.id:
            return {}
        versions = commit.metadata[KEY].get("channel_versions") or {}
        again: dict[str, _Given] = {}
        for channel, given in work.given.items():
            if (given.elements is None or given.watch is None or given.version is None
                    or versions.get(channel) != given.version or not given.watch.same()):
                continue
            copies = fresh_copies(given.elements)
            if copies is None:
                continue
            watch = Watch()
            again[channel] = _Given(copies, given.version, tuple(copies), watch if watch.add(copies) else None)
        return again

    def _hand_out(self, branch: str, commit: Commit, values: dict[str, Any], stored: dict[str, Any],
                  again: dict[str, _Given]) -> None:
        """Remember the values ``get_tuple`` returned for the branch's tip, ``commit``, so
        that the next put on it recognises the lists it gets back, grown by an add reducer,
        and stores only their new elements. Recorded: a list channel stored as a list (the
        working copy holds it as stored), with what its elements hold (``Watch``: an
        element changed in place before that put is stored again; a list copied from
        the working copy, ``again``, was watched as it was copied), and a scalar channel."""
        versions = commit.metadata[KEY].get("channel_versions") or {}
        given: dict[str, _Given] = {}
        for channel, value in values.items():
            version = versions.get(channel)
            if version is None or stored.get(channel) is not value:  # a serialized value, unwrapped
                continue
            if channel in again and again[channel].value is value:
                if again[channel].watch is not None:
                    given[channel] = again[channel]
            elif type(value) is list:
                watch = Watch()
                if watch.add(value):
                    given[channel] = _Given(value, version, tuple(value), watch)
            elif type(value) in SCALAR_TYPES:
                given[channel] = _Given(value, version)
        _keep_recent(self._handed, branch, _HandedOut(commit.id, given))

    def _unstorable(self, branch: str, values: dict[str, Any], error: UnsupportedValueError, where: str) -> str:
        """The channel an ``UnsupportedValueError`` names, remembered as one to serialize;
        the error again if it names none that the serializer could help with."""
        steps = path_steps(error)
        if not steps or steps[0] not in values or is_serialized(values[steps[0]]):
            raise error
        channel: str = steps[0]
        self._wrapped[(branch, channel)] = type(values[channel])
        return channel

    def _serialize(self, value: Any, where: str) -> dict[str, Any]:
        try:
            return wrap(value, self.serde)
        except Exception as exc:
            raise UnsupportedValueError(where, f"neither snapvc nor LangGraph's serializer (without pickle) can "
                                               f"store a {type(value).__name__}: {exc}") from exc

    # -- internals: writes ----------------------------------------------------------------

    def _writes_state(self, branch: str) -> State:
        state = self._write_states.get(branch)
        if state is None:
            state = self.repo.state(branch + WRITES)
        return _keep_recent(self._write_states, branch, state)

    def _stored_writes(self, branch: str, checkpoint_id: str) -> builtins.list[builtins.list[Any]]:
        """The writes kept for a checkpoint, as committed (not handed out by the working
        copy, which would then watch them at every snapshot)."""
        tree = self._writes_tree(branch)
        if tree is None:
            return []
        found = Reader(self.repo.loader).lookup_path(tree, (_PAST, checkpoint_id))
        writes: builtins.list[builtins.list[Any]] = [] if found is MISSING else found
        return writes

    def _snapshot_writes(self, branch: str, checkpoint_id: str, stored: builtins.list[builtins.list[Any]],
                         new: builtins.list[builtins.list[Any]], replaced: dict[int, builtins.list[Any]], thread_id: str,
                         message: str) -> None:
        """Commit the writes: new ones appended (copies: nothing stays watched), replaced
        ones set. Writes holding a serialized value (a ``Send`` carries the graph's whole
        state) are kept again under ``"latest"``, so that the next such value is stored as
        a delta of this one (``_refill``); other writes leave ``"latest"`` as it is, and
        are encoded once."""
        state = self._writes_state(branch)
        try:
            for i, entry in replaced.items():
                state.set((_PAST, checkpoint_id, i), entry)
            state.extend((_PAST, checkpoint_id), new)
            everything = [replaced.get(i, entry) for i, entry in enumerate(stored)] + new
            if any(_delta_worthy(e[2]) for e in everything):
                _refill(state, (_LATEST,), [list(e) for e in everything])
            while True:
                try:
                    state.snapshot(message=message)
                    return
                except UnsupportedValueError as exc:
                    steps = path_steps(exc)
                    if steps[:2] == (_PAST, checkpoint_id):
                        steps = steps[1:]  # (checkpoint id, i, 2, ...) like (latest, i, 2, ...)
                    elif steps[:1] != (_LATEST,):
                        raise
                    if len(steps) < 3 or steps[2] != 2 or is_serialized(everything[steps[1]][2]):
                        raise
                    i = steps[1]
                    entry = everything[i]
                    wrapped = self._serialize(entry[2], f"thread {thread_id!r}, checkpoint {checkpoint_id}: the write "
                                                        f"to {entry[1]!r} of task {entry[0]}")
                    entry[2] = wrapped
                    state.set((_PAST, checkpoint_id, i, 2), wrapped)
                    _refill(state, (_LATEST,), [list(e) for e in everything])  # now delta-worthy
        except BaseException:
            self._write_states.pop(branch, None)  # nothing half-made stays in the working copy
            raise

    def _writes_tree(self, branch: str) -> ObjectId | None:
        tip = self.repo.refs.get(HEADS + branch + WRITES)
        return None if tip is None else self.repo.get_commit(tip).tree

    # -- internals: rewriting lines -------------------------------------------------------

    def _rewrite(self, branch: str, lines: _Lines, keep: Callable[[Commit], bool]) -> None:
        """Drop the checkpoints ``keep`` refuses from the branch and its forks: a kept one
        whose parent went is committed again on its nearest kept ancestor. The branch
        then points at the newest line (by checkpoint id), the others at fork branches."""
        repo = self.repo
        new_of: dict[ObjectId, ObjectId | None] = {}
        kept: dict[ObjectId, Commit] = {}
        dropped: list[str] = []
        head = repo.refs.get_symbolic("HEAD")
        with repo.deferred():
            for commit in sorted(lines.by_id.values(), key=lambda c: c.generation):
                old_parent = commit.parent
                parent = new_of.get(old_parent, old_parent) if old_parent is not None else None
                if not keep(commit):
                    new_of[commit.id] = parent
                    dropped.append(_checkpoint_id(commit) or "")
                    continue
                again = commit if parent == old_parent else self._recommit(branch, commit, parent)
                new_of[commit.id] = again.id
                kept[again.id] = again
            scratch = HEADS + branch + _REWRITE
            if repo.refs.get(scratch) is not None:
                repo.delete_branch(scratch[len(HEADS):])
            for ref in self._heads(branch):
                self._delete_branch(ref[len(HEADS):])
            with_child = {c.parent for c in kept.values()}
            leaves = sorted((c for c in kept.values() if c.id not in with_child), key=lambda c: _checkpoint_id(c) or "", reverse=True)
            if not leaves:
                if repo.refs.get(HEADS + branch + WRITES) is not None:
                    self._delete_branch(branch + WRITES)
                return
            repo.branch(branch, at=leaves[0].id)
            if head == HEADS + branch:
                repo.refs.set_symbolic("HEAD", head)
            for leaf in leaves[1:]:
                repo.branch(branch + FORKS + leaf.id.short, at=leaf.id)
            writes_tip = repo.refs.get(HEADS + branch + WRITES)
            past = repo.snapshot(writes_tip).get(_PAST, {}) if writes_tip is not None else {}
            gone = [checkpoint_id for checkpoint_id in dropped if checkpoint_id in past]
            if gone:
                state = self._writes_state(branch)
                for checkpoint_id in gone:
                    state.delete((_PAST, checkpoint_id))
                if _LATEST in state:
                    state.delete((_LATEST,))  # they may be one of them
                state.snapshot(message=f"drop the writes of {len(gone)} deleted checkpoint(s)")

    def _recommit(self, branch: str, commit: Commit, parent: ObjectId | None) -> Commit:
        """``commit``'s state and metadata committed again on ``parent`` (None: as a root)."""
        repo = self.repo
        scratch = branch + _REWRITE
        if parent is None:
            if repo.refs.get(HEADS + scratch) is not None:
                repo.delete_branch(scratch)
        else:
            repo.branch(scratch, at=parent, force=True)
        values = dict(repo.snapshot(commit.id).items())
        return repo.commit(values, branch=scratch, message=commit.message, metadata=orjson.loads(commit.metadata_json),
                           author=commit.author, parents=() if parent is None else None)

    # -- internals: reading ---------------------------------------------------------------

    def _tuple(self, reader: Reader, thread_id: str, namespace: str, commit: Commit,
               writes_tree: ObjectId | None, stored: dict[str, Any] | None = None,
               known: dict[str, Any] | None = None) -> CheckpointTuple:
        """The checkpoint tuple of ``commit``; ``stored``, if given, gets the channel
        values as stored (a serialized one not yet unwrapped); the channels of ``known``
        are not read but take the values given there."""
        meta = orjson.loads(commit.metadata_json)
        section = meta.pop(KEY)
        checkpoint_id = section.pop("id")
        serde = self.serde
        root = reader.root(commit.tree, known)
        if stored is not None:
            stored.update(root)
        values = {k: decode(v, serde) for k, v in root.items()}
        checkpoint: Any = {"v": section.pop("v", 1), "id": checkpoint_id, "ts": section.pop("ts", ""),
                           "channel_values": values, **section}
        pending: list[tuple[str, str, Any]] = []
        if writes_tree is not None:
            entries = reader.lookup_path(writes_tree, (_PAST, checkpoint_id))
            if entries is not MISSING:
                entries = sorted(entries, key=lambda e: writes_sort_key(e[3], e[0], e[4]))
                pending = [(e[0], e[1], from_stored(decode(e[2], serde))) for e in entries]
        parent_config: RunnableConfig | None = None
        if commit.parent is not None:
            parent_id = _checkpoint_id(self.repo.get_commit(commit.parent, walking=True))
            if parent_id is not None:
                parent_config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace,
                                                  "checkpoint_id": parent_id}}
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace,
                                                   "checkpoint_id": checkpoint_id}}
        return CheckpointTuple(config, checkpoint, meta, parent_config, pending)


def _refill(state: State, path: tuple[str, ...], values: builtins.list[Any]) -> None:
    """Make the list at ``path`` hold copies of ``values``: the same list, emptied and
    extended, so that a commit meets it where it met it last time (a long bytes value in
    it is then stored as what changed since the one stored there, ``chunker.rechunk``),
    not a new list met after the others."""
    held = state.get(path) if path[0] in state else None
    if type(held) is not list:
        state.set(path, values)
        return
    for i in reversed(range(len(held))):
        state.delete((*path, i))
    state.extend(path, values)


def _delta_worthy(value: Any) -> bool:
    """Whether a write's value is bytes, or serialized to bytes, that the next write's
    may repeat: kept under ``"latest"`` to be stored as a delta of."""
    return type(value) is bytes or is_serialized(value)


def _not_in(ids: set[ObjectId]) -> Callable[[Commit], bool]:
    """What ``_rewrite`` keeps to drop the commits ``ids``."""
    return lambda commit: commit.id not in ids


def _only(oid: ObjectId) -> Callable[[Commit], bool]:
    """What ``_rewrite`` keeps to keep the commit ``oid`` alone."""
    return lambda commit: commit.id == oid


def _keep_recent(cache: dict[str, T], key: str, value: T) -> T:
    """``value`` put last in ``cache`` (the most recently used), the oldest entries
    dropped beyond ``_MAX_STATES``."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > _MAX_STATES:
        del cache[next(iter(cache))]
    return value


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused: building many values (the checkpoints of a
    listing) would otherwise set off full collections that scan every live object, and
    those values hold no reference cycles to collect."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _matches(commit: Commit, filter: dict[str, Any]) -> bool:
    """Whether LangGraph's metadata of ``commit`` has every value of ``filter``."""
    meta = commit.metadata
    return all(key != KEY and key in meta and meta[key] == value for key, value in filter.items())
