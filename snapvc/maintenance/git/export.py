"""snapvc history as a git repository, and back: ``export_git``, ``import_git``.

Export writes every commit reachable from the chosen branches (and the tags on them)
as a git commit whose tree is the state laid out as files (``snapvc.maintenance.git.layout``). A
git commit holds the time (UTC), parents (merges included) and message, an author and
committer git tools show whole (``_git_identity``: the snapvc author when it is
``Name <email>``, else the metadata's ``author`` when it is, else that name or the
snapvc author's at ``snapvc@localhost``), and these trailers::

    Snapvc-Metadata: {"agent":"researcher","step":3}   the metadata, canonical JSON (if any)
    Snapvc-Time: 1763923541.123456                     the time to the microsecond (if not whole seconds)
    Snapvc-Author: "root"                              the snapvc author, a JSON string (if not the git author)
    Snapvc-Commit: 5ac52ee0…                           the snapvc commit's id

so the same history always gives the same git commit ids, and ``import_git`` rebuilds
each snapvc commit exactly, to its id. Branches become ``refs/heads/…``, tags
``refs/tags/…``, and HEAD follows the repository's HEAD branch when it is exported.

Export is incremental: the git commit of each snapvc commit exported once is kept in
the snapvc repository (``GitCommitMap``), and a commit the target already holds is not
built again, nor is anything behind it. New objects go into the target as one pack
(dulwich), so no ``git`` process runs. ``push`` sends the exported refs to a git remote
with dulwich's client (a path, ``file://``, ``git://``, ``ssh://`` or ``http(s)://``).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import orjson
from dulwich import porcelain
from dulwich.errors import NotGitRepository
from dulwich.objects import Commit as GitCommit
from dulwich.objects import ShaFile, Tag
from dulwich.repo import Repo

from snapvc.errors import GitError, UnknownRevisionError, UnsupportedValueError
from snapvc.maintenance.git.layout import TreeWriter, state_of
from snapvc.maintenance.git.results import ExportResult, ImportResult
from snapvc.repository.history import commits_behind
from snapvc.ids import ObjectId
from snapvc.objects import Commit

if TYPE_CHECKING:
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

    from snapvc.repository.roles import Versioned

__all__ = ["ExportResult", "GitCommitMap", "ImportResult", "export_git", "import_git"]

LAYOUT_VERSION = 2  # a change to the layout or the commit form changes every git id: bump it
_IDENTITY = re.compile(r"^(.*?) <([^<>]*)>$")
_TRAILER_COMMIT = "Snapvc-Commit: "
_TRAILER_TIME = "Snapvc-Time: "
_TRAILER_METADATA = "Snapvc-Metadata: "
_TRAILER_AUTHOR = "Snapvc-Author: "
# Who a commit is by in git when snapvc knows no email: git tools show ``Name <>`` as a
# broken identity, and hosts link an email to an account; this one belongs to nobody.
EXPORT_EMAIL = "snapvc@localhost"
EXPORT_IDENTITY = f"snapvc <{EXPORT_EMAIL}>"


class GitCommitMap:
    """Which git commit each snapvc commit was exported as (ids are deterministic, so
    one map serves every target). Kept by the backend (``Backend.id_map``): in the
    repository's SQLite file (table ``git_commits_v2``), or in memory beside a memory
    repository's objects."""

    def __init__(self, repo: Versioned) -> None:
        self._map = repo.backend.id_map(f"git_commits_v{LAYOUT_VERSION}")

    def get_many(self, ids: Sequence[bytes]) -> dict[bytes, bytes]:
        return self._map.get_many(ids)

    def put_many(self, pairs: Mapping[ObjectId, bytes]) -> None:
        self._map.put_many(cast(Mapping[bytes, bytes], pairs))  # ObjectIds are bytes


def _open_target(path: str | os.PathLike[str], bare: bool) -> Repo:
    target = Path(path)
    if target.exists() and any(target.iterdir()):
        try:
            return Repo(str(target))
        except NotGitRepository:
            raise GitError(f"{str(target)!r} exists and is not a git repository; export to a new or empty folder") from None
    target.mkdir(parents=True, exist_ok=True)
    return Repo.init_bare(str(target)) if bare else Repo.init(str(target))


def _full_identity(text: Any) -> bool:
    """``Name <email>`` with a name and an email git accepts (no line break, no ``<>``
    inside)."""
    if not isinstance(text, str) or "\n" in text:
        return False
    match = _IDENTITY.match(text)
    return bool(match and match.group(1).strip() and match.group(2) and "<" not in match.group(1))


