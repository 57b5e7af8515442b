"""The async API: a repository, its working copies, threads and sessions as coroutines.

    import snapvc.aio

    async with await snapvc.aio.open("agent.snapvc") as repo:
        await repo.commit({"messages": []}, branch="main", message="start")
        state = await repo.state("main")        # a working copy, loaded off the loop
        state.append("messages", {"role": "user", "content": "hi"})   # in memory: plain
        checkpoint = await state.snapshot(message="step 1")

        thread = repo.thread("run-001", session="s-1")
        await thread.save({"step": 1})
        latest = await thread.latest()

Threading model
---------------
An ``AsyncRepository`` owns one worker thread, and every operation that reads or writes
the repository runs there (``loop.run_in_executor``), one after another in the order
they were awaited. The event loop never waits for storage, and the wrapped
``Repository`` (``repo.sync``) is only used by that worker, however many tasks share
the ``AsyncRepository``. Tasks may commit at once: to their own branches, or to one
branch with ``parents=`` and a retry on ``RefConflictError``, as writers of a
``Repository`` do.

An await that is cancelled cancels its operation if the worker has not started it;
once started, the operation runs to its end (its result is dropped).

Working copies
--------------
``AsyncState`` wraps a ``State``: what works in memory (``get``, ``set``, ``append``,
``state[key]``, ``in``, ``len`` …) stays a plain call, what reads or writes the
repository (``snapshot``, ``restore``, ``reset``, ``fork`` …) is a coroutine. A working
copy belongs to one task at a time, as a ``State`` belongs to one thread: while its
``snapshot`` is in flight the worker reads its values, so no other task may change
them (nor the values ``get`` handed out) until the snapshot returns.

Lazy views (``await repo.snapshot()``, a ``Checkpoint``'s ``values``) read what a key
needs when it is looked up, in the caller's thread: the repository is thread-safe, so
that is correct, and each such read is small; for a whole state, ``await
repo.checkout(rev)`` reads it on the worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from snapvc.diff.changes import Change
from snapvc.encoding.reader import MapView
from snapvc.errors import RepositoryError
from snapvc.repository.history import HistoryEntry
from snapvc.ids import ObjectId
from snapvc.diff.merge import MergeResult, Resolve
from snapvc.objects import Commit
from snapvc.refs.base import ReflogEntry
from snapvc.api import Repository
from snapvc.api import open as open_sync
from snapvc.maintenance.stats import RepoStats
from snapvc.agent.state import Checkpoint, State
from snapvc.encoding.paths import StatePath
from snapvc.agent.threads import Session, Thread

__all__ = ["AsyncRepository", "AsyncSession", "AsyncState", "AsyncThread", "open"]

_T = TypeVar("_T")


async def open(location: str | os.PathLike[str] = "agent.snapvc", **kwargs: Any) -> AsyncRepository:
    """Open (or create) a repository, off the event loop, as ``snapvc.open`` does with
    the same arguments; ``async with`` the result (or ``await repo.close()``)."""
    return AsyncRepository(await asyncio.to_thread(functools.partial(open_sync, location, **kwargs)))


class AsyncRepository:
    """A ``Repository`` (``sync``) whose operations are coroutines run on a worker
    thread of its own (see the module notes). Closing it closes the repository."""

    def __init__(self, repo: Repository) -> None:
        self.sync = repo
        self.location = repo.location
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapvc-aio")
        self._closed = False
        self._closing: asyncio.Future[None] | None = None

    async def _run(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` on the worker thread, after the operations before it."""
        self._require_open()
        loop = asyncio.get_running_loop()
        # In the awaiting task's context (as asyncio.to_thread does), so what the task set
        # in context variables holds there too: an OpenTelemetry span it is in, say.
        context = contextvars.copy_context()
        return await loop.run_in_executor(self._worker, functools.partial(context.run, fn, *args, **kwargs))

    def _require_open(self) -> None:
        if self._closed:
            raise RepositoryError(f"{self.location!r} is closed; open it again with snapvc.aio.open()")

    # -- lifecycle ----------------------------------------------------------------------

    async def close(self) -> None:
        """Close the repository once the operations already awaited are done, and stop
        the worker thread. Idempotent; later operations raise ``RepositoryError``."""
        if self._closing is None:
            self._closed = True  # from now on, nothing more is handed to the worker
            self._closing = asyncio.ensure_future(self._shut_down())
        await asyncio.shield(self._closing)

    async def _shut_down(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._worker, self.sync.close)
        finally:
            await asyncio.to_thread(self._worker.shutdown, wait=True)

    async def __aenter__(self) -> AsyncRepository:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<snapvc.aio.AsyncRepository {self.location!r}>"

    # -- writing ------------------------------------------------------------------------

    async def commit(self, state: Mapping[str, Any], branch: str | None = None, message: str = "",
                     metadata: dict[str, Any] | None = None, *, author: str | None = None,
                     parents: tuple[str | ObjectId, ...] | None = None) -> Commit:
        """``Repository.commit``. ``state`` is read on the worker: do not change it until
        the commit returns."""
        return await self._run(self.sync.commit, state, branch, message, metadata, author=author, parents=parents)

    async def branch(self, name: str, at: str | ObjectId = "HEAD", *, force: bool = False) -> Commit:
        return await self._run(self.sync.branch, name, at, force=force)

    async def branches(self) -> dict[str, ObjectId]:
        return await self._run(self.sync.branches)

    async def delete_branch(self, name: str) -> ObjectId:
        return await self._run(self.sync.delete_branch, name)

    async def tag(self, name: str, at: str | ObjectId = "HEAD", *, force: bool = False) -> Commit:
        return await self._run(self.sync.tag, name, at, force=force)

    async def tags(self) -> dict[str, ObjectId]:
        return await self._run(self.sync.tags)

    async def delete_tag(self, name: str) -> ObjectId:
        return await self._run(self.sync.delete_tag, name)

    async def reset(self, branch: str, to: str | ObjectId) -> Commit:
        return await self._run(self.sync.reset, branch, to)

    async def switch(self, branch: str) -> None:
        await self._run(self.sync.switch, branch)

    async def reflog(self, ref: str = "HEAD", limit: int | None = None) -> list[ReflogEntry]:
        return await self._run(self.sync.reflog, ref, limit)

    # -- reading ------------------------------------------------------------------------

    async def resolve(self, rev: str | ObjectId = "HEAD") -> ObjectId:
        return await self._run(self.sync.resolve, rev)

    async def get_commit(self, oid: ObjectId, *, rev: str | None = None, walking: bool = False) -> Commit:
        return await self._run(self.sync.get_commit, oid, rev=rev, walking=walking)

    async def checkout(self, rev: str | ObjectId = "HEAD") -> dict[str, Any]:
        return await self._run(self.sync.checkout, rev)

    async def snapshot(self, rev: str | ObjectId = "HEAD") -> MapView:
        """``Repository.snapshot``: a lazy view (see the module notes)."""
        return await self._run(self.sync.snapshot, rev)

    async def log(self, rev: str | ObjectId | Sequence[str | ObjectId] = "HEAD", limit: int | None = None,
                  where: Mapping[str, Any] | Callable[[Commit], bool] | None = None, *,
                  since: datetime | float | None = None, until: datetime | float | None = None,
                  paths: StatePath | Iterable[StatePath] | None = None) -> list[Commit]:
        """``Repository.log`` as a list (read whole on the worker; ``limit`` bounds it).
        A ``where`` callable runs on the worker thread."""
        return await self._run(_listed, self.sync.log, rev, limit, where, since=since, until=until, paths=paths)

    async def history(self, rev: str | ObjectId | Sequence[str | ObjectId], path: StatePath, *,
                      limit: int | None = None, oldest_first: bool = False) -> list[HistoryEntry]:
        """``Repository.history`` as a list."""
        return await self._run(_listed, self.sync.history, rev, path, limit=limit, oldest_first=oldest_first)

    async def versions(self, rev: str | ObjectId = "HEAD") -> dict[str, int]:
        return await self._run(self.sync.versions, rev)

    async def checkpoint(self, rev: str | ObjectId = "HEAD") -> Checkpoint:
        return await self._run(self.sync.checkpoint, rev)

    async def diff(self, a: str | ObjectId | Mapping[str, Any], b: str | ObjectId | Mapping[str, Any],
                   paths: StatePath | Iterable[StatePath] | None = None) -> list[Change]:
        return await self._run(self.sync.diff, a, b, paths)

    async def stats(self) -> RepoStats:
        return await self._run(self.sync.stats)

    # -- merging ------------------------------------------------------------------------

    async def merge_base(self, a: str | ObjectId, b: str | ObjectId) -> ObjectId | None:
        return await self._run(self.sync.merge_base, a, b)

    async def merge(self, source: str | ObjectId, into: str | None = None, message: str | None = None,
                    resolve: Resolve = None, *, metadata: dict[str, Any] | None = None, author: str | None = None,
                    no_ff: bool = False) -> MergeResult:
        """``Repository.merge``; a ``resolve`` callable runs on the worker thread."""
        return await self._run(self.sync.merge, source, into, message, resolve, metadata=metadata, author=author,
                               no_ff=no_ff)

    async def revert(self, commit: str | ObjectId, branch: str | None = None, message: str | None = None,
                     resolve: Resolve = None, *, mainline: int = 1) -> MergeResult:
        return await self._run(self.sync.revert, commit, branch, message, resolve, mainline=mainline)

    async def cherry_pick(self, commit: str | ObjectId, onto: str | None = None, message: str | None = None,
                          resolve: Resolve = None, *, mainline: int = 1) -> MergeResult:
        return await self._run(self.sync.cherry_pick, commit, onto, message, resolve, mainline=mainline)

    # -- working copies, threads and sessions -------------------------------------------

    async def state(self, branch: str | None = None) -> AsyncState:
        """A working copy of ``branch`` (default: HEAD's branch), loaded on the worker."""
        return AsyncState(self, await self._run(_loaded, self.sync.state, branch))

    def thread(self, thread_id: str, namespace: str = "", *, session: str | None = None,
               metadata: Mapping[str, Any] | None = None) -> AsyncThread:
        """The checkpoints of a thread (``Repository.thread``); nothing is read yet."""
        self._require_open()
        return AsyncThread(self, self.sync.thread(thread_id, namespace, session=session, metadata=metadata))

    async def threads(self, session: str | None = None) -> list[AsyncThread]:
        return [AsyncThread(self, t) for t in await self._run(self.sync.threads, session)]

    def session(self, session_id: str) -> AsyncSession:
        """The threads and checkpoints of one session; nothing is read yet."""
        self._require_open()
        return AsyncSession(self, self.sync.session(session_id))

    async def delete_thread(self, thread_id: str) -> list[str]:
        return await self._run(self.sync.delete_thread, thread_id)


