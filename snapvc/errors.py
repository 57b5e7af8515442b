"""Every error snapvc raises, in one tree.

    SnapvcError
    ├── InvalidArgumentError         an argument of the wrong type or value (names the argument)
    ├── InvalidObjectIdError         bytes or text that are not an object id (32 bytes, 64 hex digits)
    ├── UnsupportedValueError        a value snapvc cannot store (names the path in the state)
    ├── UnknownTypeError             a stored typed value whose adapter is not registered
    │   └── NumpyMissingError        a stored numpy array or scalar read where numpy is not installed
    ├── TypeAdapterError             a registered type's from_fields raised (names the adapter and the class)
    ├── ExtraMissingError            a feature whose optional extra is not installed (names the extra; also an ImportError)
    ├── MalformedJsonError           JSON that is not snapvc's JSON form of a value or checkpoint (names the path)
    ├── PathError                    a path into a State, or a key or index of a lazy view, that leads nowhere
    ├── PatchError                   a JSON Patch operation that cannot be applied (names it)
    ├── InvalidCommitError           a commit field of the wrong type or value (names the field, and the commit)
    ├── GitError                     a git repository snapvc cannot read or write, or a push refused
    ├── UnsupportedOperationError    a store ability its capabilities do not declare, called anyway
    ├── RequestRefusedError          a request the web view refuses: a write it was not started to allow, or from another site
    ├── RunnerError                  a Runner that cannot run as asked (names the step)
    │   ├── InvalidStepError         a step or list of steps the Runner refuses (fn not callable, a name twice...)
    │   ├── StepContractError        a step that returned neither None nor a mapping, or whose route names no step
    │   └── ResumeError              a checkpoint the Runner cannot resume from (names it)
    ├── RepositoryError
    │   ├── RepositoryNotFoundError  no repository at that path (and creation not asked for)
    │   │   └── RepositoryFolderError  a repository to create in a folder that is missing or a file
    │   ├── NotARepositoryError      the file exists but is not a snapvc repository
    │   ├── FormatVersionError       written by a newer snapvc (format or codec unknown)
    │   ├── DamagedRowsError         rows of the file holding values of the wrong type or size (names each)
    │   └── UnsafeGcError            a gc grace period too short beside concurrent writers (says how to force it)
    ├── ObjectError
    │   ├── ObjectNotFoundError      an object id that is not in the store
    │   └── CorruptObjectError       stored bytes that do not hash to their id, or do not decode
    ├── RevisionError
    │   ├── UnknownRevisionError     a rev that names nothing
    │   │   └── CheckpointNotFoundError  no checkpoint of that version, step or id in a thread
    │   ├── AmbiguousRevisionError   an id prefix matching more than one object
    │   └── InvalidRevisionError     a rev whose syntax is wrong
    └── RefError
        ├── InvalidRefNameError      a name git's check-ref-format would refuse
        ├── RefNotFoundError         a ref that does not exist (delete, reflog)
        ├── RefExistsError           creating a ref that already exists
        ├── RefConflictError         a compare-and-swap on a ref lost a race
        └── PushRejectedError        a push that is not a fast-forward (names the remote ref)

Expected outcomes that a caller inspects (a merge with conflicts, a CAS that lost
when the caller asked for a boolean) are values, not exceptions. Every error names
what was wrong and where: the path inside the state, the ref name, the object id.
"""

from __future__ import annotations

__all__ = [
    "SnapvcError",
    "InvalidArgumentError",
    "InvalidObjectIdError",
    "UnsupportedValueError",
    "UnknownTypeError",
    "NumpyMissingError",
    "TypeAdapterError",
    "ExtraMissingError",
    "MalformedJsonError",
    "PathError",
    "PatchError",
    "InvalidCommitError",
    "GitError",
    "UnsupportedOperationError",
    "RequestRefusedError",
    "RunnerError",
    "InvalidStepError",
    "StepContractError",
    "ResumeError",
    "RepositoryError",
    "RepositoryNotFoundError",
    "RepositoryFolderError",
    "NotARepositoryError",
    "FormatVersionError",
    "DamagedRowsError",
    "UnsafeGcError",
    "ObjectError",
    "ObjectNotFoundError",
    "CorruptObjectError",
    "RevisionError",
    "UnknownRevisionError",
    "CheckpointNotFoundError",
    "AmbiguousRevisionError",
    "InvalidRevisionError",
    "RefError",
    "InvalidRefNameError",
    "RefNotFoundError",
    "RefExistsError",
    "RefConflictError",
    "PushRejectedError",
]


