"""Importing git repositories snapvc did not write: every tree either imports every
file, faithfully, or fails with a ``GitError`` naming the commit and the paths at fault
(names that read as one key, list entries with gaps or repeats, links, submodules,
names that are not UTF-8, files that do not decode, trees deeper than a state), and
every trailer, message and author either parses or fails the same way. Nothing is
dropped, and a failed import moves no ref. The repositories are built with the real
``git`` (plumbing: ``hash-object``, ``mktree``, ``commit-tree``), the very deep one
with dulwich."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Union

import pytest
from dulwich.objects import Blob, Tree
from dulwich.objects import Commit as GitCommit
from dulwich.repo import Repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapvc
from snapvc.maintenance.git.layout import escape_key, state_of, unescape_key

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the hostile repositories are built with git")

# A file's content, a (mode, content) pair for links and executables, or a directory.
Spec = dict[bytes, Union[bytes, tuple[int, bytes], "Spec"]]


class Builder:
    """A bare git repository filled through git's plumbing, one object at a time."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        if create:
            self.git("init", "-q", "--bare", str(path), cwd=path.parent)

    def git(self, *args: str, stdin: bytes = b"", cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(["git", *args], cwd=cwd or self.path, input=stdin, capture_output=True, timeout=60,
                              env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(self.path.parent),
                                   **(env or {})})
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr.decode()}"
        return done.stdout.decode().strip()

    def blob(self, data: bytes) -> str:
        return self.git("hash-object", "-w", "--stdin", stdin=data)

    def tree(self, spec: Spec) -> str:
        lines = []
        for name, item in spec.items():
            if isinstance(item, dict):
                mode, kind, sha = "040000", "tree", self.tree(item)
            elif isinstance(item, tuple):
                mode, kind = f"{item[0]:06o}", "blob"
                sha = item[1].decode() if item[0] == 0o160000 else self.blob(item[1])
                kind = "commit" if item[0] == 0o160000 else kind
            else:
                mode, kind, sha = "100644", "blob", self.blob(item)
            lines.append(f"{mode} {kind} {sha}\t".encode() + name + b"\0")
        return self.git("mktree", "-z", "--missing", stdin=b"".join(lines))

    def commit(self, spec: Spec | str, message: bytes = b"a commit\n", parents: tuple[str, ...] = (),
               branch: str | None = "main", when: int = 1_763_900_000, encoding: str | None = None) -> str:
        tree = spec if isinstance(spec, str) else self.tree(spec)
        stamp = {"GIT_AUTHOR_NAME": "Grace", "GIT_AUTHOR_EMAIL": "grace@example.org", "GIT_AUTHOR_DATE": f"{when} +0000",
                 "GIT_COMMITTER_NAME": "Grace", "GIT_COMMITTER_EMAIL": "grace@example.org",
                 "GIT_COMMITTER_DATE": f"{when} +0000"}
        options = ["-c", f"i18n.commitEncoding={encoding}"] if encoding else []
        sha = self.git(*options, "commit-tree", tree, *[a for p in parents for a in ("-p", p)], "-F", "-",
                        stdin=message, env=stamp)
        if branch is not None:
            self.git("update-ref", f"refs/heads/{branch}", sha)
        return sha


@pytest.fixture
def source(tmp_path: Path) -> Builder:
    return Builder(tmp_path / "source.git")


def import_error(source: Builder) -> str:
    """The message of the GitError an import of ``source`` raises; checks that no ref moved."""
    with snapvc.open("memory://") as repo:
        with pytest.raises(snapvc.GitError) as raised:
            repo.import_git(source.path)
        assert repo.branches() == {} and repo.tags() == {}
        return str(raised.value)


def imported(source: Builder, branch: str = "main") -> dict[str, Any]:
    with snapvc.open("memory://") as repo:
        repo.import_git(source.path)
        return repo.checkout(branch)


# -- names -----------------------------------------------------------------------------------


def test_names_that_read_as_one_key_fail_naming_the_commit_and_every_path(source: Builder) -> None:
    sha = source.commit({b"a": b"plain", b"a.json": b"1", b"a.txt": b"text", b"a.bin": b"\x00", b"%61": b"x"})
    message = import_error(source)
    assert f"commit {sha}" in message
    assert "a, a.bin, a.json and a.txt read as one key, 'a'" in message


