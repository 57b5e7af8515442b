"""``SnapvcSession``: the OpenAI Agents SDK's ``Session`` on a snapvc repository.

The SDK (the ``openai-agents`` extra: ``pip install '.[openai-agents]'`` in a clone) keeps a conversation's history in a
session: ``Runner.run(agent, "hi", session=session)`` reads the items before a turn
(``get_items``) and adds the new ones after it (``add_items``). Here a session is a
branch, and every change of its history is a commit (``docs/openai-agents.md`` shows it
in use):

==========================  ============================================================
the SDK                     snapvc
==========================  ============================================================
session id ``s``            the branch ``openai-agents/<s>`` (``thread_branch("openai-
                            agents", s)``: any text is escaped into a valid name, so
                            ``repo.threads()`` lists it as a namespace of the thread
                            ``openai-agents``)
the items                   the state ``{"items": [item, ...]}``: the items as the SDK
                            handed them over (plain dicts), oldest first
add_items, pop_item,        a commit each, with metadata ``session_id``, ``operation``
clear_session               (``"add_items"``...), ``items`` (how many the session holds
                            after it) and ``added`` or ``removed``; a call that changes
                            nothing (no items, an empty session) commits nothing
fork at an item             a new branch sharing the history up to that item
==========================  ============================================================

So ``snapvc log --graph``, ``snapvc diff`` (items appended show as added list elements),
``repo.history(branch, "items")``, ``snapvc checkout`` and the web view work on the
conversations of the SDK as they are.

Costs. An add builds the new list from the stored one, the way a merge does
(``snapvc.encoding.splice``): it reads the inner nodes of the stored list's tree and its
last leaf, encodes only the new items, and stores the leaf and the spine above it. Adding
to a session of 2,000 items costs the new items, not the history, in this process and in
a fresh one alike; a pop costs the same. ``get_items(limit)`` reads the last ``limit``
items of the stored list, not the whole history; ``get_items()`` reads it all.

Threads and tasks. The SDK's methods are coroutines: each runs its repository work on a
thread (``asyncio.to_thread``), never on the event loop. The operations of one
``SnapvcSession`` run one at a time (a lock), so several tasks may share one; sessions
on one repository, in one process or several, may work at once: a write whose branch
moved meanwhile (another ``SnapvcSession`` of the same id) is built again on the new tip,
so no item another writer added is lost. A change, once started, runs to its end even if
the task awaiting it is cancelled, and the cancellation reaches the task after it (the
change is then done): an item is never half added. ``*_sync`` methods do the same work
for code without an event loop.
"""

from __future__ import annotations

import asyncio
import copy
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from snapvc.agent.threads import SESSION_KEY, escape_id, thread_branch
from snapvc.aio import AsyncRepository
from snapvc.api import Repository
from snapvc.api import open as open_repository
from snapvc.encoding.reader import MapView, SeqView
from snapvc.encoding.splice import SeqEdit, TreeSplicer
from snapvc.errors import (ExtraMissingError, InvalidArgumentError, InvalidRefNameError, PathError, RefConflictError,
                           RepositoryError, UnknownRevisionError)
from snapvc.ids import ObjectId
from snapvc.objects import Commit

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

__all__ = ["SnapvcSession", "BRANCH_PREFIX", "session_branch"]

BRANCH_PREFIX: Final = "openai-agents"
ITEMS: Final = "items"  # the state's one key: the session's items, oldest first

_T = TypeVar("_T")


