"""``SnapvcSessionService``: a ``SessionService`` of Google's Agent Development Kit on a
snapvc repository (the ``adk`` extra; ``docs/adk.md`` shows it in use).

How ADK's records map onto the repository:

==============================  =======================================================
ADK                             snapvc
==============================  =======================================================
session ``s`` of user ``u`` in  the branch ``adk/<app>/<u>/<s>`` (each id escaped as
app ``app``                     ``snapvc.thread_branch`` escapes a thread id); its state
                                is ``{"state": {key: value}, "events": [event, ...]}``
an appended event               a commit on it: the event (as ADK's own JSON form of an
                                ``Event``) appended to ``events``, its session-scoped
                                state delta set under ``state``, so ``snapvc diff``
                                shows the keys that changed
``app:`` state of an app        the branch ``adk/<app>/+app``: ``{key: value}``, a
                                commit per change
``user:`` state of a user       the branch ``adk/<app>/<u>/+user``, the same way
``temp:`` state                 never stored (ADK's own rule)
last_update_time, ids           commit metadata ``"adk"``: ``{"app", "user",
                                "session", "time"}``
==============================  =======================================================

A ``+`` never appears in an escaped id, so ``+app`` and ``+user`` name no session.
Sessions come back with the app and user state merged in under their prefixes, as
ADK's services return them. A session handed out remembers the commit it was read at:
appending an event to a copy that another writer has overtaken since raises
``StaleSessionError`` (as ``StaleSessionServiceError``), as ADK's database services do.

An append costs the event, not the session: the service keeps working copies
(``snapvc.State``) of the sessions it wrote last, so a commit encodes the new event and
the changed keys only. Listing reads the branch names in one query; ``list_sessions``
(every session, ordered by last update as ADK asks) then reads the tips' commits in one
query (``CommitIndex.get_many``) and their states, and ``list_sessions_page`` reads those
of one page only, in branch-name order (user, then session id), which stays stable while
sessions are being updated. What a listing needs of a tip commit (its tree, the update
time, the ids) is kept by commit id, so listing again reads only the states.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import orjson
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State as AdkState
from pydantic_core import PydanticSerializationError
from typing_extensions import override

from snapvc.agent.state import State
from snapvc.agent.threads import escape_id, parse_thread_branch
from snapvc.api import Repository
from snapvc.api import open as open_repository
from snapvc.errors import InvalidArgumentError, InvalidRefNameError, RefConflictError, SnapvcError, UnsupportedValueError
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.refs.names import HEADS

__all__ = ["SnapvcSessionService", "SessionsPage", "session_branch", "KEY", "SessionExistsError",
           "SessionMissingError", "StaleSessionServiceError"]

KEY: Final = "adk"  # the commit metadata holding a session's ids and last update time
ROOT: Final = "adk/"  # every branch of the service lies under it
APP_STATE: Final = "+app"
USER_STATE: Final = "+user"
_MAX_WORKING = 64  # working copies of session branches kept for appends
_EVENTS: Final = "events"
_STATE: Final = "state"
_MAX_TIPS = 200_000  # tip commits whose listing facts are kept (about 150 bytes each)
_CAS_TRIES = 16  # app and user state: re-read and apply again after another writer's commit

T = TypeVar("T")


class SessionExistsError(SnapvcError, AlreadyExistsError):
    """``create_session`` with the id of a session that exists (ADK's ``AlreadyExistsError``)."""


class SessionMissingError(SnapvcError, SessionNotFoundError):
    """An event appended to a session that does not exist (ADK's ``SessionNotFoundError``)."""


class StaleSessionServiceError(SnapvcError, StaleSessionError):
    """An event appended through a session copy read before another write to the same
    session (ADK's ``StaleSessionError``): get the session again and append to it."""


@dataclass
class SessionsPage:
    """One page of ``list_sessions_page``: its ``sessions`` (without events, with their
    merged state) and the token of the next page (None on the last)."""

    sessions: list[Session] = field(default_factory=list)
    next_page_token: str | None = None


def _escaped(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(what, f"an ADK {what} is a non-empty str, got {value!r}")
    try:
        return escape_id(value, what)
    except SnapvcError as exc:
        raise InvalidArgumentError(what, f"ADK {what} {value!r} cannot name a branch: {exc}") from None


def _decodes(escaped: str) -> bool:
    """Whether ``escaped`` (one part of a branch name) reads back as an id."""
    try:
        parse_thread_branch(escaped)
    except InvalidRefNameError:
        return False
    return True


def _app_root(app_name: str) -> str:
    return f"{ROOT}{_escaped(app_name, 'app_name')}/"


def session_branch(app_name: str, user_id: str, session_id: str) -> str:
    """The branch holding session ``session_id`` of ``user_id`` in ``app_name``:
    ``session_branch("app", "u1", "s1") == "adk/app/u1/s1"``."""
    return f"{_app_root(app_name)}{_escaped(user_id, 'user_id')}/{_escaped(session_id, 'session_id')}"


def _user_branch(app_name: str, user_id: str) -> str:
    return f"{_app_root(app_name)}{_escaped(user_id, 'user_id')}/{USER_STATE}"


def _app_branch(app_name: str) -> str:
    return f"{_app_root(app_name)}{APP_STATE}"


def _event_data(event: Event) -> Any:
    """The event as plain JSON data: ADK's own serialization (bytes as base64, as its
    SQLite service writes them), read back by ``_event``."""
    try:
        text = event.model_dump_json(exclude_none=True)
    except PydanticSerializationError as exc:  # text that is not valid Unicode, say
        raise UnsupportedValueError(f"event {event.id!r} by {event.author!r}", f"not storable as JSON: {exc}") from None
    return orjson.loads(text)


def _event(data: Any) -> Event:
    return Event.model_validate_json(orjson.dumps(data))


def _summary(event: Event) -> str:
    """A commit message for an event: who spoke, and the first text or call of it."""
    what = ""
    for part in (event.content.parts or []) if event.content else []:
        if part.text:
            what = part.text.strip().splitlines()[0][:72] if part.text.strip() else ""
        elif part.function_call is not None:
            what = f"call {part.function_call.name}"
        elif part.function_response is not None:
            what = f"result of {part.function_response.name}"
        if what:
            break
    return f"{event.author}: {what}" if what else f"{event.author}: event {event.id}"


class SnapvcSessionService(BaseSessionService):
    """ADK's ``SessionService`` on the snapvc repository ``repo`` (a ``Repository``, or a
    location ``snapvc.open`` takes): ``Runner(..., session_service=SnapvcSessionService(repo))``.

    Besides ADK's interface it offers ``list_sessions_page`` (listing a page at a cost
    that follows the page) and ``session_branch`` (where a session's history is).
    Thread-safe; the async methods run the repository's work in a worker thread.
    """

    def __init__(self, repo: Repository | str) -> None:
        self.repo = repo if isinstance(repo, Repository) else open_repository(repo)
        self._lock = threading.RLock()
        self._working: OrderedDict[str, State] = OrderedDict()
        self._tip_facts: dict[ObjectId, _Tip] = {}  # read by listings, by commit id

    # -- ADK's interface --------------------------------------------------------------------

    @override
    async def create_session(self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        return await self._run(self.create_session_sync, app_name=app_name, user_id=user_id, state=state,
                               session_id=session_id)

    @override
    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> Session | None:
        return await self._run(self.get_session_sync, app_name=app_name, user_id=user_id, session_id=session_id,
                               config=config)

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return await self._run(self.list_sessions_sync, app_name=app_name, user_id=user_id)

    async def list_sessions_page(self, *, app_name: str, user_id: str | None = None, page_size: int = 100,
                                 page_token: str | None = None) -> SessionsPage:
        """Up to ``page_size`` sessions (without events, with their merged state) in
        branch-name order (user, then session id, as escaped), after ``page_token`` (the
        ``next_page_token`` of the page before; None for the first)."""
        return await self._run(self.list_sessions_page_sync, app_name=app_name, user_id=user_id,
                               page_size=page_size, page_token=page_token)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._run(self.delete_session_sync, app_name=app_name, user_id=user_id, session_id=session_id)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._run(self._scoped_state, _user_branch(app_name, user_id))

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        return await self._run(self.append_event_sync, session, event)

    # -- the same, synchronously ------------------------------------------------------------

    def create_session_sync(self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
                            session_id: str | None = None) -> Session:
        session_id = (session_id.strip() if isinstance(session_id, str) else session_id) or platform_uuid.new_uuid()
        branch = session_branch(app_name, user_id, session_id)
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        now = platform_time.get_time()
        with self._lock, self.repo.write_lock, self.repo.backend.transaction():
            if self.repo.refs.get(HEADS + branch) is not None:
                raise SessionExistsError(f"Session with id {session_id} already exists (branch {branch!r}).")
            app_state = self._update_scoped(_app_branch(app_name), deltas["app"], f"app state: {app_name}")
            user_state = self._update_scoped(_user_branch(app_name, user_id), deltas["user"],
                                             f"user state: {user_id}")
            try:
                commit = self.repo.commit({_STATE: deltas["session"], _EVENTS: []}, branch=branch,
                                          message=f"session {session_id} created",
                                          metadata=self._metadata(app_name, user_id, session_id, now), parents=())
            except RefConflictError:
                raise SessionExistsError(f"Session with id {session_id} already exists (branch {branch!r}).") from None
        session = Session(app_name=app_name, user_id=user_id, id=session_id,
                          state=_merged(app_state, user_state, deltas["session"]), events=[], last_update_time=now)
        session._storage_update_marker = commit.id.hex
        return session

    def get_session_sync(self, *, app_name: str, user_id: str, session_id: str,
                         config: GetSessionConfig | None = None) -> Session | None:
        session_id = session_id.strip() if isinstance(session_id, str) else session_id
        branch = session_branch(app_name, user_id, session_id)
        tip = self.repo.refs.get(HEADS + branch)
        if tip is None:
            return None
        commit = self.repo.get_commit(tip)
        view = self.repo.snapshot(tip)
        events = view[_EVENTS]
        start = 0
        if config is not None:
            if config.num_recent_events is not None:
                start = max(0, len(events) - config.num_recent_events)
            if config.after_timestamp is not None:
                # As ADK's in-memory service: the events from the end back to the first
                # one older than the time (events are appended in time order).
                i = len(events)
                while i > start and events[i - 1]["timestamp"] >= config.after_timestamp:
                    i -= 1
                start = i
        if config is not None and config.num_recent_events == 0:
            start = len(events)
        session = Session(app_name=app_name, user_id=user_id, id=session_id,
                          state=_merged(self._scoped_state(_app_branch(app_name)),
                                        self._scoped_state(_user_branch(app_name, user_id)), _plain(view[_STATE])),
                          events=[_event(_plain(e)) for e in (_plain(events) if start == 0 else events[start:])],
                          last_update_time=_update_time(commit))
        session._storage_update_marker = tip.hex
        return session

    def list_sessions_sync(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        found = self._listing(app_name, user_id)
        sessions = self._sessions(app_name, found.sessions, found)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def list_sessions_page_sync(self, *, app_name: str, user_id: str | None = None, page_size: int = 100,
                                page_token: str | None = None) -> SessionsPage:
        if type(page_size) is not int or page_size < 1:
            raise InvalidArgumentError("page_size", f"page_size is a positive int, got {page_size!r}")
        if page_token is not None and not isinstance(page_token, str):
            raise InvalidArgumentError("page_token", f"page_token is a str from a page's next_page_token, "
                                                     f"got {page_token!r}")
        root = _app_root(app_name)
        if page_token is not None and not page_token.startswith(root):
            raise InvalidArgumentError("page_token", f"page token {page_token!r} is not one of a listing of app "
                                                     f"{app_name!r} (its branches start with {root!r})")
        # One more session than the page, to know whether another page follows. The
        # ref store reads the names after the token only, a few at a time past the app
        # and user state branches among them.
        found = self._listing(app_name, user_id, after=page_token, want=page_size + 1)
        page = found.sessions[:page_size]
        more = len(found.sessions) > page_size
        return SessionsPage(self._sessions(app_name, page, found), page[-1][0] if more else None)

    def delete_session_sync(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if isinstance(session_id, str) else session_id
        branch = session_branch(app_name, user_id, session_id)
        with self._lock:
            self._working.pop(branch, None)
            if self.repo.refs.get(HEADS + branch) is not None:
                # Its commits stay reachable from the reflog until gc expires them.
                self.repo.delete_branch(branch)

    def append_event_sync(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        branch = session_branch(session.app_name, session.user_id, session.id)
        with self._lock, self.repo.write_lock, self.repo.backend.transaction():
            tip = self.repo.refs.get(HEADS + branch)
            if tip is None:
                raise SessionMissingError(f"Session {session.id} not found (no branch {branch!r}).")
            self._check_fresh(session, branch, tip)
            # Temp state reaches the session in memory only (ADK's rule), then leaves the event.
            self._apply_temp_state(session, event)
            event = self._trim_temp_delta_state(event)
            # Made first: an event that cannot be stored is refused before any state is.
            data = _event_data(event)
            deltas = _session_util.extract_json_safe_state_delta(event.actions.state_delta or {})
            self._update_scoped(_app_branch(session.app_name), deltas["app"], f"app state: {_summary(event)}")
            self._update_scoped(_user_branch(session.app_name, session.user_id), deltas["user"],
                                f"user state: {_summary(event)}")
            working = self._working_copy(branch, tip)
            working.append(_EVENTS, data)
            for key, value in deltas["session"].items():
                working.set((_STATE, key), value)
            try:
                checkpoint = working.snapshot(_summary(event), metadata=self._metadata(
                    session.app_name, session.user_id, session.id, event.timestamp))
            except BaseException:
                self._working.pop(branch, None)  # it holds an event that was not stored
                raise
        session.last_update_time = event.timestamp
        session._storage_update_marker = checkpoint.id
        return self._commit_event_to_session(session, event)

    # -- internals --------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    @staticmethod
    def _metadata(app_name: str, user_id: str, session_id: str, when: float) -> dict[str, Any]:
        return {KEY: {"app": app_name, "user": user_id, "session": session_id, "time": when}}

    def _check_fresh(self, session: Session, branch: str, tip: ObjectId) -> None:
        marker = session._storage_update_marker
        if marker is not None:
            stale = marker != tip.hex
        else:  # a session object this service did not hand out: compare the times, as ADK does
            stale = _update_time(self.repo.get_commit(tip)) > session.last_update_time
        if stale:
            raise StaleSessionServiceError(
                f"session {session.id!r} was written since this copy of it was read (branch {branch!r} is at "
                f"{tip.short}, the copy at {(marker or '?')[:12]}): get the session again and append to that")

    def _working_copy(self, branch: str, tip: ObjectId) -> State:
        working = self._working.pop(branch, None)
        if working is None or working.base != tip:
            working = State(self.repo, branch)
            if working.base != tip:  # moved between the ref read and the load: the lock rules this out
                raise StaleSessionServiceError(f"session branch {branch!r} moved while it was being read")
        self._working[branch] = working
        while len(self._working) > _MAX_WORKING:
            self._working.popitem(last=False)
        return working

    def _update_scoped(self, branch: str, delta: dict[str, Any], message: str) -> dict[str, Any]:
        """Set ``delta``'s keys on the app or user state branch (a commit if any changed);
        returns the state after it."""
        for _ in range(_CAS_TRIES):
            tip = self.repo.refs.get(HEADS + branch)
            current = _plain(self.repo.checkout(tip)) if tip is not None else {}
            if not delta or all(k in current and current[k] == v for k, v in delta.items()):
                return current
            merged = {**current, **delta}
            try:
                self.repo.commit(merged, branch=branch, message=message, parents=(tip,) if tip is not None else ())
            except RefConflictError:
                continue  # another process moved it: apply the delta to its state
            return merged
        raise RefConflictError(HEADS + branch, None, self.repo.refs.get(HEADS + branch))

    def _scoped_state(self, branch: str) -> dict[str, Any]:
        tip = self.repo.refs.get(HEADS + branch)
        return {} if tip is None else _plain(self.repo.checkout(tip))

    def _listing(self, app_name: str, user_id: str | None, *, after: str | None = None,
                 want: int | None = None) -> _Listing:
        """The session branches (sorted by name, after the branch ``after``, up to
        ``want`` of them) and the scoped-state tips of an app met on the way, from the
        branch names alone."""
        root = _app_root(app_name)
        prefix = HEADS + root + (f"{_escaped(user_id, 'user_id')}/" if user_id is not None else "")
        found = _Listing(self.repo.refs.get(HEADS + root + APP_STATE))
        cursor = None if after is None else HEADS + after
        while want is None or len(found.sessions) < want:
            names = self.repo.refs.list(prefix, after=cursor,
                                        limit=None if want is None else want - len(found.sessions) + 2)
            for name, tip in names.items():
                user, sep, rest = name[len(HEADS + root):].partition("/")
                if not sep or "/" in rest or not _decodes(user) or not _decodes(rest):
                    continue  # +app, or a branch made by hand (x%FF escapes no id)
                if rest == USER_STATE:
                    found.user_tips[user] = tip
                elif "+" not in rest:
                    found.sessions.append((name[len(HEADS):], tip))
            if want is None or not names:
                break
            cursor = next(reversed(names))
        return found

    def _sessions(self, app_name: str, names: Sequence[tuple[str, ObjectId]], found: _Listing) -> list[Session]:
        """Sessions without events for ``names`` (branch, tip), with merged state. The
        tips' commits are read in one query and their trees fetched together, so each
        state is read without a query."""
        loader = self.repo.loader
        tips = self._tips([tip for _, tip in names])
        loader.fetch_many([t.tree for t in tips])
        app_state = {} if found.app_tip is None else _plain(self.repo.checkout(found.app_tip))
        user_states: dict[str, dict[str, Any]] = {}
        out = []
        for (branch, _), tip in zip(names, tips):
            escaped_user = branch[len(ROOT):].split("/")[1]
            user_state = user_states.get(escaped_user)
            if user_state is None:
                # A page may not hold the user's state branch among its names: read it.
                user_tip = found.user_tips.get(escaped_user) or self.repo.refs.get(
                    f"{HEADS}{_app_root(app_name)}{escaped_user}/{USER_STATE}")
                user_state = user_states[escaped_user] = {} if user_tip is None else _plain(
                    self.repo.checkout(user_tip))
            session_state = _plain(loader.view(tip.tree)[_STATE])
            out.append(Session(app_name=app_name,
                               user_id=tip.user_id or parse_thread_branch(escaped_user)[0],
                               id=tip.session_id or parse_thread_branch(branch.rsplit("/", 1)[1])[0],
                               state=_merged(app_state, user_state, session_state), events=[],
                               last_update_time=tip.time))
        return out

    def _tips(self, ids: list[ObjectId]) -> list[_Tip]:
        """What a listing needs of each commit of ``ids``: those read before are kept
        (commits never change), the others read from the commit index in one query."""
        known = self._tip_facts  # shared by the threads listing at once: read it with .get only
        facts: dict[ObjectId, _Tip] = {}
        missing: list[ObjectId] = []
        for oid in ids:
            fact = known.get(oid)
            if fact is None:
                missing.append(oid)
            else:
                facts[oid] = fact
        if missing:
            commits = self.repo.commits.get_many(missing)
            for oid in dict.fromkeys(missing):
                # A commit the index lacks is one an older snapvc kept in the object
                # store: ``get_commit`` reads it there (and raises if there is none).
                commit = commits.get(oid) or self.repo.get_commit(oid, walking=True)
                meta = commit.metadata.get(KEY) or {}
                facts[oid] = _Tip(commit.tree, _update_time(commit), meta.get("user") or None,
                                  meta.get("session") or None)
            if len(known) + len(missing) > _MAX_TIPS:
                known.clear()
            known.update(facts)
        return [facts[oid] for oid in ids]


@dataclass(frozen=True, slots=True)
class _Tip:
    """What a listing reads of a session's tip commit: its tree, the session's last
    update time, and the ids from its metadata (None: take them from the branch name)."""

    tree: ObjectId
    time: float
    user_id: str | None
    session_id: str | None


@dataclass
class _Listing:
    app_tip: ObjectId | None
    user_tips: dict[str, ObjectId] = field(default_factory=dict)  # escaped user id -> tip
    sessions: list[tuple[str, ObjectId]] = field(default_factory=list)  # (branch, tip), by name


def _plain(value: Any) -> Any:
    """A stored value as plain dicts and lists (lazy views read whole)."""
    to_dict = getattr(value, "to_dict", None)
    if to_dict is not None:
        return to_dict()
    to_list = getattr(value, "to_list", None)
    if to_list is not None:
        return list(to_list())
    return value


def _update_time(commit: Commit) -> float:
    meta = commit.metadata.get(KEY) or {}
    when = meta.get("time")
    return float(when) if isinstance(when, (int, float)) else commit.timestamp_us / 1e6


def _merged(app_state: dict[str, Any], user_state: dict[str, Any], session_state: dict[str, Any]) -> dict[str, Any]:
    merged = dict(session_state)
    for key, value in app_state.items():
        merged[AdkState.APP_PREFIX + key] = value
    for key, value in user_state.items():
        merged[AdkState.USER_PREFIX + key] = value
    return merged