def _name(text: Any) -> str | None:
    """A name git can hold before ``<email>``: one line, no angle brackets."""
    if not isinstance(text, str) or not text.strip() or any(c in text for c in "<>\n\r\0"):
        return None
    return text.strip()


def _git_identity(commit: Commit) -> str:
    """Who the git commit is by: the snapvc author when it is ``Name <email>``; else the
    metadata's ``author`` when it is; else that name (or the snapvc author's, as
    ``SNAPVC_AUTHOR`` or the login gave it) at ``snapvc@localhost``; else
    ``snapvc <snapvc@localhost>``. When this is not the snapvc author itself, the
    ``Snapvc-Author`` trailer keeps that, so the import rebuilds the commit exactly."""
    meta_author = commit.metadata.get("author") if commit.metadata_json != b"{}" else None
    for candidate in (commit.author, meta_author):
        if _full_identity(candidate):
            return cast(str, candidate)
    name = _name(meta_author) or _name(commit.author)
    return f"{name} <{EXPORT_EMAIL}>" if name else EXPORT_IDENTITY


def _git_message(commit: Commit, identity: str) -> bytes:
    trailers = []
    if commit.metadata_json != b"{}":
        trailers.append(_TRAILER_METADATA + commit.metadata_json.decode())
    if commit.timestamp_us % 1_000_000:
        trailers.append(f"{_TRAILER_TIME}{commit.timestamp_us // 1_000_000}.{commit.timestamp_us % 1_000_000:06d}")
    if identity != commit.author:
        trailers.append(_TRAILER_AUTHOR + orjson.dumps(commit.author).decode())
    trailers.append(_TRAILER_COMMIT + commit.id.hex)
    return (commit.message + "\n\n" + "\n".join(trailers) + "\n").encode()


def export_git(repo: Versioned, path: str | os.PathLike[str], branches: Iterable[str] | None = None, *,
               bare: bool = True, push: str | None = None, force: bool = False,
               progress: Callable[[int, int], None] | None = None) -> ExportResult:
    """Write the history of ``branches`` (default: every branch, and every tag) into
    the git repository at ``path`` (created, bare unless ``bare=False``, if missing;
    a repository with a work tree gets HEAD's files checked out); then push the
    exported refs to ``push`` if given (``force`` allows a non-fast-forward).
    ``progress(done, total)`` is told of each commit written."""
    target = _open_target(path, bare)
    try:
        names = list(repo.branches()) if branches is None else list(branches)
        known = repo.branches()
        for name in names:
            if name not in known:
                raise GitError(f"no branch {name!r} to export (branches: {', '.join(known) or 'none'})")
        tips = {f"refs/heads/{name}": known[name] for name in names}
        for name, oid in repo.tags().items():
            if branches is None:
                tips[f"refs/tags/{name}"] = oid
        commit_map = GitCommitMap(repo)
        todo, shas = _commits_to_write(repo, list(tips.values()), commit_map, target)
        writer = TreeWriter()
        written: dict[ObjectId, bytes] = {}
        for done, commit in enumerate(todo, 1):
            git_commit = GitCommit()
            git_commit.tree = writer.state_tree(repo.snapshot(commit.id))
            git_commit.parents = [cast("ObjectID", shas[p]) for p in commit.parents]
            identity = _git_identity(commit)
            git_commit.author = git_commit.committer = identity.encode()
            git_commit.author_time = git_commit.commit_time = commit.timestamp_us // 1_000_000
            git_commit.author_timezone = git_commit.commit_timezone = 0
            git_commit.encoding = b"UTF-8"
            git_commit.message = _git_message(commit, identity)
            writer.objects[git_commit.id] = git_commit
            shas[commit.id] = written[commit.id] = git_commit.id
            if progress is not None:
                progress(done, len(todo))
        new = writer.reachable(written.values(), lambda sha: cast("ObjectID", sha) in target.object_store)
        if new:
            target.object_store.add_objects([(obj, None) for obj in new])
        commit_map.put_many(written)
        refs = {ref: shas[oid] for ref, oid in tips.items()}
        for ref, sha in refs.items():
            target.refs[cast("Ref", ref.encode())] = cast("ObjectID", sha)
        head = f"refs/heads/{repo.head}"
        if head in refs:
            target.refs.set_symbolic_ref(cast("Ref", b"HEAD"), cast("Ref", head.encode()))
            if not bare and target.has_index():
                porcelain.reset(target, "hard", refs[head])
        pushed = _push(target, push, list(refs), force) if push else []
        return ExportResult(str(path), len(todo), len(new), {ref: sha.decode() for ref, sha in refs.items()}, pushed)
    finally:
        target.close()