class AsyncState(MutableMapping[str, Any]):
    """A working copy (``sync``, a ``State``) of an ``AsyncRepository``: in-memory
    operations are plain calls, those that use the repository are coroutines. One task
    at a time (see the module notes). Get one with ``await repo.state(branch)``."""

    def __init__(self, repo: AsyncRepository, state: State) -> None:
        self.repo = repo
        self.sync = state

    def __repr__(self) -> str:
        return f"<snapvc.aio.AsyncState {self.branch!r} at {self.base.short if self.base else 'no commit yet'}>"

    # -- in memory ----------------------------------------------------------------------

    @property
    def branch(self) -> str:
        return self.sync.branch

    @property
    def metadata(self) -> dict[str, Any]:
        return self.sync.metadata

    @property
    def base(self) -> ObjectId | None:
        return self.sync.base

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint of ``base`` (read when the working copy was loaded or last moved)."""
        return self.sync.checkpoint

    def get(self, path: StatePath, default: Any = None) -> Any:
        return self.sync.get(path, default)

    def set(self, path: StatePath, value: Any) -> None:
        self.sync.set(path, value)

    def delete(self, path: StatePath) -> None:
        self.sync.delete(path)

    def update(self, other: Mapping[StatePath, Any] | Iterable[tuple[StatePath, Any]] = (), /,  # type: ignore[override]
               **kwargs: Any) -> None:
        self.sync.update(other, **kwargs)

    def append(self, path: StatePath, value: Any) -> None:
        self.sync.append(path, value)

    def extend(self, path: StatePath, values: Iterable[Any]) -> None:
        self.sync.extend(path, values)

    def __getitem__(self, key: str) -> Any:
        return self.sync[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.sync[key] = value

    def __delitem__(self, key: str) -> None:
        del self.sync[key]

    def __contains__(self, key: object) -> bool:
        return key in self.sync

    def __iter__(self) -> Iterator[str]:
        return iter(self.sync)

    def __len__(self) -> int:
        return len(self.sync)

    def rollback_on_error(self) -> _AsyncRollback:
        """``State.rollback_on_error`` for ``async with`` (or ``with``): if the block
        raises, the working copy returns to what it was when the block began."""
        return _AsyncRollback(self)

    # -- using the repository -----------------------------------------------------------

    async def snapshot(self, message: str | None = None, metadata: dict[str, Any] | None = None,
                       token_usage: Any = None) -> Checkpoint:
        return await self.repo._run(self.sync.snapshot, message, metadata, token_usage)

    async def restore(self, target: Checkpoint | Commit | ObjectId | str | Mapping[str, Any]) -> None:
        await self.repo._run(self.sync.restore, target)

    async def reset(self, to: Checkpoint | Commit | ObjectId | str) -> Checkpoint:
        return await self.repo._run(self.sync.reset, to)

    async def fork(self, name: str, at: Checkpoint | Commit | ObjectId | str | None = None) -> AsyncState:
        return AsyncState(self.repo, await self.repo._run(_loaded, self.sync.fork, name, at))

    async def versions(self) -> dict[str, int]:
        return await self.repo._run(self.sync.versions)

    async def history(self, path: StatePath, *, limit: int | None = None,
                      oldest_first: bool = False) -> list[HistoryEntry]:
        return await self.repo._run(self.sync.history, path, limit=limit, oldest_first=oldest_first)

    async def diff(self,
                   other: AsyncState | State | Checkpoint | Commit | ObjectId | str | Mapping[str, Any] | None = None,
                   paths: StatePath | Iterable[StatePath] | None = None) -> list[Change]:
        if isinstance(other, AsyncState):
            other = other.sync
        return await self.repo._run(self.sync.diff, other, paths)

    async def checkpoints(self, limit: int | None = None) -> list[Checkpoint]:
        return await self.repo._run(_listed, self.sync.checkpoints, limit)


class _AsyncRollback:
    """What ``AsyncState.rollback_on_error`` returns: the ``State``'s own block, entered
    as the ``AsyncState`` (so that the block's snapshots stay on the worker)."""

    def __init__(self, state: AsyncState) -> None:
        self._state = state
        self._block = state.sync.rollback_on_error()

    def __enter__(self) -> AsyncState:
        self._block.__enter__()
        return self._state

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._block.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> AsyncState:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(exc_type, exc, tb)


class AsyncThread:
    """The checkpoints of one thread (``sync``, a ``Thread``) as coroutines. Get one
    with ``repo.thread(thread_id)``."""

    def __init__(self, repo: AsyncRepository, thread: Thread) -> None:
        self.repo = repo
        self.sync = thread
        self.id = thread.id
        self.namespace = thread.namespace
        self.branch = thread.branch
        self.session = thread.session
        self.metadata = thread.metadata

    def __repr__(self) -> str:
        ns = f", namespace={self.namespace!r}" if self.namespace else ""
        return f"<snapvc.aio.AsyncThread {self.id!r}{ns} on branch {self.branch!r}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AsyncThread):
            return NotImplemented
        return self.sync == other.sync

    def __hash__(self) -> int:
        return hash(self.sync)

    async def state(self) -> AsyncState:
        """A working copy of the thread's latest checkpoint (``Thread.state``)."""
        return AsyncState(self.repo, await self.repo._run(_loaded, self.sync.state))

    async def latest(self) -> Checkpoint | None:
        """The latest checkpoint, or None if the thread has none (``Thread.latest``)."""
        return await self.repo._run(getattr, self.sync, "latest")

    async def checkpoints(self, limit: int | None = None,
                          where: Mapping[str, Any] | Callable[[Commit], bool] | None = None) -> list[Checkpoint]:
        return await self.repo._run(_listed, self.sync.checkpoints, limit, where)

    async def list_versions(self) -> list[int]:
        return await self.repo._run(self.sync.list_versions)

    async def get(self, version: int | None = None, *, id: str | ObjectId | None = None,
                  step: int | None = None) -> Checkpoint:
        return await self.repo._run(self.sync.get, version, id=id, step=step)

    async def versions(self) -> dict[str, int]:
        return await self.repo._run(self.sync.versions)

    async def save(self, checkpoint: Checkpoint | Mapping[str, Any], *, message: str | None = None,
                   metadata: Mapping[str, Any] | None = None, token_usage: Any = None) -> Checkpoint:
        return await self.repo._run(self.sync.save, checkpoint, message=message, metadata=metadata,
                                    token_usage=token_usage)

    async def fork(self, thread_id: str, at: Checkpoint | str | ObjectId | None = None, *,
                   namespace: str | None = None, session: str | None = None) -> AsyncThread:
        forked = await self.repo._run(self.sync.fork, thread_id, at, namespace=namespace, session=session)
        return AsyncThread(self.repo, forked)

    async def reset(self, to: Checkpoint | str | ObjectId) -> Checkpoint:
        return await self.repo._run(self.sync.reset, to)

    async def delete(self) -> list[str]:
        return await self.repo._run(self.sync.delete)


class AsyncSession:
    """The threads and checkpoints of one session (``sync``, a ``Session``) as
    coroutines. Get one with ``repo.session(session_id)``."""

    def __init__(self, repo: AsyncRepository, session: Session) -> None:
        self.repo = repo
        self.sync = session
        self.id = session.id

    def __repr__(self) -> str:
        return f"<snapvc.aio.AsyncSession {self.id!r}>"

    async def threads(self) -> list[AsyncThread]:
        return [AsyncThread(self.repo, t) for t in await self.repo._run(self.sync.threads)]

    async def checkpoints(self, limit: int | None = None) -> list[Checkpoint]:
        return await self.repo._run(self.sync.checkpoints, limit)

    async def latest(self) -> Checkpoint | None:
        """The newest latest-checkpoint among the session's threads (``Session.latest``)."""
        return await self.repo._run(getattr, self.sync, "latest")

    async def delete(self) -> list[str]:
        return await self.repo._run(self.sync.delete)


def _listed(fn: Callable[..., Iterable[_T]], /, *args: Any, **kwargs: Any) -> list[_T]:
    """``fn``'s results as a list, read whole where ``fn`` runs (on the worker)."""
    return list(fn(*args, **kwargs))


def _loaded(fn: Callable[..., State], /, *args: Any) -> State:
    """The working copy ``fn`` makes, with the checkpoint of its base read too (on the
    worker), so that ``AsyncState.checkpoint`` needs no read on the event loop."""
    state = fn(*args)
    state.checkpoint  # noqa: B018 - reads and keeps it
    return state
