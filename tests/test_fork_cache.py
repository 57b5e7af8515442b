"""The first commit on a branch just forked costs the change from its parent, as any
other commit does: the branch starts from a fork of the encode cache that holds the
parent (``EncodeCache.fork``). The two caches share their entries until one would change
an entry in place: it changes a copy of its own, so each keeps describing its own
branch, and what either stores is exactly its state. Work is counted in containers
encoded, never timed."""

from __future__ import annotations

from typing import Any

import pytest

import snapvc
from snapvc.encoding import cache, identity
from snapvc.repository import core
from tests.test_chunking import commit_fails, fresh_tree
from tests.test_commit_shapes import count_encoded


def message(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i} " * 20, "meta": {"tags": [i]}}


def history(n: int) -> dict[str, Any]:
    return {"messages": [message(i) for i in range(n)], "notes": {f"n{i}": f"note {i}" for i in range(40)}}


def step(state: dict[str, Any], i: int, rebuilt: bool) -> dict[str, Any]:
    """One more message: a new state holding a new list (rebuilt), or appended in place."""
    if rebuilt:
        return {**state, "messages": state["messages"] + [message(i)]}
    state["messages"].append(message(i))
    return state


def stored_right(repo: snapvc.Repository, commit: snapvc.Commit, state: dict[str, Any]) -> bool:
    return repo.get_commit(commit.id).tree == fresh_tree(state)