def _commits_to_write(repo: Versioned, tips: list[ObjectId], commit_map: GitCommitMap,
                      target: Repo) -> tuple[list[Commit], dict[bytes, bytes]]:
    """The commits behind ``tips`` that ``target`` lacks, parents first, and the git
    shas of the commits it holds already where the walk stopped (and of such tips)."""

    def in_target(batch: list[ObjectId]) -> set[ObjectId]:
        # The map hands back the ids asked for: ObjectIds, as bytes.
        return {cast(ObjectId, oid) for oid, sha in commit_map.get_many(batch).items()
                if cast("ObjectID", sha) in target.object_store}

    todo = commits_behind(lambda oid: repo.get_commit(oid, walking=True), tips, in_target)
    new = {c.id for c in todo}
    stops = {p for c in todo for p in c.parents if p not in new} | {t for t in tips if t not in new}
    return todo, commit_map.get_many(list(stops))


def _push(target: Repo, url: str, refs: list[str], force: bool) -> list[str]:
    errors = io.BytesIO()
    try:
        result = porcelain.push(target, url, refspecs=[f"{ref}:{ref}".encode() for ref in refs], force=force,
                                outstream=io.BytesIO(), errstream=errors)
    except porcelain.DivergedBranches as exc:
        theirs, ours = (sha.decode() for sha in exc.args[:2])
        ref = next((r for r in refs if target.refs[cast("Ref", r.encode())].decode() == ours), "a ref")
        raise GitError(f"push to {url} refused: {ref} is at {theirs[:8]} there, which the exported {ours[:8]} does "
                       "not follow (the histories diverged, e.g. after a reset); force the push to overwrite it") from None
    except Exception as exc:  # dulwich raises its own errors, OSError, or HangupException
        detail = errors.getvalue().decode(errors="replace").strip()
        raise GitError(f"push to {url} failed: {exc}" + (f" ({detail})" if detail else "")) from exc
    refused = {ref.decode(): str(why) for ref, why in (result.ref_status or {}).items() if why is not None}
    if refused:
        raise GitError(f"push to {url} refused: " + "; ".join(f"{ref}: {why}" for ref, why in refused.items())
                       + ("" if force else " (a non-fast-forward push needs force)"))
    return refs


# -- import -------------------------------------------------------------------------------------


class _Trailers(NamedTuple):
    """A git commit message read: the snapvc message, and what its trailers hold."""

    message: str
    metadata: dict[str, Any] | None
    time: tuple[int, int] | None  # (seconds, microseconds)
    claimed: str | None  # the snapvc commit id it was exported from, hex
    author: str | None  # the snapvc author, when git's author is not it


_TIME = re.compile(r"([0-9]+)\.([0-9]{6})")
_HEX_ID = re.compile(r"[0-9a-f]{64}")


def _parse_message(text: str, where: str) -> _Trailers:
    """The message and trailers ``_git_message`` wrote, or the whole text (less its
    final newline) when its last paragraph does not end with ``Snapvc-Commit``. A
    trailer that does not parse is a ``GitError`` naming ``where`` (the commit): it
    would otherwise be lost, or its commit rebuilt wrongly."""
    body = text[:-1] if text.endswith("\n") else text
    cut = body.rfind("\n\n")
    # "\n" only: a metadata string may hold U+2028 or \x1c, which str.splitlines splits on
    lines = body[cut + 2:].split("\n") if cut >= 0 else []
    if not lines or not lines[-1].startswith(_TRAILER_COMMIT):
        return _Trailers(body, None, None, None, None)
    fields: dict[str, str] = {}
    for line in lines:
        label = next((t for t in (_TRAILER_METADATA, _TRAILER_TIME, _TRAILER_AUTHOR, _TRAILER_COMMIT)
                      if line.startswith(t)), None)
        if label is None:
            raise GitError(f"{where}: the line {line!r} among its Snapvc trailers is none of them (Snapvc-Metadata, "
                           "Snapvc-Time, Snapvc-Author, Snapvc-Commit)")
        if label in fields:
            raise GitError(f"{where}: the trailer {label.rstrip(': ')} appears twice")
        fields[label] = line[len(label):]
    claimed = fields[_TRAILER_COMMIT]
    if not _HEX_ID.fullmatch(claimed):
        raise GitError(f"{where}: the trailer Snapvc-Commit: {claimed!r} is not a snapvc commit id (64 hex digits)")
    metadata = _json_trailer(fields, _TRAILER_METADATA, dict, "a JSON object", where)
    time = None
    if _TRAILER_TIME in fields:
        match = _TIME.fullmatch(fields[_TRAILER_TIME])
        if match is None:
            raise GitError(f"{where}: the trailer Snapvc-Time: {fields[_TRAILER_TIME]!r} is not "
                           "<seconds>.<six digits of microseconds>")
        time = int(match.group(1)), int(match.group(2))
    author = _json_trailer(fields, _TRAILER_AUTHOR, str, "a JSON string", where)
    return _Trailers(body[:cut], metadata, time, claimed, author)