def test_a_directory_and_a_file_of_one_key_fail(source: Builder) -> None:
    sha = source.commit({b"config": {b"model.json": b'"m"'}, b"config.json": b"{}"})
    message = import_error(source)
    assert f"commit {sha}" in message and "config and config.json read as one key, 'config'" in message


def test_an_escaped_name_and_the_name_it_escapes_fail(source: Builder) -> None:
    source.commit({b"run": {b"gpt-4.1": b"a", b"gpt-4%2E1": b"b"}})
    assert "run/gpt-4%2E1 and run/gpt-4.1 read as one key, 'gpt-4.1'" in import_error(source)


def test_names_escaping_would_not_make_are_keys_as_they_are(source: Builder) -> None:
    source.commit({b"%61.json": b"1", b"a.json": b"2", b"50%off": b"sale", b"a%2eb.json": b"3", b".json": b"4",
                   b".gitignore": b"*.tmp\n", b"run.sh": (0o100755, b"#!/bin/sh\n"), b"%.json": b"5"})
    assert imported(source) == {"%61": 1, "a": 2, "50%off": "sale", "a%2eb": 3, ".json": "4", ".gitignore": "*.tmp\n",
                                "run.sh": "#!/bin/sh\n", "": 5}


def test_a_name_that_is_not_utf8_fails(source: Builder) -> None:
    sha = source.commit({b"notes": {b"caf\xe9.txt": b"latin-1 name"}})
    message = import_error(source)
    assert f"commit {sha}" in message and "notes/b'caf\\xe9.txt' is not UTF-8" in message


# -- lists -----------------------------------------------------------------------------------


def test_list_entries_with_a_gap_fail_naming_the_missing_index(source: Builder) -> None:
    sha = source.commit({b"messages": {b"#000000.json": b'"hi"', b"#000002.json": b'"bye"'}})
    message = import_error(source)
    assert f"commit {sha}" in message and "the list messages has 2 entries numbered up to #2: #1 missing" in message


@pytest.mark.parametrize("names", [(b"#1", b"#1.json"), (b"#1.txt", b"#01.bin"), (b"#1", b"#000001")])
def test_one_list_index_twice_fails_naming_both(source: Builder, names: tuple[bytes, bytes]) -> None:
    source.commit({b"steps": {b"#0.json": b"0", names[0]: b"1", names[1]: b"2"}})
    shown = " and ".join(sorted(f"steps/{n.decode()}" for n in names))
    assert f"{shown} are the same entry of the list steps" in import_error(source)


def test_list_entries_of_any_width_come_in_numeric_order(source: Builder) -> None:
    source.commit({b"xs": {f"#{i}.json".encode(): str(i).encode() for i in range(12)}})
    assert imported(source) == {"xs": list(range(12))}


def test_a_numbered_file_of_another_extension_makes_a_dict(source: Builder) -> None:
    source.commit({b"d": {b"#0.json": b"0", b"#1.md": b"# one\n"}})
    assert imported(source) == {"d": {"#0": 0, "#1.md": "# one\n"}}


def test_a_root_of_list_entries_fails(source: Builder) -> None:
    source.commit({b"#0.json": b"1"})
    assert "the root tree holds only list entries" in import_error(source)


# -- what is no file --------------------------------------------------------------------------


def test_a_symbolic_link_fails_naming_it_and_its_target(source: Builder) -> None:
    sha = source.commit({b"config": {b"current.json": (0o120000, b"../v2.json")}, b"v2.json": b"2"})
    message = import_error(source)
    assert f"commit {sha}" in message and "config/current.json is a symbolic link (to '../v2.json')" in message


def test_a_submodule_fails_naming_it(source: Builder) -> None:
    other = Builder(source.path.parent / "other.git").commit({b"x.json": b"1"})
    source.commit({b"vendor": (0o160000, other.encode())})
    assert f"vendor is a submodule (commit {other})" in import_error(source)


