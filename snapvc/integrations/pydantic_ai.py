"""``SnapvcConversations``: Pydantic AI's ``ConversationStore`` on a snapvc repository.

Pydantic AI stores a conversation as a log of entries (one message each, linked to the
entry before it) and a record that points at the newest entry (``pydantic_ai.conversation_store``);
its ``ConversationStore`` works out what a save adds, where a rewritten history
branches off and what a fork shares, and a backend implements five primitives. Here
they map onto the repository (``docs/pydantic-ai.md`` shows it in use):

===========================  ==========================================================
Pydantic AI                  snapvc
===========================  ==========================================================
conversation ``c``           the branch ``thread_branch(c)`` (``snapvc.agent.threads``)
a save (``write_record``)    a commit on it, whose state is the whole conversation:
                             ``{"conversation_id", "messages": [one dict per message],
                             "entry_ids": [the entry id of each message], "record":
                             {usage, scope, branches, revision, updated_at, ...}}``
message                      a plain dict (``ModelMessagesTypeAdapter.dump_python``):
                             timestamps stay datetimes, bytes stay bytes, so ``snapvc
                             diff`` shows what changed message by message, part by part
record's ``head_id``         the last of ``entry_ids``
a rewritten history, a       a commit whose messages are the kept ones and the new
``branch`` back in time      ones; its parent is the tip it replaces, so the old line
                             stays in the branch's history (``branches`` name its tips)
``fork``                     a new branch whose first commit's parent is the commit
                             that holds the message forked at
``delete``                   the branch is deleted (compare-and-swap); its commits stay
                             reachable from the reflog until gc expires them, and
                             forks of it keep the commits they start from
===========================  ==========================================================

Every commit's metadata says what it holds: ``pydantic_ai`` (the layout's version),
``conversation_id``, ``messages`` (how many), ``new_from`` (where this commit's new
messages start), ``scope``, ``revision``, ``updated_at``, ``model_name`` (of the newest
response it added, if any) and ``token_usage`` (the conversation's usage so far), so
``repo.log(where={"conversation_id": "c"})`` and ``snapvc log`` find saves without reading
states. A branch whose tip carries no ``pydantic_ai`` metadata is no conversation.

Cost: a save appends to the stored lists, so it stores the new messages (and the few
nodes above them), not the history: O(new messages). The store keeps the state of the
last commit it read or wrote per conversation, so a save after a load or a save reads
nothing again; the first save in a fresh process reads the conversation once.

Concurrency: ``save`` checks the conversation's ``revision`` and the branch moves by
compare-and-swap, so two writers (threads, processes) of one conversation never lose
a save silently: the second gets ``ConversationConflictError`` (a Pydantic AI
``ConversationConflict``, and a ``SnapvcError``). The primitives run the repository's
work in a worker thread, so the event loop is not blocked. One store may be shared by
the tasks and threads of a process.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import decimal
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any, Final

import pydantic
import pydantic_core
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse

import snapvc
from snapvc.agent.threads import thread_branch
from snapvc.errors import CheckpointNotFoundError, RefConflictError, SnapvcError
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.refs.names import branch_ref

__all__ = ["ConversationConflictError", "SnapvcConversations", "messages_to_data", "messages_from_data"]

LAYOUT: Final = 1  # metadata["pydantic_ai"]: the layout of the state above
_RecordAdapter: pydantic.TypeAdapter[ConversationRecord] = pydantic.TypeAdapter(ConversationRecord)
# The record's fields the state holds under "record": the id is the branch's, the head the last entry id.
_IMPLIED: Final = ("conversation_id", "head_id")
_MAX_CACHED_STATES: Final = 32
_MAX_CACHED_ENTRIES: Final = 200_000
# Values a snapvc state holds exactly as they are (``snapvc.encoding.values``).
_NATIVE: Final = (type(None), bool, int, float, str, bytes, _dt.datetime, _dt.date, _dt.time, _dt.timedelta,
                  uuid.UUID, decimal.Decimal)


class ConversationConflictError(ConversationConflict, SnapvcError):
    """A save, fork or delete lost to another writer: the conversation was saved or
    deleted since it was loaded, or one with its id exists already. Load it again and retry."""

    def __init__(self, conversation_id: str, detail: str = "") -> None:
        super().__init__(conversation_id)
        if detail:
            self.args = (f"{self.args[0]} ({detail})",)


def _plain(value: Any) -> Any:
    """``value`` as snapvc stores it: plain data, datetimes and bytes kept; anything
    else a pydantic dump leaves as it is (a set or an object in a tool's return, under
    an ``Any`` field) becomes its JSON form, as Pydantic AI's JSON persistence stores it."""
    t = type(value)
    if t in _NATIVE:
        return value
    if t is dict and all(type(k) is str for k in value):
        return {k: _plain(v) for k, v in value.items()}
    if t is list:
        return [_plain(v) for v in value]
    if t is tuple:
        return tuple(_plain(v) for v in value)
    return _plain(pydantic_core.to_jsonable_python(value, bytes_mode="base64"))