def _json_trailer(fields: dict[str, str], label: str, kind: type, what: str, where: str) -> Any:
    """The JSON value of trailer ``label`` (None if absent), which must be a ``kind``;
    ``GitError`` naming the trailer and the commit otherwise."""
    if label not in fields:
        return None
    name = label.rstrip(": ")
    try:
        value = orjson.loads(fields[label])
    except orjson.JSONDecodeError as exc:
        raise GitError(f"{where}: the trailer {name} is not JSON: {exc}") from None
    if not isinstance(value, kind):
        held = type(value).__name__
        raise GitError(f"{where}: the trailer {name} holds {'an' if held[0] in 'aeiou' else 'a'} {held}, not {what}")
    return value


def _text(raw: bytes, git_commit: GitCommit, what: str, where: str) -> str:
    """A commit's message or author as text, in the encoding its header names (git's
    default: UTF-8). Bytes that are not in it are an error, not replaced: the text
    would be stored changed."""
    encoding = (git_commit.encoding or b"UTF-8").decode("ascii", "replace")
    try:
        return raw.decode(encoding)
    except LookupError:
        raise GitError(f"{where}: its encoding header {encoding!r} names no text encoding Python knows") from None
    except UnicodeDecodeError as exc:
        raise GitError(f"{where}: its {what} is not {encoding} text (byte {exc.start}: {exc.reason})") from None


def _commit_time(git_commit: GitCommit, trailers: _Trailers, where: str) -> datetime:
    """The author time, to the microsecond the Snapvc-Time trailer adds. A trailer whose
    seconds are not the author time's was left behind by a change of the date in git:
    git's date wins (the commit then rebuilds inexactly, and is reported so)."""
    seconds = git_commit.author_time
    micros = trailers.time[1] if trailers.time is not None and trailers.time[0] == seconds else 0
    try:
        return datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)
    except (OverflowError, OSError, ValueError):
        raise GitError(f"{where}: its author time {seconds} is out of the range of dates") from None