# -- file contents ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "data", "says"), [
    (b"today.txt", b"caf\xe9\n", "notes/today.txt is not UTF-8 text (byte 3"),
    (b"plan.json", b"{\"step\": ", "notes/plan.json is not JSON"),
    (b"plan.json", b'{"step": 1, "step": 2}', "notes/plan.json holds the key 'step' twice in one object"),
    (b"plan.json", b'{"$snapvc": "bytes", "base64": "%%%"}', "notes/plan.json does not hold a value snapvc can read"),
    (b"plan.json", b'{"$snapvc": "typed", "type": "no.such.Type", "fields": {}}', "notes/plan.json does not hold"),
    (b"deep.json", b"[" * 600 + b"]" * 600, "notes/deep.json nests 600 levels deep"),
])
def test_a_file_that_does_not_decode_fails_naming_the_commit_and_file(source: Builder, name: bytes, data: bytes,
                                                                      says: str) -> None:
    sha = source.commit({b"notes": {name: data, b"other.json": b"1"}})
    message = import_error(source)
    assert f"commit {sha}" in message and says in message


def test_json_values_snapvc_wrote_still_read_back(source: Builder) -> None:
    value = {"pair": (1, (2.5, b"\x00")), "$snapvc": "a key of its own", "nan": float("inf")}
    source.commit({b"v.json": json.dumps(snapvc.to_jsonable(value)).encode()})
    assert imported(source) == {"v": value}


# -- depth ------------------------------------------------------------------------------------


def test_a_tree_5000_directories_deep_fails_without_recursing(tmp_path: Path) -> None:
    path = tmp_path / "deep.git"
    with Repo.init_bare(str(path), mkdir=True) as git_repo:
        objects: list[Any] = [Blob.from_string(b"1")]
        tree = Tree()
        tree.add(b"leaf.json", 0o100644, objects[0].id)
        objects.append(tree)
        for _ in range(5000):
            tree = Tree()
            tree.add(b"d", 0o040000, objects[-1].id)
            objects.append(tree)
        commit = GitCommit()
        commit.tree, commit.message = objects[-1].id, b"deep\n"
        commit.author = commit.committer = b"Grace <grace@example.org>"
        commit.author_time = commit.commit_time = 1_763_900_000
        commit.author_timezone = commit.commit_timezone = 0
        objects.append(commit)
        git_repo.object_store.add_objects([(obj, None) for obj in objects])
        git_repo.refs[b"refs/heads/main"] = commit.id
    with snapvc.open("memory://") as repo, pytest.raises(snapvc.GitError) as raised:
        repo.import_git(path)
    assert f"commit {commit.id.decode()}" in str(raised.value)
    assert "d/d/d/…/d/d/d is 100 directories deep; a state nests at most 100 containers" in str(raised.value)


def test_a_tree_as_deep_as_a_state_may_be_imports(source: Builder) -> None:
    spec: Spec = {b"leaf.json": b"1"}
    for _ in range(99):  # the root and 99 directories: 100 containers
        spec = {b"d": spec}
    source.commit(source.tree(spec))
    state: Any = imported(source)
    for _ in range(99):
        state = state["d"]
    assert state == {"leaf": 1}


def test_json_nesting_past_a_state_below_directories_fails_naming_the_commit(source: Builder) -> None:
    spec: Spec = {b"deep.json": b"[" * 50 + b"]" * 50}
    for _ in range(60):
        spec = {b"d": spec}
    sha = source.commit(source.tree(spec))
    message = import_error(source)
    assert f"commit {sha}: its files hold a value a state cannot" in message
    assert "nested deeper than 100 containers" in message


# -- commits: trailers, texts, times ----------------------------------------------------------

_ID = "5" * 64