@pytest.mark.parametrize("rebuilt", [False, True], ids=["in place", "rebuilt"])
def test_the_first_commit_on_a_fork_encodes_the_change_only(rebuilt: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = snapvc.open("memory://")
    state = history(300)
    repo.commit(state)
    calls = count_encoded(monkeypatch)
    state = step(state, 300, rebuilt)
    calls[0] = 0
    repo.commit(state)
    ordinary = calls[0]
    repo.branch("fork", at="main")
    forked = step(state, 301, rebuilt)
    calls[0] = 0
    c = repo.commit(forked, branch="fork")
    # The root, the notes (met again) and the new message with its meta, as on main:
    # not the 300 messages before it.
    assert calls[0] == ordinary <= 4, (calls[0], ordinary)
    assert stored_right(repo, c, forked)


def test_a_fork_and_its_parent_each_keep_costing_their_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both branches go on from the fork point with lists rebuilt each step (each taking
    over the list encoded at its path): neither takes over what the other one changed."""
    repo = snapvc.open("memory://")
    base = history(200)
    repo.commit(base)
    repo.branch("fork", at="main")
    calls = count_encoded(monkeypatch)
    states = {"main": base, "fork": base}
    costs = []
    for i in range(5):
        for branch in ("main", "fork"):  # main moves on before the fork's first commit
            states[branch] = step(states[branch], 1000 * len(branch) + i, rebuilt=True)
            calls[0] = 0
            c = repo.commit(states[branch], branch=branch)
            costs.append(calls[0])
            assert stored_right(repo, c, states[branch]), (branch, i)
    assert max(costs) <= 4, costs
    assert repo.checkout("main") == states["main"] and repo.checkout("fork") == states["fork"]


@pytest.mark.parametrize("rebuilt", [False, True], ids=["in place", "rebuilt"])
def test_changes_in_place_after_a_fork_are_stored_on_both_branches(rebuilt: bool) -> None:
    repo = snapvc.open("memory://")
    state = history(100)
    repo.commit(state)
    repo.branch("fork", at="main")
    forked = step(state, 100, rebuilt)
    c = repo.commit(forked, branch="fork")
    assert stored_right(repo, c, forked)
    # An element both lists hold, changed in place, and the forked state's own list.
    state["messages"][7]["meta"]["tags"].append("edited")
    forked["messages"][-1]["content"] = "changed after its commit"
    forked["messages"].insert(3, message(-1))
    for branch, value in (("main", state), ("fork", forked), ("main", state)):
        c = repo.commit(value, branch=branch)
        assert stored_right(repo, c, value), branch
    assert repo.checkout("main") == state and repo.checkout("fork") == forked


def test_a_failed_first_commit_on_a_fork_leaves_both_caches_right() -> None:
    repo = snapvc.open("memory://")
    state = history(80)
    repo.commit(state)
    repo.branch("fork", at="main")
    repo.switch("fork")
    forked = step(state, 80, rebuilt=True)
    commit_fails(repo, forked)  # on HEAD's branch, the fork
    forked["messages"][2]["meta"]["tags"].append("after the failure")
    c = repo.commit(forked, branch="fork")
    assert stored_right(repo, c, forked)
    grown = step(state, 81, rebuilt=True)
    c = repo.commit(grown, branch="main")
    assert stored_right(repo, c, grown)


def said(cache: Any) -> dict[int, Any]:
    """What each entry of ``cache`` says: its object, encoding, elements and their encodings."""
    return {key: (id(e.obj), e.enc, list(e.vals), list(e.entries), list(e.kids)) for key, e in cache.old.items()}


@pytest.mark.parametrize("rebuilt", [False, True], ids=["in place", "rebuilt"])
def test_a_commit_on_a_fork_leaves_what_the_parent_cache_says(rebuilt: bool) -> None:
    """The parent's cache keeps describing the parent's commit, and names nothing the
    fork stored (which its branch may never reach: where a gc sweeps beside writers it
    may delete it)."""
    repo = snapvc.open("memory://")
    state = history(100)
    repo.commit(state)
    main_cache = repo._encode_caches["refs/heads/main"]
    before = said(main_cache)
    repo.branch("fork", at="main")
    forked = step(state, 100, rebuilt)  # a list grown in place or taken over
    notes = forked["notes"] if not rebuilt else dict(forked["notes"])
    notes["n1"] = "changed on the fork"  # a dict re-encoded by its change alone
    forked = {**forked, "notes": notes}
    repo.commit(forked, branch="fork")
    assert repo._encode_caches["refs/heads/main"] is main_cache
    assert said(main_cache) == before


@pytest.mark.parametrize("create_first", [False, True], ids=["forked as used", "all created first"])
def test_every_fork_finds_its_parents_cache_however_many_branches_there_are(
        create_first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """More branches than the caches always kept (``_MAX_BRANCH_CACHES``): each first
    commit on a fork still costs the change, whether the branches were all made before
    the first of them was committed to or each just before its commit, and a fork
    committed to again later still costs its change."""
    repo = snapvc.open("memory://")
    state = history(300)
    repo.commit(state)
    calls = count_encoded(monkeypatch)
    state = step(state, 300, rebuilt=True)
    calls[0] = 0
    repo.commit(state)
    ordinary = calls[0]
    names = [f"fork-{i}" for i in range(3 * core._MAX_BRANCH_CACHES // 2)]
    if create_first:
        for name in names:
            repo.branch(name, at="main")
    costs = []
    forks = {}
    for i, name in enumerate(names):
        if not create_first:
            repo.branch(name, at="main")
        forks[name] = step(state, 1000 + i, rebuilt=True)
        calls[0] = 0
        c = repo.commit(forks[name], branch=name)
        costs.append(calls[0])
        assert stored_right(repo, c, forks[name]), name
    for i, name in enumerate(names):  # each again, oldest first
        forks[name] = step(forks[name], 2000 + i, rebuilt=True)
        calls[0] = 0
        c = repo.commit(forks[name], branch=name)
        costs.append(calls[0])
        assert stored_right(repo, c, forks[name]), name
    assert max(costs) == ordinary <= 4, (costs, ordinary)


def test_past_the_budget_the_least_recently_used_caches_go_not_a_forks_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``_BRANCH_CACHES_BYTES`` only ``_MAX_BRANCH_CACHES`` caches are kept, the
    least recently used going first; a cache a branch was just forked from counts as used."""
    monkeypatch.setattr(core, "_BRANCH_CACHES_BYTES", 0)
    repo = snapvc.open("memory://")
    state = history(300)
    repo.commit(state)
    main_cache = repo._encode_caches["refs/heads/main"]
    calls = count_encoded(monkeypatch)
    state = step(state, 300, rebuilt=True)
    calls[0] = 0
    repo.commit(state)
    ordinary = calls[0]
    for i in range(2 * core._MAX_BRANCH_CACHES):
        repo.branch(f"fork-{i}", at="main")
        forked = step(state, 1000 + i, rebuilt=True)
        calls[0] = 0
        c = repo.commit(forked, branch=f"fork-{i}")
        assert calls[0] == ordinary, (i, calls[0], ordinary)
        assert stored_right(repo, c, forked)
        assert len(repo._encode_caches) <= core._MAX_BRANCH_CACHES
    assert repo._encode_caches["refs/heads/main"] is main_cache
    assert "refs/heads/fork-0" not in repo._encode_caches


def count_version_readers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the readers made for whole runs of dicts' version numbers, those a
    snapshot keeps for its next checks (``DictVersions.reader``)."""
    made = [0]
    reader = identity.DictVersions.reader

    def counting(self: identity.DictVersions, places: Any) -> Any:
        made[0] += len(places) == cache._VERSIONS_AT_ONCE
        return reader(self, places)

    monkeypatch.setattr(identity.DictVersions, "reader", counting)
    return made


def test_the_first_commit_on_a_fork_reads_version_numbers_with_the_readers_made_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork's copy of a long list's entry (``CacheEntry.copy``) keeps the readers of
    its snapshot's version numbers: its first check makes no more of them than a commit
    on the parent does, however long the history."""
    if identity.dict_versions() is None:
        pytest.skip("this interpreter keeps no dict version numbers")
    repo = snapvc.open("memory://")
    state = history(1600)  # 3,200 dicts below the list: three full runs of version places
    repo.commit(state)
    made = count_version_readers(monkeypatch)
    state = step(state, 1600, rebuilt=True)
    repo.commit(state)
    made[0] = 0
    state = step(state, 1601, rebuilt=True)
    repo.commit(state)
    ordinary = made[0]
    repo.branch("fork", at="main")
    forked = step(state, 1602, rebuilt=True)
    made[0] = 0
    c = repo.commit(forked, branch="fork")
    assert made[0] == ordinary == 0, (made[0], ordinary)
    assert stored_right(repo, c, forked)


def test_keeping_a_branchs_cache_weighs_that_cache_only_however_many_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caches' sizes are a running total: a commit on one of many branches (an agent's
    sessions, each a branch) estimates the size of its own cache, not of every cache kept,
    and the total stays the sum of the kept caches' last estimates."""
    repo = snapvc.open("memory://")
    repo.commit({"events": [message(0)]})
    for i in range(1, 40):
        repo.branch(f"session-{i}", at="main")
        repo.commit({"events": [message(i)]}, branch=f"session-{i}")
    assert len(repo._encode_caches) == 40  # (far below the budget: all kept)
    weighed = [0]
    size_bytes = cache.EncodeCache.size_bytes

    def counting(self: cache.EncodeCache) -> int:
        weighed[0] += 1
        return size_bytes(self)

    monkeypatch.setattr(cache.EncodeCache, "size_bytes", counting)
    repo.commit({"events": [message(1), message(2)]}, branch="session-7")
    assert weighed[0] <= 2, weighed[0]
    assert repo._caches_bytes == sum(repo._cache_sizes.values())
    assert set(repo._cache_sizes) == set(repo._encode_caches)
    repo.delete_branch("session-7")
    assert set(repo._cache_sizes) == set(repo._encode_caches)
    assert repo._caches_bytes == sum(repo._cache_sizes.values())


def test_checking_out_many_branches_keeps_the_load_records_of_the_last_few_only() -> None:
    """A load's record holds the state it built until the commit that follows; checking
    out every branch of many (listing an agent's sessions) keeps only the last
    ``_MAX_BRANCH_CACHES`` records, and a branch checked out again is still taught."""
    repo = snapvc.open("memory://")
    repo.commit({"events": [message(0)]})
    names = [f"session-{i}" for i in range(3 * core._MAX_BRANCH_CACHES)]
    for i, name in enumerate(names):
        repo.branch(name, at="main")
        repo.commit({"events": [message(i), message(i + 1)]}, branch=name)
    for name in names:
        repo.checkout(name)
    assert len(repo._loads) == core._MAX_BRANCH_CACHES
    assert set(repo._loads) == {f"refs/heads/{name}" for name in names[-core._MAX_BRANCH_CACHES:]}
    state = repo.checkout(names[0])
    state["events"].append(message(99))
    c = repo.commit(state, branch=names[0])
    assert stored_right(repo, c, state)