def import_git(repo: Versioned, path: str | os.PathLike[str], branches: Iterable[str] | None = None) -> ImportResult:
    """Read the history of ``branches`` (default: every branch, and every tag) of the
    git repository at ``path`` into ``repo``, and point branches and tags of the same
    names at it (moving existing ones). Each commit's tree is read as a state (see
    ``snapvc.maintenance.git.layout``); commits that snapvc exported come back exactly. A commit
    that cannot be read whole (files that do not map one-to-one onto a state, a
    trailer or a text that does not parse) is a ``GitError`` naming it, raised before
    any ref moves."""
    try:
        source = Repo(str(path))
    except NotGitRepository:
        raise GitError(f"{str(path)!r} is not a git repository") from None
    try:
        refs = {name.decode(): sha for name, sha in source.get_refs().items()
                if name.startswith((b"refs/heads/", b"refs/tags/"))}
        if branches is not None:
            wanted = {f"refs/heads/{b}" for b in branches}
            missing = wanted - refs.keys()
            if missing:
                raise GitError(f"no branch {sorted(missing)[0][len('refs/heads/'):]!r} in {path}")
            refs = {name: sha for name, sha in refs.items() if name in wanted}
        tips = {name: _peel(source, sha, name) for name, sha in refs.items()}
        order = _parents_first(source, list(tips.values()), path)
        commit_map = GitCommitMap(repo)
        ids: dict[bytes, ObjectId] = {}
        memo: dict[Any, Any] = {}
        new, inexact, exported = 0, [], {}
        for sha in order:
            git_commit = source[sha]
            assert isinstance(git_commit, GitCommit)
            where = f"commit {sha.decode()}"
            trailers = _parse_message(_text(git_commit.message, git_commit, "message", where), where)
            claimed = trailers.claimed
            if claimed is not None and _already_here(repo, claimed, sha, commit_map):
                ids[sha] = ObjectId.from_hex(claimed)
                continue
            author = _text(git_commit.author, git_commit, "author", where)
            name = _IDENTITY.match(author)
            if trailers.author is not None:  # the snapvc author, when git's is another
                author = trailers.author
            elif name and name.group(2) == "":  # "root <>": how older exports wrote an author without an email
                author = name.group(1)
            state = state_of(git_commit.tree, source.__getitem__, memo, where=where)
            try:
                made = repo.commit_tree(state, [ids[p] for p in git_commit.parents], trailers.message,
                                        trailers.metadata, author=author, date=_commit_time(git_commit, trailers, where))
            except UnsupportedValueError as exc:  # e.g. JSON files nesting deeper than a state may
                raise GitError(f"{where}: its files hold a value a state cannot: {exc}") from exc
            ids[sha] = made.id
            new += 1
            if claimed is not None:
                if made.id.hex != claimed:
                    inexact.append(sha.decode())
                else:
                    exported[made.id] = sha
        commit_map.put_many(exported)
        set_branches: dict[str, ObjectId] = {}
        set_tags: dict[str, ObjectId] = {}
        for ref, sha in tips.items():
            if ref.startswith("refs/heads/"):
                set_branches[ref[len("refs/heads/"):]] = repo.branch(ref[len("refs/heads/"):], at=ids[sha], force=True).id
            else:
                set_tags[ref[len("refs/tags/"):]] = repo.tag(ref[len("refs/tags/"):], at=ids[sha], force=True).id
        return ImportResult(len(order), new, set_branches, set_tags, inexact)
    finally:
        source.close()


def _already_here(repo: Versioned, claimed: str, sha: bytes, commit_map: GitCommitMap) -> bool:
    """Whether the snapvc commit a git commit names is in ``repo`` and was exported as
    that very git commit (so it need not be rebuilt)."""
    oid = ObjectId.from_hex(claimed)  # a well-formed id: _parse_message saw to it
    if commit_map.get_many([oid]).get(oid) != sha:
        return False
    try:
        repo.get_commit(oid)
    except UnknownRevisionError:
        return False
    return True


def _peel(source: Repo, sha: bytes, name: str) -> bytes:
    """The commit a ref names (through annotated tags). A ref to a tree or a blob is a
    ``GitError``: a snapvc branch or tag points at a commit, and the ref is not to be
    passed over without a word."""
    obj = _object(source, sha, f"{name} names")
    while isinstance(obj, Tag):
        obj = _object(source, obj.object[1], f"the tag {name} names")
    if not isinstance(obj, GitCommit):
        raise GitError(f"{name} names {type(obj).__name__.lower()} {obj.id.decode()}, not a commit; snapvc refs "
                       "name commits (import the branches you want by name)")
    return obj.id


def _object(source: Repo, sha: bytes, what: str) -> ShaFile:
    try:
        return source[sha]
    except KeyError:
        raise GitError(f"{what} {sha.decode()}, which is missing from the repository") from None


def _parents_first(source: Repo, tips: list[bytes], path: str | os.PathLike[str]) -> list[bytes]:
    """Every commit behind ``tips``, each after its parents. A missing parent is a
    ``GitError`` naming it (in a shallow clone, with the remedy)."""
    order: list[bytes] = []
    done: set[bytes] = set()
    shallow = source.get_shallow()
    for tip in tips:
        stack: list[tuple[bytes, bool]] = [(tip, False)]
        while stack:
            sha, expanded = stack.pop()
            if sha in done:
                continue
            if expanded:
                done.add(sha)
                order.append(sha)
                continue
            stack.append((sha, True))
            commit = source[sha]
            if not isinstance(commit, GitCommit):
                raise GitError(f"{sha.decode()} is a {type(commit).__name__}, not a commit")
            for parent in commit.parents:
                if parent not in source:
                    hint = (" (a shallow clone: fetch the whole history first, git fetch --unshallow)"
                            if sha in shallow else "")
                    raise GitError(f"commit {sha.decode()}: its parent {parent.decode()} is missing from {path}{hint}")
            stack.extend((p, False) for p in reversed(commit.parents) if p not in done)
    return order