@pytest.mark.parametrize(("trailers", "says"), [
    (f"Snapvc-Time: 1.99999999999\nSnapvc-Commit: {_ID}", "the trailer Snapvc-Time: '1.99999999999' is not"),
    (f"Snapvc-Time: 1763900000.5\nSnapvc-Commit: {_ID}", "the trailer Snapvc-Time: '1763900000.5' is not"),
    (f"Snapvc-Metadata: {{step: 1}}\nSnapvc-Commit: {_ID}", "the trailer Snapvc-Metadata is not JSON"),
    (f"Snapvc-Metadata: [1, 2]\nSnapvc-Commit: {_ID}", "the trailer Snapvc-Metadata holds a list, not a JSON object"),
    (f"Snapvc-Author: grace\nSnapvc-Commit: {_ID}", "the trailer Snapvc-Author is not JSON"),
    (f"Snapvc-Author: 7\nSnapvc-Commit: {_ID}", "the trailer Snapvc-Author holds an int, not a JSON string"),
    ("Snapvc-Commit: 5ac52ee0", "the trailer Snapvc-Commit: '5ac52ee0' is not a snapvc commit id"),
    (f"Signed-off-by: Grace\nSnapvc-Commit: {_ID}", "the line 'Signed-off-by: Grace' among its Snapvc trailers"),
    (f"Snapvc-Metadata: {{}}\nSnapvc-Metadata: {{}}\nSnapvc-Commit: {_ID}", "the trailer Snapvc-Metadata appears twice"),
])
def test_a_trailer_that_does_not_parse_fails_naming_the_commit(source: Builder, trailers: str, says: str) -> None:
    sha = source.commit({b"a.json": b"1"}, message=f"step 1\n\n{trailers}\n".encode())
    message = import_error(source)
    assert f"commit {sha}" in message and says in message


def test_trailers_after_ours_are_kept_in_the_message(source: Builder) -> None:
    text = f"step 1\n\nSnapvc-Commit: {_ID}\nSigned-off-by: Grace"
    source.commit({b"a.json": b"1"}, message=(text + "\n").encode())
    with snapvc.open("memory://") as repo:
        repo.import_git(source.path)
        assert repo.get_commit(repo.resolve("main")).message == text


def test_metadata_with_line_separators_round_trips(tmp_path: Path) -> None:
    with snapvc.open("memory://") as repo:
        made = repo.commit({"a": 1}, message="step", metadata={"note": "one\u2028two\x1cthree\x85four"})
        repo.export_git(tmp_path / "out.git")
    with snapvc.open("memory://") as back:
        assert back.import_git(tmp_path / "out.git").inexact == []
        assert back.get_commit(made.id) == made


def test_a_message_in_the_encoding_its_header_names_is_read_as_text(source: Builder) -> None:
    source.commit({b"a.json": b"1"}, message="café\n".encode("latin-1"), encoding="ISO-8859-1")
    with snapvc.open("memory://") as repo:
        repo.import_git(source.path)
        assert repo.get_commit(repo.resolve("main")).message == "café"


def test_a_message_that_is_not_in_its_encoding_fails(source: Builder) -> None:
    # git commit-tree would re-encode the text as UTF-8: dulwich writes the bytes as they are
    with Repo(str(source.path)) as git_repo:
        commit = GitCommit()
        commit.tree, commit.message = source.tree({b"a.json": b"1"}).encode(), "café\n".encode("latin-1")
        commit.author = commit.committer = b"Grace <grace@example.org>"
        commit.author_time = commit.commit_time = 1_763_900_000
        commit.author_timezone = commit.commit_timezone = 0
        git_repo.object_store.add_object(commit)
        git_repo.refs[b"refs/heads/main"] = commit.id
    sha = commit.id.decode()
    message = import_error(source)
    assert f"commit {sha}" in message and "its message is not UTF-8 text (byte 3" in message


def test_a_date_changed_in_git_wins_over_the_trailer_and_is_reported(tmp_path: Path) -> None:
    with snapvc.open("memory://") as repo:
        made = repo.commit({"a": 1}, message="step", date=snapvc_time(1_763_900_000, 250_000))
        repo.export_git(tmp_path / "out.git")
    out = Builder(tmp_path / "out.git", create=False)
    original = out.git("cat-file", "commit", "main")
    assert "Snapvc-Time: 1763900000.250000" in original
    # the same tree and message, trailers and all, at another date (as an amended date is)
    sha = out.commit(out.git("rev-parse", "main^{tree}"), message=original.split("\n\n", 1)[1].encode() + b"\n",
                     when=1_763_999_999)
    with snapvc.open("memory://") as back:
        result = back.import_git(tmp_path / "out.git")
        assert result.inexact == [sha]
        rebuilt = back.get_commit(back.resolve("main"))
        assert rebuilt.id != made.id and rebuilt.time == snapvc_time(1_763_999_999, 0)


