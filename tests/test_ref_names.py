"""Ref names follow git's check-ref-format rules, checked against a table and against git itself."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapvc.errors import InvalidRefNameError
from snapvc.refs import (
    branch_ref,
    check_full_ref_name,
    check_ref_name,
    short_name,
    tag_ref,
)

VALID = [
    "HEAD",
    "main",
    "refs/heads/main",
    "refs/heads/feature/x-1",
    "refs/tags/v1.0",
    "refs/heads/a.b",
    "refs/heads/foo./bar",  # only the whole name may not end with '.'
    "refs/heads/a@b",
    "refs/heads/@",  # '@' is refused only as the whole name
    "refs/heads/{x}",
    "refs/heads/x.lockx",
    "refs/heads/lock",
    "refs/heads/ünïcødé",
    "refs/heads/emoji-🙂",
    "refs/heads/a-b_c+d=e,f;g!h'i\"j#k$l%m&n(o)p<q>r|s`",
]

INVALID = [
    ("", "empty"),
    ("@", "'@' alone"),
    ("refs/heads/a..b", "'..'"),
    ("..", "'..'"),
    ("refs/heads/a b", "a space"),
    ("refs/heads/a~1", "'~'"),
    ("refs/heads/a^", "'^'"),
    ("refs/heads/a:b", "':'"),
    ("refs/heads/a?", "'?'"),
    ("refs/heads/a*", "'*'"),
    ("refs/heads/a[b", "'['"),
    ("refs/heads/a\\b", "'\\'"),
    ("refs/heads/a\tb", "control character"),
    ("refs/heads/a\nb", "control character"),
    ("refs/heads/a\x00b", "control character"),
    ("refs/heads/a\x1fb", "control character"),
    ("refs/heads/a\x7fb", "control character"),
    ("refs/heads/.hidden", "starts with '.'"),
    (".hidden", "starts with '.'"),
    ("refs/.heads/x", "starts with '.'"),
    ("refs/heads/x.lock", "ends with '.lock'"),
    ("refs/heads/x.lock/y", "ends with '.lock'"),
    ("x.lock", "ends with '.lock'"),
    ("refs/heads/x/", "ends with '/'"),
    ("/refs/heads/x", "starts with '/'"),
    ("/", "starts with '/'"),
    ("refs//heads", "'//'"),
    ("refs/heads/x.", "ends with '.'"),
    ("main.", "ends with '.'"),
    ("refs/heads/a@{1}", "'@{'"),
    ("@{", "'@{'"),
]


@pytest.mark.parametrize("name", VALID)
def test_valid_names_pass(name: str) -> None:
    assert check_ref_name(name) == name


@pytest.mark.parametrize(("name", "rule"), INVALID)
def test_invalid_names_say_which_rule(name: str, rule: str) -> None:
    with pytest.raises(InvalidRefNameError) as info:
        check_ref_name(name)
    assert rule in str(info.value)
    assert info.value.ref == name


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_table_agrees_with_git() -> None:
    for name, valid in [(n, True) for n in VALID] + [(n, False) for n, _ in INVALID]:
        if "\x00" in name:
            continue  # cannot be passed as an argument
        result = subprocess.run(["git", "check-ref-format", "--allow-onelevel", name], capture_output=True)
        assert (result.returncode == 0) == valid, name


# Names built from the characters and pieces the rules are about, so most examples hit a rule.
_pieces = st.sampled_from(["a", "b", ".", "/", "@", "{", "}", ".lock", "..", "~", "^", ":", "*", "[", "\\", " ", "\t", "\x7f", "é"])


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@settings(max_examples=150, deadline=None)
@given(st.lists(_pieces, min_size=1, max_size=6).map("".join))
def test_random_names_agree_with_git(name: str) -> None:
    result = subprocess.run(["git", "check-ref-format", "--allow-onelevel", name], capture_output=True)
    try:
        check_ref_name(name)
        ours = True
    except InvalidRefNameError:
        ours = False
    assert ours == (result.returncode == 0)


def test_full_names_are_under_refs_or_root_refs() -> None:
    for name in ["HEAD", "ORIG_HEAD", "FETCH_HEAD", "refs/heads/main", "refs/custom/x"]:
        assert check_full_ref_name(name) == name
    for name in ["main", "heads/main", "Head", "refs", "refs/heads/a..b"]:
        with pytest.raises(InvalidRefNameError):
            check_full_ref_name(name)


def test_branch_and_tag_refs() -> None:
    assert branch_ref("main") == "refs/heads/main"
    assert branch_ref("feature/x") == "refs/heads/feature/x"
    assert tag_ref("v1.0") == "refs/tags/v1.0"
    for bad in ["", "a..b", "x.lock", "-x", "HEAD", "a/", "a b", "@{1}"]:
        with pytest.raises(InvalidRefNameError):
            branch_ref(bad)
        with pytest.raises(InvalidRefNameError):
            tag_ref(bad)
    with pytest.raises(InvalidRefNameError, match="refs/heads/a..b"):
        branch_ref("a..b")


def test_short_name() -> None:
    assert short_name("refs/heads/main") == "main"
    assert short_name("refs/heads/feature/x") == "feature/x"
    assert short_name("refs/tags/v1") == "v1"
    assert short_name("refs/remotes/origin/main") == "origin/main"
    assert short_name("refs/notes/x") == "refs/notes/x"
    assert short_name("HEAD") == "HEAD"


def test_not_a_string() -> None:
    with pytest.raises(TypeError):
        check_ref_name(b"refs/heads/main")  # type: ignore[arg-type]


_plain_pieces = st.sampled_from(["a", "Z", "0", "_", "+", "%", "-", ".", "/", ".lock", "..", "@", "x.lock"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_plain_pieces, min_size=1, max_size=8).map("".join))
def test_fast_path_accepts_only_valid_names(name: str) -> None:
    # check_ref_name accepts a name its regex matches without walking the rules: every
    # such name must pass the rules too.
    from snapvc.refs.names import _LOCK, _PLAIN, ref_name_problem

    if _PLAIN.fullmatch(name) is not None and _LOCK not in name:
        assert ref_name_problem(name) is None, name