class SnapvcError(Exception):
    """Base of every error snapvc raises."""


class InvalidArgumentError(SnapvcError, TypeError, ValueError):
    """An argument of the wrong type or value given to a snapvc call (a durability mode
    it does not have, a ``resolve`` strategy that is none of the known ones, a ref name
    that is not a str...). ``argument`` names it. Both a ``TypeError`` and a
    ``ValueError``: a wrong argument, of either kind, is caught as Python's own are."""

    def __init__(self, argument: str, message: str) -> None:
        self.argument = argument
        super().__init__(message)


class InvalidObjectIdError(SnapvcError, ValueError):
    """Bytes that are not 32 long, or text that is not 64 hex digits, given as an object
    id. ``value`` is what was given."""

    def __init__(self, value: object, message: str) -> None:
        self.value = value
        super().__init__(message)


class UnsupportedValueError(SnapvcError, TypeError):
    """A value in the state that snapvc cannot store exactly.

    ``path`` is the Python expression that reaches it, e.g. ``state['memory'][3]['when']``.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class UnknownTypeError(SnapvcError, TypeError):
    """A stored typed value (dataclass, pydantic model, custom adapter) whose type is not known here."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(
            f"stored value of type {type_name!r} cannot be rebuilt: import its module or "
            f"register it with snapvc.register_type(...) before reading"
        )


class NumpyMissingError(UnknownTypeError):
    """A stored numpy array or scalar read in a process where numpy cannot be imported."""

    def __init__(self, type_name: str, path: str | None = None) -> None:
        super().__init__(type_name)
        self.path = path  # where it is in the value read (``state['emb']``), when found
        where = f" at {path}" if path else ""
        self.args = (
            f"the state holds a numpy value{where} (stored as {type_name!r}) and numpy is not installed here: "
            "install snapvc's numpy extra (pip install '.[numpy]' in a clone of snapvc, not on PyPI yet) "
            "to read it",
        )


