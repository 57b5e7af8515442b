"""Threads and sessions: the ids agent frameworks give their runs, on branches and metadata.

Agent frameworks name one line of execution a thread (QitOS, LangGraph), a task
(Orbiter), a workflow (Splinter) or a session's task (AWorld). In snapvc that line is a
branch, and its checkpoints are the commits along the branch:

=================================  =====================================================
framework id                       snapvc
=================================  =====================================================
thread_id, task_id (Orbiter),      a thread: the branch ``thread_branch(id)``: the id
workflow_id (Splinter)             itself when it is a valid branch name, else escaped
checkpoint_id                      a commit id (hex, or any unique prefix of 4+)
version                            the commit's generation: 1, 2, 3 … along the thread
namespace (LangGraph's             a branch of its own beside the thread's:
checkpoint_ns, AWorld)             ``<thread>/<namespace>``, and ``metadata["namespace"]``
session_id, task_id (AWorld),      commit metadata, stamped on every checkpoint of a
agent_id, step, status …           ``Thread`` (``session=``, ``metadata=``)
=================================  =====================================================

Escaping: a thread id or namespace keeps ASCII letters, digits, ``-``, ``_`` and ``.``;
every other character (``/`` and ``%`` included) becomes ``%XX`` for each byte of its
UTF-8 form, as in a URL, and so does a ``.`` where a ref name may not have one (at the
start, doubled, at the end, before ``lock`` at the end), and so do a thread id's
leading ``-`` and the ``H`` of a thread id ``HEAD`` (git's branch names). So ``"run-001"`` is the
branch ``run-001``, ``"run 1/a"`` is ``run%201%2Fa``, and namespace ``"child:1"`` of
thread ``t`` is ``t/child%3A1``. ``parse_thread_branch`` reverses it. An id holding a
lone surrogate (not Unicode text, so no UTF-8 and no branch) is refused where it enters
with ``InvalidRefNameError``; a branch whose escapes are not UTF-8 (``x%FF``, made by
hand) is no thread: listings pass over it.

A session groups threads: the session of a thread is the ``session_id`` of its latest
checkpoint. Deleting a thread or a session deletes branches only: their commits stay
reachable from the reflog, and their space comes back when garbage collection expires it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from snapvc.encoding.reader import MapView
from snapvc.errors import CheckpointNotFoundError, InvalidArgumentError, InvalidRefNameError, UnknownRevisionError
from snapvc.ids import ObjectId
from snapvc.objects import Commit, metadata_filter
from snapvc.refs.names import branch_ref
from snapvc.agent.state import Checkpoint, State

if TYPE_CHECKING:
    from snapvc.repository.roles import Versioned

__all__ = ["Session", "Thread", "escape_id", "parse_thread_branch", "thread_branch", "threads_of", "delete_thread"]

SESSION_KEY: Final = "session_id"
NAMESPACE_KEY: Final = "namespace"
_KEEP = re.compile(r"[A-Za-z0-9_.-]")
_ESCAPED = re.compile(r"(?:%[0-9A-F]{2})+")


def escape_id(text: str, what: str) -> str:
    """``text`` escaped as one part of a branch name (see the module notes), for the
    ``what`` an error names; ``InvalidRefNameError`` for an empty or non-str id, or one
    holding a lone surrogate."""
    if not isinstance(text, str) or not text:
        raise InvalidRefNameError(repr(text), f"a {what} is a non-empty str")
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidRefNameError(text, f"a {what} is Unicode text; this one holds a lone surrogate at "
                                    f"position {exc.start}, which has no UTF-8 form") from None
    out = "".join(ch if _KEEP.fullmatch(ch) else "".join(f"%{b:02X}" for b in ch.encode()) for ch in text)
    # The dots a ref name may not hold: leading, doubled, trailing, and ".lock" at the end.
    out = re.sub(r"\.(?=\.)|^\.|\.$|\.(?=lock$)", "%2E", out)
    return out


def _unescape(text: str, branch: str) -> str:
    def decoded(match: re.Match[str]) -> str:
        try:
            return bytes.fromhex(match.group(0).replace("%", "")).decode()
        except UnicodeDecodeError:
            raise InvalidRefNameError(branch, f"{match.group(0)!r} is not UTF-8, so no thread id escapes to it") from None
    return _ESCAPED.sub(decoded, text)


def thread_branch(thread_id: str, namespace: str = "") -> str:
    """The branch that holds the checkpoints of ``thread_id`` in ``namespace`` (see the
    module notes): ``thread_branch("run-001") == "run-001"``."""
    branch = escape_id(thread_id, "thread id")
    # What git refuses as a branch name though every character is one a ref may hold.
    if branch.startswith("-"):
        branch = "%2D" + branch[1:]
    elif branch == "HEAD":
        branch = "%48EAD"
    if namespace:
        branch += "/" + escape_id(namespace, "namespace")
    return branch


def parse_thread_branch(branch: str) -> tuple[str, str]:
    """(thread id, namespace) of a branch: the inverse of ``thread_branch``. A branch
    made by hand with a ``/`` in it reads as thread and namespace alike; one whose
    escapes are not UTF-8 (``x%FF``) raises ``InvalidRefNameError``."""
    thread, _, namespace = branch.partition("/")
    return _unescape(thread, branch), _unescape(namespace, branch)


class Thread:
    """The checkpoints of one thread (a branch), as a checkpoint store: ``save``,
    ``get(version)``, ``latest``, ``list_versions``; ``state()`` gives its working copy.
    Get one with ``repo.thread(thread_id)``.

    Every checkpoint made through the thread (``save``, and ``snapshot`` of its
    ``state()``) carries ``metadata``, its ``session_id`` and its ``namespace``, under a
    snapshot's own metadata. A ``Thread`` holds no state of its own: every question is
    answered from the repository, so several may be used at once.
    """

    def __init__(self, repo: Versioned, thread_id: str, namespace: str = "", *, session: str | None = None,
                 metadata: Mapping[str, Any] | None = None) -> None:
        self.repo = repo
        self.id = thread_id
        self.namespace = namespace
        self.branch = thread_branch(thread_id, namespace)
        if session is not None:
            _check_text(session, "session")
        self.session = session
        defaults = dict(metadata or {})
        if session is not None:
            defaults[SESSION_KEY] = session
        if namespace:
            defaults[NAMESPACE_KEY] = namespace
        self.metadata = defaults

    def __repr__(self) -> str:
        ns = f", namespace={self.namespace!r}" if self.namespace else ""
        return f"<snapvc.Thread {self.id!r}{ns} on branch {self.branch!r}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Thread):
            return NotImplemented
        return self.repo is other.repo and self.branch == other.branch

    def __hash__(self) -> int:
        return hash(self.branch)

    # -- the working copy -------------------------------------------------------------------

    def state(self) -> State:
        """A working copy of the thread's latest checkpoint; its snapshots are the
        thread's next checkpoints (see ``snapvc.State``)."""
        return State(self.repo, self.branch, metadata=self.metadata)

    @property
    def tip(self) -> ObjectId | None:
        """The id of the latest checkpoint's commit; None for a thread with none yet."""
        return self.repo.refs.get(branch_ref(self.branch))

    @property
    def exists(self) -> bool:
        return self.tip is not None

    # -- reading ----------------------------------------------------------------------------

    @property
    def latest(self) -> Checkpoint | None:
        """The latest checkpoint, or None if the thread has none."""
        tip = self.tip
        return None if tip is None else self._checkpoint(self.repo.get_commit(tip))

    def checkpoints(self, limit: int | None = None,
                    where: Mapping[str, Any] | Callable[[Commit], bool] | None = None) -> Iterator[Checkpoint]:
        """The thread's checkpoints, newest first: the branch's first-parent history
        (a merge brings one checkpoint, not the merged branch's). ``where`` keeps those
        whose metadata has the given values, as ``repo.log`` does."""
        match = metadata_filter(where)
        produced = 0
        for commit in self._commits():
            if limit is not None and produced >= limit:
                return
            if match is None or match(commit):
                produced += 1
                yield self._checkpoint(commit)

    def list_versions(self) -> list[int]:
        """The versions of the thread's checkpoints, oldest first: ``[1, 2, 3]``."""
        return [commit.generation for commit in self._commits()][::-1]

    def get(self, version: int | None = None, *, id: str | ObjectId | None = None,
            step: int | None = None) -> Checkpoint:
        """One checkpoint of the thread, by exactly one of ``version``, ``id`` (a commit
        id, hex or a unique prefix) or ``step`` (the latest whose ``metadata["step"]``
        is that, as ``snapvc.Runner`` writes it). ``CheckpointNotFoundError`` if the
        thread has none such."""
        given = [name for name, v in (("version", version), ("id", id), ("step", step)) if v is not None]
        if len(given) != 1:
            raise InvalidArgumentError("version, id, step", f"Thread.get takes exactly one of version, id, step; "
                                                            f"got {', '.join(given) or 'none'}")
        if version is not None:
            for commit in self._commits():
                if commit.generation == version:
                    return self._checkpoint(commit)
                if commit.generation < version:
                    break
            raise CheckpointNotFoundError(f"thread {self.id!r} has no checkpoint version {version} "
                                          f"(its versions: {_span(self.list_versions())})")
        if step is not None:
            for commit in self._commits():
                if commit.metadata.get("step") == step:
                    return self._checkpoint(commit)
            raise CheckpointNotFoundError(f"thread {self.id!r} has no checkpoint of step {step}")
        assert id is not None
        try:
            oid = self.repo.resolve(id if isinstance(id, ObjectId) else str(id))
        except UnknownRevisionError:
            raise CheckpointNotFoundError(f"thread {self.id!r} has no checkpoint {id!s}: no such commit") from None
        target = self.repo.get_commit(oid)
        for commit in self._commits():
            if commit.id == oid:
                return self._checkpoint(commit)
            if commit.generation < target.generation:
                break
        raise CheckpointNotFoundError(f"thread {self.id!r} has no checkpoint {oid.hex}: it is not in the thread's history")

    def versions(self) -> dict[str, int]:
        """How many checkpoints of the thread changed each top-level field of the latest
        (``repo.versions``); empty for a thread without checkpoints."""
        tip = self.tip
        return {} if tip is None else self.repo.versions(tip)

    # -- writing ----------------------------------------------------------------------------

    def save(self, checkpoint: Checkpoint | Mapping[str, Any], *, message: str | None = None,
             metadata: Mapping[str, Any] | None = None, token_usage: Any = None) -> Checkpoint:
        """Make ``checkpoint`` (a ``Checkpoint``, or the values of a state) the thread's
        latest checkpoint, and return it as the thread holds it.

        A checkpoint already in the thread's history is returned as it is (saving twice
        stores nothing twice). Any other — from another thread, another repository, or
        ``Checkpoint.from_dict`` — becomes a new commit on the thread with its values,
        message, token usage and metadata (``message``, ``metadata`` and
        ``token_usage`` given here win); its id and version are then the thread's."""
        if isinstance(checkpoint, Checkpoint):
            if self._holds(checkpoint.id):
                return self.get(id=checkpoint.id)
            values: Mapping[str, Any] = checkpoint.values
            meta = {**checkpoint.metadata}
            if checkpoint.token_usage is not None:
                meta["token_usage"] = checkpoint.token_usage
            message = checkpoint.message if message is None else message
        else:
            values, meta = checkpoint, {}
        if isinstance(values, MapView):
            # Stored values of this repository are referred to, not copied.
            values = dict(values.items()) if values.loader is self.repo.loader else values.to_dict()
        elif type(values) is not dict:
            values = dict(values)
        meta = {**self.metadata, **meta, **(metadata or {})}
        if token_usage is not None:
            meta["token_usage"] = token_usage
        commit = self.repo.commit(values, branch=self.branch, message=message or "", metadata=meta)
        return self._checkpoint(commit)

    def fork(self, thread_id: str, at: Checkpoint | str | ObjectId | None = None, *, namespace: str | None = None,
             session: str | None = None) -> Thread:
        """A new thread ``thread_id`` starting at ``at`` (a checkpoint of any thread, or a
        rev; default: this thread's latest), sharing everything before it; this thread
        is untouched. Its session and metadata are this thread's unless given."""
        start = self._rev(at) if at is not None else self.tip
        if start is None:
            raise CheckpointNotFoundError(f"thread {self.id!r} has no checkpoint to fork from yet")
        other = Thread(self.repo, thread_id, self.namespace if namespace is None else namespace,
                       session=self.session if session is None else session,
                       metadata={k: v for k, v in self.metadata.items() if k not in (SESSION_KEY, NAMESPACE_KEY)})
        self.repo.branch(other.branch, at=start)
        return other

    def reset(self, to: Checkpoint | str | ObjectId) -> Checkpoint:
        """Time travel on the same thread: the thread's latest checkpoint becomes ``to``
        (``repo.reset``); the next one follows it. The checkpoints after it leave the
        thread and stay in the reflog: ``thread.reset(f"{thread.branch}@{{1}}")`` undoes."""
        commit = self.repo.reset(self.branch, self._rev(to))
        return self._checkpoint(commit)

    def delete(self) -> list[str]:
        """Delete the thread: its branch and the branches of its namespaces (the
        namespace's own only, for a thread of a namespace). Returns the deleted branches."""
        if self.namespace:
            if self.tip is None:
                return []
            self.repo.delete_branch(self.branch)
            return [self.branch]
        return delete_thread(self.repo, self.id)

    # -- internals --------------------------------------------------------------------------

    def _commits(self) -> Iterator[Commit]:
        """The first-parent history of the thread, newest first."""
        oid = self.tip
        while oid is not None:
            commit = self.repo.get_commit(oid, walking=True)
            yield commit
            oid = commit.parent

    def _holds(self, checkpoint_id: str) -> bool:
        try:
            self.get(id=checkpoint_id)
        except CheckpointNotFoundError:
            return False
        return True

    def _rev(self, target: Checkpoint | str | ObjectId) -> ObjectId:
        if isinstance(target, Checkpoint):
            return self.repo.resolve(ObjectId.from_hex(target.id))
        return self.repo.resolve(target)

    def _checkpoint(self, commit: Commit) -> Checkpoint:
        return Checkpoint.from_commit(self.repo, commit, self.branch)