def snapvc_time(seconds: int, micros: int) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)


# -- history and refs -------------------------------------------------------------------------


def test_a_shallow_clone_fails_naming_the_missing_parent(source: Builder, tmp_path: Path) -> None:
    first = source.commit({b"a.json": b"1"})
    second = source.commit({b"a.json": b"2"}, parents=(first,))
    clone = tmp_path / "shallow.git"
    source.git("clone", "-q", "--bare", "--depth", "1", "--branch", "main", f"file://{source.path}", str(clone),
               cwd=tmp_path)
    with snapvc.open("memory://") as repo, pytest.raises(snapvc.GitError) as raised:
        repo.import_git(clone)
    assert f"commit {second}: its parent {first} is missing" in str(raised.value)
    assert "shallow clone" in str(raised.value)


def test_a_tag_of_a_blob_fails_naming_it(source: Builder) -> None:
    source.commit({b"a.json": b"1"})
    blob = source.blob(b"a key\n")
    source.git("update-ref", "refs/tags/pubkey", blob)
    assert f"refs/tags/pubkey names blob {blob}, not a commit" in import_error(source)
    with snapvc.open("memory://") as repo:  # the branches alone import
        repo.import_git(source.path, ["main"])
        assert repo.checkout("main") == {"a": 1}


def test_a_failing_commit_moves_no_ref_of_the_repository(source: Builder) -> None:
    good = source.commit({b"a.json": b"1"})
    source.commit({b"a.json": b"2", b"a.txt": b"two"}, parents=(good,))
    with snapvc.open("memory://") as repo:
        before = repo.commit({"mine": True}, message="mine")
        with pytest.raises(snapvc.GitError, match="a.json and a.txt read as one key"):
            repo.import_git(source.path)
        assert repo.branches() == {"main": before.id}


# -- every file or an error, for any names -----------------------------------------------------

_PIECES = ["a", "b", "%", "%61", "%2E", "%2e", "%23", ".", "#", "0", "1", "01", ".json", ".txt", ".bin", ".md"]


def _content(name: str) -> tuple[bytes, Any]:
    """What a file named ``name`` holds, and the value it reads as: its name, whatever
    the extension."""
    if name.endswith(".json") and name != ".json":
        return json.dumps(name).encode(), name
    if name.endswith(".bin") and name != ".bin":
        return name.encode(), name.encode()
    return name.encode(), name


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sets(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4).map("".join), min_size=1, max_size=6))
def test_any_names_import_every_file_or_fail_naming_them(names: set[str]) -> None:
    names = {n for n in names if n not in (".", "..")}  # git trees hold neither
    objects: dict[bytes, Any] = {}
    tree = Tree()
    for name in names:
        blob = Blob.from_string(_content(name)[0])
        objects[blob.id] = blob
        tree.add(name.encode(), 0o100644, blob.id)
    root = Tree()  # one level down, so that the files may make a list too
    root.add(b"d", 0o040000, tree.id)
    objects.update({tree.id: tree, root.id: root})
    try:
        state = state_of(root.id, objects.__getitem__, where="commit c0ffee")
    except snapvc.GitError as exc:
        text = str(exc).removeprefix("commit c0ffee: ")
        assert text != str(exc)
        clashing = re.findall(r"(?:^|; )(.+?) (?:read as one key|are the same entry)", text)
        assert clashing or "missing; a list has no gaps" in text, text
        for group in clashing:
            assert set(group.replace(" and ", ", ").split(", ")) <= {f"d/{n}" for n in names}
        return
    values = state["d"].values() if isinstance(state["d"], dict) else state["d"]
    assert sorted(map(repr, values)) == sorted(repr(_content(n)[1]) for n in names)  # every file, once


def test_unescaping_reverses_escaping_and_leaves_every_other_name() -> None:
    for key in ("plan", "a.b", "", "50%", "#1", ".git", "ünï/cøde", "\x00"):
        assert unescape_key(escape_key(key)) == key
    for name in ("%61", "a%2eb", "50%off", "%C3", "%2", "a.b", "%25%61"):
        assert unescape_key(name) == name