class ExtraMissingError(SnapvcError, ImportError):
    """A feature used whose optional extra is not installed: ``extra`` is its name in
    snapvc's extras, ``feature`` what needed it, ``missing`` the module not found."""

    def __init__(self, feature: str, extra: str, missing: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        what = f" ({missing} is not installed)" if missing else ""
        super().__init__(f"{feature} needs snapvc's {extra!r} extra{what}: "
                         f"pip install '.[{extra}]' in a clone of snapvc (not on PyPI yet)", name=missing)


class TypeAdapterError(SnapvcError):
    """A registered type's ``from_fields`` raised while rebuilding a stored value: the
    stored data decoded, the user's code failed on it. ``type_name`` is the name it is
    stored under, ``cls`` the class the adapter builds; the error raised is the cause."""

    def __init__(self, type_name: str, cls: type, error: BaseException) -> None:
        self.type_name = type_name
        self.cls = cls
        super().__init__(
            f"the adapter of {type_name!r} ({cls.__module__}.{cls.__qualname__}) failed to rebuild a stored value: "
            f"its from_fields raised {type(error).__name__}: {error}"
        )


class MalformedJsonError(SnapvcError, ValueError):
    """JSON that is not snapvc's JSON form of a value (``snapvc.from_jsonable``: a
    malformed ``{"$snapvc": ...}`` object, or one of a kind it does not know) or of a
    checkpoint (``Checkpoint.from_dict``: a key missing, a time that is none). ``path``
    says where (``state['messages'][3]``), ``reason`` what is wrong. A value nested
    deeper than a state may be is an ``UnsupportedValueError``, as the encoder says."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class PathError(SnapvcError, KeyError, IndexError):
    """A path into a ``State`` (``"research.findings.0"``) that does not lead where asked:
    a missing key, an index out of range, a step into a value that is not a dict or
    list, or a malformed path; or a key or index a lazy ``MapView``/``SeqView`` does not
    have. ``path`` is the path as given, ``reason`` what was wrong. A ``KeyError`` and
    an ``IndexError``, so ``state["missing"]`` and ``view[99]`` behave as a mapping's and
    a sequence's lookups do."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"state path {path!r}: {reason}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class PatchError(SnapvcError, ValueError):
    """A JSON Patch (RFC 6902) that cannot be applied, or is malformed. ``index`` is the
    failed operation's position in the patch (from 0; None for the patch as a whole),
    ``op``, ``path`` and ``source`` (the ``from`` of a move or copy) what it asked,
    ``reason`` what was wrong."""

    def __init__(self, index: int | None, op: str | None, path: str | None, reason: str,
                 source: str | None = None) -> None:
        self.index = index
        self.op = op
        self.path = path
        self.source = source
        self.reason = reason
        if index is None:
            super().__init__(f"patch: {reason}")
        else:
            what = f"{op or '?'} {_pointer(path)}"
            if source is not None:
                what += f" from {_pointer(source)}"
            super().__init__(f"patch operation {index} ({what}): {reason}")


class InvalidCommitError(SnapvcError, TypeError, ValueError):
    """A commit field of the wrong type or value: a message that is not a str, metadata
    that is not a JSON object, a parent that is not a commit id, a time out of range.
    ``field`` names it (``message``, ``metadata``, ``parents``...), ``reason`` says what
    is wrong, ``commit`` is the id of a commit that came built (from another repository,
    in a sync), None for one being created. Both a ``TypeError`` and a ``ValueError``:
    a wrong argument, of either kind, is caught as Python's own errors are."""

    def __init__(self, field: str, reason: str, commit: object = None) -> None:
        self.field = field
        self.reason = reason
        self.commit = commit
        where = f"commit {commit}:" if commit is not None else "commit"
        super().__init__(f"{where} {field} {reason}")


def _pointer(pointer: str | None) -> str:
    """A pointer as a message shows it: the whole document's (empty) one as ``""``."""
    return "?" if pointer is None else pointer or '""'


class GitError(SnapvcError):
    """A git repository that cannot be exported to or imported from (names its path),
    or a git remote that refused or failed a push (names the remote and the refs)."""


class UnsupportedOperationError(SnapvcError, NotImplementedError):
    """An optional ability of a store (a compression dictionary, a refresh, a commit's
    age) that its ``capabilities`` do not declare, called anyway: callers read the
    capabilities first, so this names a caller that did not (and the store)."""


class RequestRefusedError(SnapvcError):
    """A request the web view (``snapvc ui``) refuses: a write to a server started
    read-only (without ``--write``), a write sent by a page of another site, or a request
    for a host name the server does not serve (a page of another site reaching it through
    DNS). The message says which, and what to do."""


class RunnerError(SnapvcError):
    """A ``snapvc.Runner`` that cannot run as asked; ``step`` names the step concerned
    (None when the problem is not one step's). A step's own exception is never wrapped
    in one: it goes on as it was raised."""

    def __init__(self, step: str | None, message: str) -> None:
        self.step = step
        super().__init__(message)


class InvalidStepError(RunnerError, TypeError, ValueError):
    """A step, or a list of steps, that a ``Runner`` refuses: a ``fn`` that is not
    callable, a name that is empty or given twice, a ``next`` that is no step of the
    runner, ``retries`` below 0, no steps at all, or async steps given to ``run()``
    (``arun()`` runs them). Both a ``TypeError`` and a ``ValueError``, as
    ``InvalidArgumentError`` is."""


class StepContractError(RunnerError, TypeError, ValueError):
    """A step that broke the runner's contract while it ran: it returned something else
    than None or a mapping of metrics (an awaitable, under ``run()``), or its route
    returned a name that is no step of the runner. Not retried: it would again."""


class ResumeError(RunnerError, ValueError):
    """A checkpoint a ``Runner`` cannot resume from: its runner metadata is not a
    runner's, or it resumes at a step this runner does not have (the steps changed
    since; ``run(restart=True)`` starts again from the first). ``checkpoint`` is its id."""

    def __init__(self, checkpoint: str | None, step: str | None, message: str) -> None:
        self.checkpoint = checkpoint
        super().__init__(step, message)


class RepositoryError(SnapvcError):
    """A problem with the repository as a whole."""


class RepositoryNotFoundError(RepositoryError, FileNotFoundError):
    """No repository at the given location."""


class RepositoryFolderError(RepositoryNotFoundError):
    """A repository to be created (``init``, ``clone``, a first commit) in a folder that
    does not exist, or is a file: no repository is there, and none can be made."""


class NotARepositoryError(RepositoryError):
    """The location exists but does not hold a snapvc repository."""


class FormatVersionError(RepositoryError):
    """Stored data uses a format version or codec this snapvc does not know."""


class DamagedRowsError(RepositoryError):
    """Rows of a repository's file whose values have the wrong type or size (an id that is
    not 32 bytes, a time stored as text): a hand edit or another tool wrote them.
    ``damaged`` maps each row (a ref name, ``ref@{n}`` for a reflog entry, an object id,
    ``table row n``) to what is wrong with it. A read of many rows reads them all before
    raising, so every damaged one is named at once, and ``readable`` holds what it could
    read (fsck checks those; nothing else uses a partial answer)."""

    def __init__(self, file: str, damaged: dict[str, str], readable: object = None) -> None:
        self.file = file
        self.damaged = damaged
        self.readable = readable
        rows = "; ".join(f"{row}: {what}" for row, what in damaged.items())
        super().__init__(f"{file!r} holds {len(damaged)} damaged row{'s' if len(damaged) != 1 else ''}: {rows}; "
                         f"run 'snapvc fsck'")


class UnsafeGcError(RepositoryError):
    """A gc refused because its grace period is shorter than the backend's safe minimum
    beside concurrent writers (on S3, ``snapvc.backends.s3.GcTiming.min_grace``): objects a
    writer is about to rely on could be swept. ``location`` is the repository,
    ``grace`` and ``minimum`` the periods in seconds. With no other client writing,
    ``gc(force=True)`` (``snapvc gc --force``) runs it anyway."""

    def __init__(self, location: str, grace: float, minimum: float, message: str) -> None:
        self.location = location
        self.grace = grace
        self.minimum = minimum
        super().__init__(message)


class ObjectError(SnapvcError):
    """A problem with one stored object; ``object_id`` names it."""

    def __init__(self, object_id: object, message: str) -> None:
        self.object_id = object_id
        super().__init__(message)


class ObjectNotFoundError(ObjectError, KeyError):
    """An object id that is not in the store."""

    def __init__(self, object_id: object, where: str = "") -> None:
        suffix = f" ({where})" if where else ""
        super().__init__(object_id, f"object {object_id} not found{suffix}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class CorruptObjectError(ObjectError):
    """Stored bytes that do not hash to their id, or cannot be decoded."""

    def __init__(self, object_id: object, reason: str) -> None:
        super().__init__(object_id, f"object {object_id} is corrupt: {reason}")


class RevisionError(SnapvcError, ValueError):
    """A revision expression that cannot be resolved."""


class UnknownRevisionError(RevisionError, KeyError):
    """A rev that names no ref, tag or object."""

    def __str__(self) -> str:
        return str(self.args[0])


class CheckpointNotFoundError(UnknownRevisionError):
    """A thread or session holds no checkpoint with the version, step or id asked for."""


class AmbiguousRevisionError(RevisionError):
    """An object id prefix that matches more than one object."""


class InvalidRevisionError(RevisionError):
    """A rev whose syntax is wrong (e.g. ``main~x``)."""


class RefError(SnapvcError):
    """A problem with a ref; ``ref`` names it."""

    def __init__(self, ref: str, message: str) -> None:
        self.ref = ref
        super().__init__(message)


class InvalidRefNameError(RefError, ValueError):
    """A ref name that git's check-ref-format rules refuse."""

    def __init__(self, ref: str, reason: str) -> None:
        super().__init__(ref, f"invalid ref name {ref!r}: {reason}")


class RefNotFoundError(RefError, KeyError):
    """A ref that does not exist; ``message``, when given, says what needed it."""

    def __init__(self, ref: str, message: str | None = None) -> None:
        super().__init__(ref, message or f"ref {ref!r} does not exist")

    def __str__(self) -> str:
        return str(self.args[0])


class RefExistsError(RefError):
    """Creating a ref that already exists."""

    def __init__(self, ref: str) -> None:
        super().__init__(ref, f"ref {ref!r} already exists")


class RefConflictError(RefError):
    """A compare-and-swap on a ref lost: the ref moved since it was read."""

    def __init__(self, ref: str, expected: object, actual: object) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            ref,
            f"ref {ref!r} moved concurrently: expected {expected}, found {actual}; "
            f"re-read it and retry",
        )


class PushRejectedError(RefError):
    """A push refused: the remote branch holds commits the pushed one does not contain
    (not a fast-forward). Pull (fetch and merge) first, or push with ``force``."""

    def __init__(self, ref: str, remote: str, remote_tip: object, tip: object) -> None:
        self.remote = remote
        self.remote_tip = remote_tip
        self.tip = tip
        super().__init__(
            ref,
            f"push to {remote} refused: {ref!r} there is at {remote_tip}, which {tip} does not contain "
            f"(not a fast-forward); pull first, or push with force",
        )