class Session:
    """The threads whose latest checkpoint carries ``metadata["session_id"] == id``, and
    their checkpoints. Get one with ``repo.session(session_id)``."""

    def __init__(self, repo: Versioned, session_id: str) -> None:
        _check_text(session_id, "session_id")
        self.repo = repo
        self.id = session_id

    def __repr__(self) -> str:
        return f"<snapvc.Session {self.id!r}>"

    def threads(self) -> list[Thread]:
        """The session's threads (every namespace), by branch name."""
        return threads_of(self.repo, session=self.id)

    def checkpoints(self, limit: int | None = None) -> list[Checkpoint]:
        """Every checkpoint of the session's threads that carries its id, newest first;
        one reachable from several threads is listed once, with the first thread's branch."""
        seen: set[str] = set()
        found: list[Checkpoint] = []
        for thread in self.threads():
            for cp in thread.checkpoints(where={SESSION_KEY: self.id}):
                if cp.id not in seen:
                    seen.add(cp.id)
                    found.append(cp)
        found.sort(key=lambda cp: (cp.created_at, cp.version), reverse=True)
        return found[:limit] if limit is not None else found

    @property
    def latest(self) -> Checkpoint | None:
        """The newest latest-checkpoint among the session's threads; None if it has none."""
        latest = [cp for thread in self.threads() if (cp := thread.latest) is not None]
        return max(latest, key=lambda cp: (cp.created_at, cp.version), default=None)

    def delete(self) -> list[str]:
        """Delete every thread of the session (all their namespaces); returns the
        deleted branches."""
        deleted: list[str] = []
        for thread in self.threads():
            if thread.branch not in deleted:
                deleted += [b for b in thread.delete() if b not in deleted]
        return deleted


