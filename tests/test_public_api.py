"""The public face of snapvc is explicit: ``__all__`` lists it, and this test guards it.

Adding a name is fine (add it here too); removing or renaming one breaks users.
"""

from __future__ import annotations

import inspect

import snapvc
import snapvc.errors

PUBLIC = {
    "open", "Repository", "Commit", "Change", "KeyChanges", "key_changes", "HistoryEntry", "ObjectId", "RepoStats", "BranchStats",
    "import_git", "ExportResult", "ImportResult", "GitError", "UnsupportedOperationError", "RequestRefusedError", "Keep",
    "GcReport", "FsckReport", "ReflogEntry",
    "MapView", "SeqView",
    "State", "Checkpoint", "register_type", "to_jsonable", "from_jsonable", "__version__",
    "Thread", "Session", "thread_branch", "parse_thread_branch", "CheckpointNotFoundError", "Runner", "Step", "END",
    "aio",
    "merge_values", "Conflict", "MergeResult", "ABSENT",
    "apply_changes", "apply_patch", "to_json_patch", "diff_stat", "DiffStat", "PatchError", "InvalidCommitError",
    "SnapvcError", "InvalidArgumentError", "InvalidObjectIdError", "MalformedJsonError", "RunnerError", "InvalidStepError",
    "StepContractError", "ResumeError",
    "UnsupportedValueError", "UnknownTypeError", "NumpyMissingError", "ExtraMissingError", "PathError", "RepositoryError", "RepositoryNotFoundError",
    "RepositoryFolderError",
    "NotARepositoryError", "FormatVersionError", "DamagedRowsError", "UnsafeGcError", "TypeAdapterError", "ObjectError", "ObjectNotFoundError",
    "CorruptObjectError",
    "RevisionError", "UnknownRevisionError", "AmbiguousRevisionError", "InvalidRevisionError", "RefError",
    "InvalidRefNameError", "RefNotFoundError", "RefExistsError", "RefConflictError",
    "clone", "Remote", "PushResult", "FetchResult", "PullResult", "TransferStats", "PushRejectedError",
}

REPOSITORY_METHODS = {
    "commit", "checkout", "snapshot", "branch", "branches", "tag", "tags", "delete_branch", "delete_tag", "reset",
    "switch", "reflog", "log", "history", "diff", "resolve", "get_commit", "stats", "close", "state",
    "merge", "merge_base", "revert", "cherry_pick",
    "branch_stats", "commit_tree", "gc", "fsck", "export_git", "import_git", "versions", "thread", "threads", "session", "delete_thread",
    "checkpoint", "durability", "deferred",
    "push", "pull", "fetch", "add_remote", "remotes",
}

STATE_METHODS = {
    "get", "set", "delete", "update", "snapshot", "restore", "reset", "fork", "rollback_on_error", "checkpoint",
    "checkpoints", "base", "branch", "repo", "versions", "history", "diff", "metadata",
}


def test_all_is_the_public_face() -> None:
    assert set(snapvc.__all__) == PUBLIC
    for name in snapvc.__all__:
        assert hasattr(snapvc, name), name


def test_repository_methods() -> None:
    public = {name for name, _ in inspect.getmembers(snapvc.Repository) if not name.startswith("_")}
    assert REPOSITORY_METHODS <= public


def test_state_methods() -> None:
    public = {name for name, _ in inspect.getmembers(snapvc.State) if not name.startswith("_")}
    assert STATE_METHODS - {"branch", "repo", "metadata"} <= public
    state = snapvc.open("memory://").state()
    assert {"branch", "repo", "metadata"} <= set(dir(state))


def test_every_error_is_in_one_tree() -> None:
    for name in snapvc.errors.__all__:
        cls = getattr(snapvc.errors, name)
        assert issubclass(cls, snapvc.SnapvcError), name
        assert getattr(snapvc, name) is cls
        assert name in snapvc.errors.__doc__, f"{name} is missing from the tree drawn in snapvc/errors.py"


def test_package_is_typed() -> None:
    from importlib.resources import files

    assert files("snapvc").joinpath("py.typed").is_file()


def test_a_closed_repository_says_so() -> None:
    repo = snapvc.open("memory://")
    repo.commit({"a": 1})
    repo.close()
    repo.close()  # closing twice is fine
    for use in (lambda: repo.commit({"a": 2}), lambda: repo.checkout(), lambda: list(repo.log())):
        try:
            use()
        except snapvc.RepositoryError as exc:
            assert "closed" in str(exc)
        else:
            raise AssertionError("a closed repository was used without an error")


SAVER_METHODS = {
    "put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs", "copy_thread", "prune",
    "aput", "aput_writes", "aget_tuple", "alist", "adelete_thread", "adelete_for_runs", "acopy_thread", "aprune",
    "from_conn_string", "close",
}


def test_the_langgraph_saver_is_the_integration_s_public_face() -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    import snapvc.integrations.langgraph as integration

    assert integration.__all__ == ["SnapvcSaver"]
    saver = integration.SnapvcSaver
    assert issubclass(saver, BaseCheckpointSaver)
    assert SAVER_METHODS <= {name for name, _ in inspect.getmembers(saver) if not name.startswith("_")}
    for name in SAVER_METHODS - {"from_conn_string", "close"}:  # overridden, not BaseCheckpointSaver's stubs
        assert getattr(saver, name) is not getattr(BaseCheckpointSaver, name), name