def session_branch(session_id: str, prefix: str = BRANCH_PREFIX) -> str:
    """The branch of session ``session_id``: ``openai-agents/<session_id>``, with every
    character a branch name may not hold escaped (see ``snapvc.thread_branch``).
    ``InvalidArgumentError`` (naming the id) for an id that is not a non-empty str, or
    that holds a lone surrogate (no UTF-8 form, so no branch name)."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidArgumentError("session_id", f"a session id is a non-empty str, not {session_id!r}")
    if not isinstance(prefix, str) or not prefix:
        raise InvalidArgumentError("prefix", f"a branch prefix is a non-empty str, not {prefix!r}")
    try:
        escape_id(session_id, "session id")
    except InvalidRefNameError as exc:
        raise InvalidArgumentError("session_id", f"session id {session_id!r} cannot name a branch: {exc}") from None
    try:
        return thread_branch(prefix, session_id)
    except InvalidRefNameError as exc:
        raise InvalidArgumentError("prefix", f"branch prefix {prefix!r} cannot name a branch: {exc}") from None


class SnapvcSession:
    """A conversation of the OpenAI Agents SDK, kept on the branch
    ``openai-agents/<session_id>`` of a snapvc repository (see the module notes).

    ``repo`` is a ``Repository``, an ``AsyncRepository`` (its ``sync`` repository is
    used), or a location to open (a path, ``"memory://"``...), which the session then
    owns and ``close()`` closes. ``session_settings`` (``SessionSettings`` or a dict of
    its fields) gives the default ``limit`` of ``get_items``, as the SDK's own sessions
    do. It implements the SDK's ``Session`` protocol::

        session = SnapvcSession("user-42", "agent.snapvc")
        result = await Runner.run(agent, "Hello", session=session)
    """

    def __init__(self, session_id: str, repo: Repository | AsyncRepository | str | os.PathLike[str] = "agent.snapvc",
                 *, session_settings: SessionSettings | Mapping[str, Any] | None = None,
                 prefix: str = BRANCH_PREFIX) -> None:
        try:
            from agents.memory.session_settings import SessionSettings, coerce_session_settings
        except ImportError as exc:  # the extra is not installed
            raise ExtraMissingError("SnapvcSession", "openai-agents", exc.name) from exc

        self.branch = session_branch(session_id, prefix)
        self.session_id = session_id
        self.prefix = prefix
        self.session_settings: SessionSettings | None = (
            coerce_session_settings(dict(session_settings) if isinstance(session_settings, Mapping)
                                    else session_settings)
            if session_settings is not None else SessionSettings())
        if isinstance(repo, AsyncRepository):
            repo = repo.sync
        self._owns_repo = not isinstance(repo, Repository)
        self.repo: Repository = open_repository(repo) if not isinstance(repo, Repository) else repo
        self._ref = self.repo.branch_ref(self.branch)
        self._lock = threading.Lock()  # one operation of this session at a time, whichever thread runs it
        self._closed = False

    def __repr__(self) -> str:
        return f"<SnapvcSession {self.session_id!r} on branch {self.branch!r} of {self.repo.location!r}>"

    # -- the SDK's Session protocol -------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` (default: the session
        settings' limit), the latest ``limit`` of them. A ``limit`` of 0 gives none, a
        negative one all (as the SDK's SQLite session does)."""
        return await asyncio.to_thread(self.get_items_sync, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the session: one commit."""
        items = self._checked(items)  # the caller's list as it is now, whatever it does while we work
        await _run_to_end(asyncio.to_thread(self.add_items_sync, items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (one commit); None if there is none."""
        return await _run_to_end(asyncio.to_thread(self.pop_item_sync))

    async def clear_session(self) -> None:
        """Remove every item (one commit). The history keeps them: ``snapvc log`` shows
        the commits before the clear, and ``fork`` or ``reset`` bring them back."""
        await _run_to_end(asyncio.to_thread(self.clear_session_sync))

    # -- the same, for code without an event loop -----------------------------------------

    def get_items_sync(self, limit: int | None = None) -> list[TResponseInputItem]:
        """``get_items``, blocking."""
        from agents.memory.session_settings import resolve_session_limit

        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidArgumentError("limit", f"session {self.session_id!r}: limit is an int or None, not {limit!r}")
        with self._using():
            tip = self.tip
            if tip is None:
                return []
            items = self._items_of(tip)
            if limit is None or limit < 0:
                return _plain_list(items)
            if limit == 0:
                return []
            n = len(items)
            return [_plain(items[i]) for i in range(max(0, n - limit), n)]

    def add_items_sync(self, items: Sequence[TResponseInputItem]) -> None:
        """``add_items``, blocking."""
        items = self._checked(items)
        if not items:
            self._require_open()
            return
        with self._using():
            def build(old: Sequence[Any], splicer: TreeSplicer) -> tuple[Any, Any]:
                n = len(old)
                new = _edited(old, splicer, (n, n, [splicer.encode(item) for item in items]),
                              lambda: [*_plain_list(old), *items])
                return new, None

            self._change("add_items", build, lambda n: {"added": len(items)},
                         lambda n: f"add_items: {_describe(items)} ({_count(n)})")

    def pop_item_sync(self) -> TResponseInputItem | None:
        """``pop_item``, blocking."""
        with self._using():
            def build(old: Sequence[Any], splicer: TreeSplicer) -> tuple[Any, Any]:
                n = len(old)
                if n == 0:
                    return None, None
                last = _plain(old[-1])
                return _edited(old, splicer, (n - 1, n, []), lambda: _plain_list(old)[:-1]), last

            popped: TResponseInputItem | None = self._change(
                "pop_item", build, lambda n: {"removed": 1}, lambda n: f"pop_item ({_count(n)})")
            return popped

    def clear_session_sync(self) -> None:
        """``clear_session``, blocking."""
        with self._using():
            def build(old: Sequence[Any], splicer: TreeSplicer) -> tuple[Any, Any]:
                return ([] if len(old) else None), None

            self._change("clear_session", build, lambda n: {}, lambda n: "clear_session")

    # -- compaction -------------------------------------------------------------------------

    async def _get_compaction_snapshot(self, limit: int, *,
                                       prune_prefix: Callable[[Any], bool] | None = None) -> Any:
        """The latest ``limit`` items, for the SDK's ``OpenAIResponsesCompactionSession``,
        with a way to replace them by their compacted form in one commit.

        The SDK looks this method up by name on the session it wraps (its own SQLite
        sessions have it); without it, compaction of a long history is refused. The
        replacement (``replace_suffix(start, output)``: the snapshot's items from
        ``start`` on become ``output``) is a commit on the tip the snapshot was read at,
        and is refused (False) if the session changed since; ``prune_prefix`` drops the
        oldest items it accepts first, up to the replaced ones."""
        from agents.memory.session import _CompactionSnapshot

        def read() -> tuple[ObjectId | None, list[Any], bool]:
            with self._using():
                tip = self.tip
                if tip is None:
                    return None, [], True
                items = self._items_of(tip)
                n = len(items)
                return tip, [_plain(items[i]) for i in range(max(0, n - limit), n)], n <= limit

        tip, snapshot, complete = await asyncio.to_thread(read)

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            replaced = len(snapshot) - start
            if tip is None or replaced <= 0:
                return False
            return await _run_to_end(asyncio.to_thread(self._replace_suffix_sync, tip, replaced, list(output),
                                                       prune_prefix))

        return _CompactionSnapshot(snapshot, complete, replace_suffix)

    def _replace_suffix_sync(self, tip: ObjectId, replaced: int, output: list[Any],
                             prune_prefix: Callable[[Any], bool] | None) -> bool:
        with self._using():
            if self.tip != tip:
                return False  # the session changed since the snapshot: its items are not the ones compacted
            items = self._items_of(tip)
            n = len(items)
            pruned = 0
            while prune_prefix is not None and pruned < n - replaced and prune_prefix(_plain(items[pruned])):
                pruned += 1
            splicer = TreeSplicer(self.repo.loader)
            edits: list[SeqEdit] = [(0, pruned, [])] if pruned else []
            edits.append((n - replaced, n, [splicer.encode(item) for item in output]))
            new: Any = None
            if isinstance(items, SeqView):
                new = splicer.seq(items, edits)
            if new is None:
                new = [*_plain_list(items)[pruned:n - replaced], *output]
            metadata = {SESSION_KEY: self.session_id, "operation": "compaction", "items": len(new),
                        "removed": replaced + pruned, "added": len(output)}
            try:
                self.repo.commit({ITEMS: new}, branch=self.branch, metadata=metadata, parents=(tip,),
                                 message=f"compaction: {replaced} items into {len(output)} ({_count(len(new))})",
                                 _objects=splicer.objects)
            except RefConflictError:
                return False  # another writer came first: the SDK keeps the history as it is
            return True

    # -- history ---------------------------------------------------------------------------

    @property
    def tip(self) -> ObjectId | None:
        """The session's latest commit; None before its first item."""
        return self.repo.refs.get(self._ref)

    def fork(self, session_id: str, at: int | str | ObjectId | Commit | None = None) -> SnapvcSession:
        """A new session ``session_id`` (on the same repository, with the same settings)
        whose history is this one's up to ``at``; this session is untouched.

        ``at`` is an item's index in this session's items now (negative ones count from
        the end): the new session holds the items up to and including it, and its branch
        starts at the newest commit of this session's history that held exactly those,
        so ``snapvc log --graph`` shows where the two conversations part (if no commit
        held exactly those — the item came in a batch — the new branch starts at the
        latest commit and its first commit drops the items after ``at``). ``at`` may
        also be a commit (a ``Commit``, an id, or any rev such as ``"openai-agents/s~2"``)
        whose state is a session's; default: this session's latest commit.
        ``RefExistsError`` if ``session_id`` has a branch already."""
        new = SnapvcSession(session_id, self.repo, session_settings=self.session_settings, prefix=self.prefix)
        with self._using():
            tip = self.tip
            if tip is None:
                raise UnknownRevisionError(f"session {self.session_id!r} (branch {self.branch!r}) has no items "
                                           f"to fork from yet")
            if isinstance(at, int) and not isinstance(at, bool):
                start, keep = self._fork_point(tip, at)
            elif at is None or isinstance(at, (str, ObjectId, Commit)):
                start = at.id if isinstance(at, Commit) else self.repo.resolve(at) if at is not None else tip
                self._items_of(start)  # a commit of another kind of branch is no session to fork
                keep = None
            else:
                raise InvalidArgumentError("at", f"session {self.session_id!r}: fork at an item index or a commit, "
                                                 f"not {type(at).__name__}")
            self.repo.branch(new.branch, at=start)
            if keep is not None:  # the items after `at` came in the same commit as it: drop them
                with new._using():
                    def build(old: Sequence[Any], splicer: TreeSplicer) -> tuple[Any, Any]:
                        n = len(old)
                        return _edited(old, splicer, (keep, n, []), lambda: _plain_list(old)[:keep]), None

                    new._change("fork", build, lambda n: {"forked_from": self.session_id, "removed": n - keep},
                                lambda n: f"fork of {self.session_id!r} after item {keep - 1} ({_count(n)})")
        return new

    async def afork(self, session_id: str, at: int | str | ObjectId | Commit | None = None) -> SnapvcSession:
        """``fork``, off the event loop."""
        return await _run_to_end(asyncio.to_thread(self.fork, session_id, at))

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop using the session; the repository is closed too if the session opened it.
        Idempotent; later operations raise ``RepositoryError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._owns_repo:
                self.repo.close()

    async def aclose(self) -> None:
        """``close``, off the event loop."""
        await asyncio.to_thread(self.close)

    # -- internals -------------------------------------------------------------------------

    def _checked(self, items: Sequence[TResponseInputItem]) -> list[TResponseInputItem]:
        """``items`` as a list of its own; anything but a sequence of items is refused
        (a dict or a str would otherwise pass as a sequence of its keys or letters)."""
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise InvalidArgumentError("items", f"session {self.session_id!r}: add_items takes a list of items, "
                                                f"not {type(items).__name__}")
        return list(items)

    def _require_open(self) -> None:
        if self._closed:
            raise RepositoryError(f"session {self.session_id!r} is closed")

    def _using(self) -> _Held:
        return _Held(self)

    def _items_of(self, commit_id: ObjectId) -> Sequence[Any]:
        """The stored items at ``commit_id``, lazily: a ``SeqView`` (or a small list)."""
        state = self.repo.snapshot(commit_id)
        items = state.get(ITEMS) if ITEMS in state else None
        if not isinstance(items, (list, tuple, SeqView)):
            raise PathError(ITEMS, f"commit {commit_id.hex} (session {self.session_id!r}, branch {self.branch!r}) "
                                   f"holds no list of session items under {ITEMS!r}: it is not a session's state")
        return items

    def _fork_point(self, tip: ObjectId, at: int) -> tuple[ObjectId, int | None]:
        """Where a fork after item ``at`` of the items at ``tip`` starts: the newest
        commit along the first parents that held exactly the items up to ``at`` (then
        nothing to drop: None), else ``tip`` and how many items to keep."""
        items = self._items_of(tip)
        n = len(items)
        index = at + n if at < 0 else at
        if not 0 <= index < n:
            raise InvalidArgumentError("at", f"session {self.session_id!r} holds {_count(n)}: it has no item {at}")
        keep = index + 1
        target = _edited(items, TreeSplicer(self.repo.loader), (keep, n, []), lambda: _plain_list(items)[:keep])
        oid: ObjectId | None = tip
        while oid is not None:
            commit = self.repo.get_commit(oid, walking=True)
            if commit.metadata.get("items") == keep and commit.metadata.get(SESSION_KEY) is not None:
                held = self._items_of(commit.id)
                if (held.id == target.id if isinstance(held, SeqView) and isinstance(target, SeqView)
                        else not isinstance(target, SeqView) and _plain_list(held) == target):
                    return commit.id, None
            oid = commit.parent
        return tip, keep

    def _change(self, operation: str, build: Callable[[Sequence[Any], TreeSplicer], tuple[Any, Any]],
                extra: Callable[[int], dict[str, Any]], message: Callable[[int], str]) -> Any:
        """Commit the items ``build(old items, splicer)`` returns (None: nothing to
        commit) on the session's branch, built on its tip; if another writer moves the
        branch meanwhile, build again on the new tip. Returns ``build``'s second value."""
        while True:
            tip = self.tip
            old: Sequence[Any] = self._items_of(tip) if tip is not None else []
            splicer = TreeSplicer(self.repo.loader)
            new, result = build(old, splicer)
            if new is None:
                return result
            n = len(new)
            metadata = {SESSION_KEY: self.session_id, "operation": operation, "items": n, **extra(len(old))}
            try:
                self.repo.commit({ITEMS: new}, branch=self.branch, message=message(n), metadata=metadata,
                                 parents=(tip,) if tip is not None else (), _objects=splicer.objects)
            except RefConflictError:
                # Another writer of this session (another object, another process) got
                # there first: its items stay, ours go on top of them. Every lost race
                # is someone else's commit, so this ends.
                continue
            return result


class _Held:
    """The session's lock, held while it is open."""

    def __init__(self, session: SnapvcSession) -> None:
        self.session = session

    def __enter__(self) -> None:
        self.session._lock.acquire()
        try:
            self.session._require_open()
        except BaseException:
            self.session._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self.session._lock.release()


def _edited(old: Sequence[Any], splicer: TreeSplicer, edit: SeqEdit, whole: Callable[[], list[Any]]) -> Any:
    """``old`` with ``edit`` applied: built from its stored tree when it is a large
    stored list (the cost of the edit), else as a plain list (a small one, cheap whole)."""
    if isinstance(old, SeqView):
        spliced = splicer.seq(old, [edit])
        if spliced is not None:
            return spliced
    return whole()


def _plain(value: Any) -> Any:
    """A stored item as fresh Python objects, the caller's to change."""
    if isinstance(value, MapView):
        return value.to_dict()
    if isinstance(value, SeqView):
        return value.to_list()
    return copy.deepcopy(value)  # an inline value may be the reader's cached object


def _plain_list(items: Sequence[Any]) -> list[Any]:
    if isinstance(items, SeqView):
        return list(items.to_list())
    return [copy.deepcopy(item) for item in items]


def _count(n: int) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _describe(items: Sequence[Any]) -> str:
    """What items are, for a commit message: ``user message, function_call``."""
    kinds = []
    for item in items[:3]:
        kind = item.get("type") if isinstance(item, Mapping) else None
        role = item.get("role") if isinstance(item, Mapping) else None
        if kind in (None, "message") and isinstance(role, str):
            kinds.append(f"{role} message")
        else:
            kinds.append(str(kind) if kind is not None else type(item).__name__)
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return ", ".join(kinds) + more


async def _run_to_end(work: Awaitable[_T]) -> _T:
    """Await ``work`` to its end even if the awaiting task is cancelled meanwhile: the
    change it makes is then known done (or failed) before the cancellation goes on."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: a failure the cancellation hides is not reported as unhandled
        raise cancelled
    return task.result()