def _check_text(value: object, argument: str) -> None:
    """Refuse a session id that is no str, or holds a lone surrogate (no commit's
    metadata can hold it)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(argument, f"a {argument} is a str, got {type(value).__name__}: {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(argument, f"{argument} {value!r} is no Unicode text: it holds a lone surrogate at "
                                             f"position {exc.start}") from None


def _span(versions: list[int]) -> str:
    if not versions:
        return "none"
    return f"{versions[0]}..{versions[-1]}" if len(versions) > 2 else ", ".join(map(str, versions))


def threads_of(repo: Versioned, session: str | None = None) -> list[Thread]:
    """Every branch of ``repo`` as a thread (``parse_thread_branch``), by branch name;
    with ``session``, only those whose latest checkpoint has that ``session_id``."""
    out = []
    for branch, tip in sorted(repo.branches().items()):
        found = None
        if session is not None:
            found = repo.get_commit(tip).metadata.get(SESSION_KEY)
            if found != session:
                continue
        try:
            thread_id, namespace = parse_thread_branch(branch)
        except InvalidRefNameError:
            continue  # escapes no id makes (x%FF): no thread, and no reason to fail the listing
        thread = Thread(repo, thread_id, namespace, session=found)
        if thread.branch == branch:  # a branch thread_branch would not make is no thread
            out.append(thread)
    return out


def delete_thread(repo: Versioned, thread_id: str) -> list[str]:
    """Delete the branches of a thread, every namespace of it; returns them (empty if
    it has none). The commits stay reachable from the reflog until gc expires them."""
    root = thread_branch(thread_id)
    doomed = [b for b in repo.branches() if b == root or b.startswith(root + "/")]
    for branch in sorted(doomed, reverse=True):
        repo.delete_branch(branch)
    return sorted(doomed)