def messages_to_data(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Messages as the plain dicts a conversation's state holds (one per message)."""
    return [_plain(m) for m in ModelMessagesTypeAdapter.dump_python(list(messages), mode="python")]


def messages_from_data(data: Sequence[Any]) -> list[ModelMessage]:
    """The ``ModelMessage``s of dicts ``messages_to_data`` made (or read from a state)."""
    return ModelMessagesTypeAdapter.validate_python(list(data))


class SnapvcConversations(ConversationStore):
    """Pydantic AI conversations kept in a snapvc repository: a branch per conversation,
    a commit per save (see the module notes).

    ``repo`` is a ``snapvc.Repository`` or a location to open (a path, ``memory://``);
    a store that opened its repository closes it in ``close()``. Use it as Pydantic AI's
    ``ConversationStore``::

        store = SnapvcConversations("chats.snapvc")
        conversation = await store.load("c1") or Conversation(conversation_id="c1")
        result = await agent.run("Hello", conversation=conversation)
        await store.save(result)
    """

    def __init__(self, repo: snapvc.Repository | str | os.PathLike[str] = "agent.snapvc") -> None:
        self._owns = not isinstance(repo, snapvc.Repository)
        self.repo: snapvc.Repository = repo if isinstance(repo, snapvc.Repository) else snapvc.open(repo)
        self._lock = threading.RLock()
        # The states last read whole or committed, by commit: a save appends to its
        # tip's, and the repository encodes only what it adds (the same objects as
        # its last commit or checkout are not encoded again).
        self._states: dict[ObjectId, dict[str, Any]] = {}
        # Where each entry seen is: (a commit, its index in that commit's entry_ids).
        # Commits never change, so an entry found once is there for good (unless gc
        # deleted the commit after its conversation was deleted: then it is searched again).
        self._where: dict[str, tuple[ObjectId, int]] = {}

    def close(self) -> None:
        """Close the repository if this store opened it."""
        if self._owns:
            self.repo.close()

    def __enter__(self) -> SnapvcConversations:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the primitives (ConversationStore) ---------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await asyncio.to_thread(self.record_of, conversation_id)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        return await asyncio.to_thread(self._records, scope, limit)

    async def write_record(self, record: ConversationRecord, *, new_entries: Sequence[ConversationEntry] = (),
                           expected_revision: str | None) -> None:
        await asyncio.to_thread(self._write, record, list(new_entries), expected_revision)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await asyncio.to_thread(self._delete, conversation_id, expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return (await asyncio.to_thread(self._history, entry_id, 1))[0]

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        if head_id is None:
            return []
        return await asyncio.to_thread(self._history, head_id, limit)

    # -- reading ------------------------------------------------------------------------

    def branch_of(self, conversation_id: str) -> str:
        """The branch that holds ``conversation_id`` (``InvalidRefNameError`` for an
        id that is not a non-empty str)."""
        return thread_branch(conversation_id)

    def record_of(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's record as its branch's tip holds it; None if it has no
        branch, or its branch holds no conversation."""
        branch = self.branch_of(conversation_id)
        tip = self.repo.refs.get(branch_ref(branch))
        if tip is None:
            return None
        commit = self.repo.get_commit(tip)
        if not _is_conversation(commit, branch):
            return None
        return self._record_at(commit)

    def _record_at(self, commit: Commit) -> ConversationRecord:
        view = self.repo.snapshot(commit.id)
        ids = view["entry_ids"]
        fields = {**view["record"], "conversation_id": view["conversation_id"],
                  "head_id": ids[len(ids) - 1] if len(ids) else None}
        return _RecordAdapter.validate_python(fields)

    def _records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        found: list[tuple[str, Commit]] = []
        for branch, tip in self.repo.branches().items():
            commit = self.repo.get_commit(tip)
            if _is_conversation(commit, branch) and (scope is None or commit.metadata.get("scope") == scope):
                found.append((str(commit.metadata.get("updated_at", "")), commit))
        found.sort(key=lambda pair: _dt.datetime.fromisoformat(pair[0]) if pair[0] else _dt.datetime.min.replace(
            tzinfo=_dt.UTC), reverse=True)
        return [self._record_at(commit) for _, commit in found[:limit]]

    def _history(self, head_id: str, limit: int | None) -> list[ConversationEntry]:
        """The entries from the first up to ``head_id`` (the last ``limit`` of them)."""
        commit_id, index = self._locate(head_id)
        stop = index + 1
        start = 0 if limit is None else max(0, stop - limit)
        with self._lock:
            state: Any = self._states.get(commit_id)
        if state is None:
            # A whole history is read whole (and kept: a save after a load appends to it);
            # the last ``limit`` messages, through the lazy view, read only their leaves.
            state = self._state_at(commit_id) if limit is None else self.repo.snapshot(commit_id)
        ids, data = state["entry_ids"][start:stop], state["messages"][start:stop]
        before = state["entry_ids"][start - 1] if start else None
        messages = messages_from_data(data)
        entries = []
        for entry_id, message in zip(ids, messages):
            entries.append(ConversationEntry(id=entry_id, parent_id=before, message=message))
            before = entry_id
        self._remember(commit_id, start, ids)
        return entries

    def _locate(self, entry_id: str) -> tuple[ObjectId, int]:
        """A commit that holds the entry, and its index there. ``CheckpointNotFoundError``
        (a ``LookupError``, as the ``ConversationStore`` expects) if no conversation's
        history holds it."""
        if not isinstance(entry_id, str):
            raise CheckpointNotFoundError(f"entry id {entry_id!r} is not a str")
        with self._lock:
            known = self._where.get(entry_id)
        if known is not None:
            try:
                self.repo.get_commit(known[0])
                return known
            except SnapvcError:  # gc deleted it since (its conversation was deleted): look again
                with self._lock:
                    self._where.pop(entry_id, None)
        seen: set[ObjectId] = set()
        for tip in self.repo.branches().values():
            oid: ObjectId | None = tip
            while oid is not None and oid not in seen:
                seen.add(oid)
                commit = self.repo.get_commit(oid, walking=True)
                meta = commit.metadata
                if meta.get("pydantic_ai") == LAYOUT and meta.get("messages", 0) > meta.get("new_from", 0):
                    start, stop = int(meta["new_from"]), int(meta["messages"])
                    ids = self.repo.snapshot(oid)["entry_ids"][start:stop]
                    self._remember(oid, start, ids)
                    if entry_id in ids:
                        return oid, start + ids.index(entry_id)
                oid = commit.parent
        raise CheckpointNotFoundError(f"entry {entry_id!r} is in no conversation of {self.repo.location!r}")

    def _remember(self, commit_id: ObjectId, start: int, ids: Sequence[str]) -> None:
        with self._lock:
            if len(self._where) + len(ids) > _MAX_CACHED_ENTRIES:
                self._where.clear()
            for i, entry_id in enumerate(ids):
                self._where[entry_id] = (commit_id, start + i)

    def _state_at(self, commit_id: ObjectId) -> dict[str, Any]:
        """The state of ``commit_id`` as a dict, from the cache or checked out (and kept)."""
        with self._lock:
            state = self._states.get(commit_id)
        if state is None:
            state = self.repo.checkout(commit_id)
            self._keep(commit_id, state)
        return state

    def _keep(self, commit_id: ObjectId, state: dict[str, Any]) -> None:
        with self._lock:
            self._states.pop(commit_id, None)
            self._states[commit_id] = state  # most recent last
            while len(self._states) > _MAX_CACHED_STATES:
                del self._states[next(iter(self._states))]

    # -- writing ------------------------------------------------------------------------

    def _write(self, record: ConversationRecord, new_entries: list[ConversationEntry],
               expected_revision: str | None) -> None:
        conversation_id = record.conversation_id
        branch = self.branch_of(conversation_id)
        ref = branch_ref(branch)
        tip = self.repo.refs.get(ref)
        tip_commit = self.repo.get_commit(tip) if tip is not None else None
        if tip_commit is not None and not _is_conversation(tip_commit, branch):
            raise ConversationConflictError(conversation_id, f"branch {branch!r} exists and holds no conversation")
        current = self._record_at(tip_commit) if tip_commit is not None else None
        if (current.revision if current is not None else None) != expected_revision:
            raise ConversationConflictError(conversation_id, f"branch {branch!r} is at "
                                            f"{tip.short if tip is not None else 'no commit'}")
        # The entry the new ones follow, and where it is: its commit's messages up to it are kept.
        base = new_entries[0].parent_id if new_entries else record.head_id
        for before, entry in zip(new_entries, new_entries[1:]):
            if entry.parent_id != before.id:
                raise ConversationConflictError(conversation_id, f"entry {entry.id!r} does not follow {before.id!r}")
        if new_entries and record.head_id != new_entries[-1].id:
            raise ConversationConflictError(conversation_id, f"the record's head {record.head_id!r} is not "
                                            f"the last new entry {new_entries[-1].id!r}")
        source: ObjectId | None
        if base is None:
            source, keep = None, 0
        elif tip_commit is not None and current is not None and base == current.head_id:
            source, keep = tip_commit.id, int(tip_commit.metadata["messages"])  # the common case: an append
        else:
            try:
                source, index = self._locate(base)
            except CheckpointNotFoundError:
                # A concurrent delete released what a fork points into (ConversationStore.write_record).
                raise ConversationConflictError(conversation_id, f"entry {base!r} is not stored") from None
            keep = index + 1
        if source is not None:
            old = self._state_at(source)
            messages = old["messages"][:keep] if keep < len(old["messages"]) else old["messages"]
            ids = old["entry_ids"][:keep] if keep < len(old["entry_ids"]) else old["entry_ids"]
        else:
            messages, ids = [], []
        added = messages_to_data([entry.message for entry in new_entries])
        record_data = {k: v for k, v in _plain(_RecordAdapter.dump_python(record, mode="python")).items()
                       if k not in _IMPLIED}
        state = {
            "conversation_id": conversation_id,
            "messages": messages + added if added else list(messages),
            "entry_ids": ids + [entry.id for entry in new_entries] if new_entries else list(ids),
            "record": record_data,
        }
        usage = record_data.get("usage")
        meta: dict[str, Any] = {
            "pydantic_ai": LAYOUT,
            "conversation_id": conversation_id,
            "messages": len(state["messages"]),
            "new_from": keep,
            "scope": record.scope,
            "revision": record.revision,
            "updated_at": record.updated_at.isoformat(),
            # What the conversation has used so far (the counts that are not zero).
            "token_usage": {k: v for k, v in pydantic_core.to_jsonable_python(usage or {}).items() if v},
        }
        model = next((m.model_name for m in reversed([e.message for e in new_entries])
                      if isinstance(m, ModelResponse) and m.model_name), None)
        if model is not None:
            meta["model_name"] = model
        message = self._message(conversation_id, record, tip_commit, source, keep, len(new_entries))
        try:
            if tip is None and source is not None:
                # A fork: its first commit follows the commit it forks from, and the
                # branch is made only if no other writer made it first.
                commit = self.repo.commit_tree(state, parents=(source,), message=message, metadata=meta)
                if not self.repo.swap_ref(ref, None, commit.id, f"pydantic-ai: {message}"):
                    raise ConversationConflictError(conversation_id, f"branch {branch!r} was made meanwhile")
            else:
                commit = self.repo.commit(state, branch=branch, message=message, metadata=meta,
                                          parents=(tip,) if tip is not None else ())
        except RefConflictError as e:
            raise ConversationConflictError(conversation_id, str(e)) from e
        self._keep(commit.id, state)
        self._remember(commit.id, keep, [entry.id for entry in new_entries])

    @staticmethod
    def _message(conversation_id: str, record: ConversationRecord, tip: Commit | None, source: ObjectId | None,
                 keep: int, added: int) -> str:
        total = keep + added
        if tip is None and source is not None:
            return f"fork of {record.forked_from!r} at message {keep}: {total} messages"
        if tip is not None and (source != tip.id or keep != tip.metadata.get("messages")):
            return f"{conversation_id}: from message {keep} on, {added} new: {total} messages"
        return f"{conversation_id}: {total} messages (+{added})"

    def _delete(self, conversation_id: str, expected_revision: str) -> None:
        branch = self.branch_of(conversation_id)
        ref = branch_ref(branch)
        tip = self.repo.refs.get(ref)
        commit = self.repo.get_commit(tip) if tip is not None else None
        if commit is None or not _is_conversation(commit, branch) or commit.metadata.get("revision") != expected_revision:
            raise ConversationConflictError(conversation_id, "not stored at that revision")
        if not self.repo.swap_ref(ref, tip, None, f"pydantic-ai: delete conversation {conversation_id!r}"):
            raise ConversationConflictError(conversation_id, f"branch {branch!r} moved meanwhile")


def _is_conversation(commit: Commit, branch: str) -> bool:
    """Whether ``commit``, the tip of ``branch``, is a save of the conversation the branch is for."""
    meta = commit.metadata
    cid = meta.get("conversation_id")
    return meta.get("pydantic_ai") == LAYOUT and isinstance(cid, str) and bool(cid) and thread_branch(cid) == branch
