"""Sync between repositories (``snapvc.maintenance.sync``): push, fetch, pull, clone, remotes — between
embedded files, memory and S3 (a real SeaweedFS, tests/conftest.py), and the commands."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import snapvc
import snapvc.maintenance.sync
from snapvc.backends.open import open_backend
from snapvc.cli.main import cli
from snapvc.errors import PushRejectedError, RefConflictError, RepositoryError
from snapvc.maintenance.graph import read_children
from snapvc.store.codec import CODEC_RAW, CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT, frame_base
from snapvc.store.faulty import FaultyStore


def words(rnd: random.Random, n: int) -> str:
    vocabulary = ["agent", "tool", "search", "result", "plan", "source", "claim", "evidence", "draft", "review",
                  "the", "of", "and", "a", "to", "in", "is", "that", "for", "with"]
    return " ".join(rnd.choice(vocabulary) for _ in range(n))


def agent_run(repo: snapvc.Repository, steps: int, *, branch: str = "main", start: int = 0, seed: int = 0,
              state: dict[str, Any] | None = None) -> dict[str, Any]:
    """``steps`` checkpoints of a growing agent state: messages, a scratchpad, a long document."""
    rnd = random.Random(seed)
    state = state if state is not None else {"messages": [], "scratchpad": {}, "doc": ""}
    for step in range(start, start + steps):
        state["messages"].append({"role": "assistant", "content": f"step {step}: " + words(rnd, 80)})
        state["scratchpad"]["plan"] = words(rnd, 10)
        state["doc"] += f"\n\nsection {step}\n" + words(rnd, 120)
        repo.commit(state, branch=branch, message=f"step {step}", metadata={"step": step})
    return state


def library_run(repo: snapvc.Repository, steps: int, *, seed: int = 0, branch: str = "main") -> dict[str, Any]:
    """A first commit of ~400 KB of documents (enough to train the repository's zstd
    dictionary), then an agent run on top."""
    rnd = random.Random(seed + 1000)
    state = {"messages": [], "scratchpad": {}, "doc": "",
             "library": {f"doc-{i}": words(rnd, 800) for i in range(80)}}
    return agent_run(repo, steps, seed=seed, state=state, branch=branch)


def commit_ids(repo: snapvc.Repository, rev: str = "main") -> list[snapvc.ObjectId]:
    return [c.id for c in repo.log(rev)]


@pytest.fixture
def local(tmp_path: Path) -> snapvc.Repository:
    with snapvc.open(tmp_path / "local.snapvc") as repo:
        yield repo


@pytest.fixture
def local2(tmp_path: Path) -> snapvc.Repository:
    """A format 2 file: one frame a row, with deltas and a dictionary (what frames that
    travel as stored are about)."""
    with snapvc.open(tmp_path / "local2.snapvc", format=2) as repo:
        yield repo


def codecs_of(repo: snapvc.Repository) -> set[int]:
    """The codec of every frame the repository's store hands out as stored."""
    ids = list(repo.backend.objects.iter_ids())
    return {frame[0] for frame in repo.backend.objects.get_many(ids).values()}


def large_raw_frames(repo: snapvc.Repository) -> int:
    """How many frames over 1 KB are raw: none in a store that keeps frames compressed one
    by one (the states here are text, which zstd always shrinks; small objects may be
    left raw there, where compressing them would not pay)."""
    ids = list(repo.backend.objects.iter_ids())
    return sum(frame[0] == CODEC_RAW and len(frame) > 1024 for frame in repo.backend.objects.get_many(ids).values())


def test_push_sends_only_what_the_remote_lacks(local: snapvc.Repository, tmp_path: Path) -> None:
    state = agent_run(local, 30)
    local.add_remote("origin", str(tmp_path / "remote.snapvc"))
    snapvc.open(tmp_path / "remote.snapvc").close()

    first = local.push("origin", "main")
    assert first.old is None and first.new == local.resolve("main") and not first.forced
    assert first.transfer.commits == 30 and first.transfer.objects > 30
    assert local.refs.get("refs/remotes/origin/main") == local.resolve("main")

    with snapvc.open(tmp_path / "remote.snapvc", create=False) as remote:
        held = set(remote.backend.objects.iter_ids())
    agent_run(local, 3, start=30, state=state)
    second = local.push("origin")
    assert second.transfer.commits == 3
    assert second.transfer.objects < first.transfer.objects / 5  # the unchanged subtrees stay home
    with snapvc.open(tmp_path / "remote.snapvc", create=False) as remote:
        assert second.transfer.objects == len(set(remote.backend.objects.iter_ids()) - held)  # nothing sent twice
    assert local.push("origin").up_to_date

    with snapvc.open(tmp_path / "remote.snapvc", create=False) as remote:
        assert commit_ids(remote) == commit_ids(local)
        assert remote.checkout("main") == state
        assert remote.fsck().ok
        assert [e.reason for e in remote.reflog("main")][0].startswith("push: from")


def test_frames_travel_as_stored_and_dictionaries_with_them(local2: snapvc.Repository, tmp_path: Path) -> None:
    local = local2  # format 2 at both ends: only there are frames compressed one by one
    library_run(local, 30)
    assert local.backend.objects.dictionaries()
    clone = snapvc.clone(str(local.location), str(tmp_path / "clone.snapvc"), format=2)
    with clone:
        assert clone.backend.objects.dictionaries() == local.backend.objects.dictionaries()
        ids = list(local.backend.objects.iter_ids())
        mine, theirs = local.backend.objects.get_many(ids), clone.backend.objects.get_many(ids)
        assert mine == theirs  # the same frames: deltas and dictionary frames unchanged
        codecs = {frame[0] for frame in theirs.values()}
        assert {CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT} <= codecs
        assert clone.stats().stored_bytes == local.stats().stored_bytes
        assert clone.fsck().ok


def test_frames_of_a_dictionary_the_destination_lacks_are_reframed(local2: snapvc.Repository, tmp_path: Path) -> None:
    local = local2  # format 2 at both ends: dictionaries exist only there
    library_run(local, 10)
    other = snapvc.open(tmp_path / "other.snapvc", format=2)
    library_run(other, 10, seed=7, branch="theirs")  # trains a dictionary of its own, number 1 too
    assert other.backend.objects.dictionaries()[1] != local.backend.objects.dictionaries()[1]
    result = local.push(other, "main")
    assert result.transfer.reframed > 0 and result.transfer.dictionaries == 0
    assert other.checkout("main") == local.checkout("main")
    reopened = snapvc.open(tmp_path / "other.snapvc", create=False)
    assert reopened.checkout("main") == local.checkout("main") and reopened.fsck().ok
    reopened.close()
    other.close()


def test_a_clone_from_format_2_to_format_3_holds_only_raw_frames_in_packs(local2: snapvc.Repository,
                                                                          tmp_path: Path) -> None:
    state = library_run(local2, 20)
    assert {CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT} <= codecs_of(local2)
    with snapvc.clone(str(local2.location), str(tmp_path / "three.snapvc")) as three:
        assert three.backend.objects.capabilities.compresses and not three.backend.objects.capabilities.dictionaries
        assert codecs_of(three) == {CODEC_RAW}
        assert set(three.backend.objects.iter_ids()) == set(local2.backend.objects.iter_ids())
        packs = three.backend.file.conn.execute("SELECT count(*) FROM packs").fetchone()[0]
        tables = {r[0] for r in three.backend.file.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert packs > 0 and "objects" not in tables
        assert three.checkout("main") == state and three.fsck().ok
        state = agent_run(three, 2, start=20, state=state)
        pushed = three.push(local2, "main")  # and back: format 2 receives compressed frames
        assert pushed.transfer.commits == 2 and pushed.transfer.reframed == pushed.transfer.objects > 0
    assert large_raw_frames(local2) == 0
    assert local2.checkout("main") == state and local2.fsck().ok


def test_a_clone_from_format_3_to_format_2_holds_compressed_frames(local: snapvc.Repository, tmp_path: Path) -> None:
    state = library_run(local, 20)
    assert codecs_of(local) == {CODEC_RAW}
    with snapvc.clone(str(local.location), str(tmp_path / "two.snapvc"), format=2) as two:
        assert large_raw_frames(two) == 0 and codecs_of(two) & {CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT}
        assert two.checkout("main") == state and two.fsck().ok
        state = agent_run(two, 2, start=20, state=state)
        two.push(local, "main")  # and back: format 3 receives raw frames
    assert codecs_of(local) == {CODEC_RAW}
    assert local.checkout("main") == state and local.fsck().ok


def test_a_push_that_is_not_a_fast_forward_is_refused_unless_forced(local: snapvc.Repository) -> None:
    remote = snapvc.open("memory://")
    agent_run(local, 5)
    local.push(remote, "main")
    agent_run(remote, 2, start=100, seed=1, state=remote.checkout("main"))  # someone else pushed meanwhile
    remote_tip = remote.resolve("main")
    agent_run(local, 1, start=5, seed=2, state=local.checkout("main"))
    with pytest.raises(PushRejectedError) as info:
        local.push(remote, "main")
    assert info.value.ref == "refs/heads/main" and info.value.remote_tip == remote_tip
    assert "not a fast-forward" in str(info.value) and remote.resolve("main") == remote_tip

    forced = local.push(remote, "main", force=True)
    assert forced.forced and remote.resolve("main") == local.resolve("main")
    assert remote.resolve("main@{1}") == remote_tip  # the reflog keeps what the force replaced


def test_pull_fast_forwards_merges_and_creates(local: snapvc.Repository, tmp_path: Path) -> None:
    shared = tmp_path / "shared.snapvc"
    with snapvc.open(shared) as hub:
        agent_run(hub, 4)
    local.add_remote("hub", str(shared))
    created = local.pull("hub", "main")
    assert created.created and local.resolve("main") == local.resolve("refs/remotes/hub/main")

    with snapvc.open(shared, create=False) as hub:
        hub.commit({**hub.checkout("main"), "from_hub": 1}, message="hub step")
    ff = local.pull("hub", "main")
    assert ff.merge is not None and ff.merge.fast_forward and local.checkout("main")["from_hub"] == 1

    with snapvc.open(shared, create=False) as hub:
        hub.commit({**hub.checkout("main"), "hub_only": True}, message="hub again")
    local.commit({**local.checkout("main"), "local_only": True}, message="local work")
    merged = local.pull("hub", "main")
    assert merged.ok and merged.merge is not None and merged.merge.commit is not None
    assert len(merged.merge.commit.parents) == 2
    state = local.checkout("main")
    assert state["hub_only"] is True and state["local_only"] is True
    local.push("hub", "main")  # now a fast-forward of the hub
    with snapvc.open(shared, create=False) as hub:
        assert hub.resolve("main") == local.resolve("main") and hub.fsck().ok


def test_pull_with_conflicts_writes_nothing(local: snapvc.Repository) -> None:
    remote = snapvc.open("memory://")
    remote.commit({"plan": "a"})
    local.pull(remote, "main")
    remote.commit({"plan": "b"})
    local.commit({"plan": "c"})
    tip = local.resolve("main")
    result = local.pull(remote, "main")
    assert not result.ok and [str(c.path) for c in result.merge.conflicts]
    assert local.resolve("main") == tip
    assert local.pull(remote, "main", resolve="theirs").ok
    assert local.checkout("main") == {"plan": "b"}


def test_fetch_moves_tracking_refs_only(local: snapvc.Repository, tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "up.snapvc") as up:
        up.commit({"x": 1})
        up.branch("side")
        up.commit({"x": 2}, branch="side")
    local.add_remote("up", str(tmp_path / "up.snapvc"))
    result = local.fetch("up")
    assert set(result.tips) == {"main", "side"}
    assert set(local.refs.list("refs/remotes/")) == {"refs/remotes/up/main", "refs/remotes/up/side"}
    assert local.branches() == {}
    assert local.checkout("refs/remotes/up/side") == {"x": 2}


def test_remotes_are_kept_in_the_repository(tmp_path: Path) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.add_remote("origin", "s3://bucket/agents", endpoint="http://127.0.0.1:8333")
        repo.add_remote("backup", str(tmp_path / "b.snapvc"))
    with snapvc.open(path, create=False) as repo:
        remotes = repo.remotes()
        assert list(remotes) == ["backup", "origin"]
        assert remotes["origin"].location == "s3://bucket/agents"
        assert dict(remotes["origin"].options) == {"endpoint": "http://127.0.0.1:8333"}
        with pytest.raises(snapvc.InvalidRefNameError):
            repo.add_remote("bad name", "x.snapvc")


def test_clone_refuses_a_destination_with_history(local: snapvc.Repository, tmp_path: Path) -> None:
    agent_run(local, 2)
    with snapvc.open(tmp_path / "busy.snapvc") as busy:
        busy.commit({"mine": 1})
    with pytest.raises(RepositoryError, match="holds refs already"):
        snapvc.clone(str(local.location), str(tmp_path / "busy.snapvc"))


def test_a_remote_ref_that_moves_during_the_push_is_a_conflict(local: snapvc.Repository) -> None:
    remote = snapvc.open("memory://")
    agent_run(local, 2)
    local.push(remote, "main")
    agent_run(local, 1, start=2, state=local.checkout("main"))
    cas = remote.refs.compare_and_swap

    def racing(name: str, expected: Any, new: Any, reason: str) -> bool:
        if reason.startswith("push"):  # another writer gets there first
            remote.refs.compare_and_swap = cas  # type: ignore[method-assign]
            remote.commit({"other": True}, message="racer")
        return cas(name, expected, new, reason)

    remote.refs.compare_and_swap = racing  # type: ignore[method-assign]
    with pytest.raises(RefConflictError) as info:
        local.push(remote, "main")
    assert info.value.ref == "refs/heads/main"
    assert remote.checkout("main") == {"other": True}


# -- S3 ------------------------------------------------------------------------------------


def test_push_clone_and_pull_through_s3(local: snapvc.Repository, tmp_path: Path, s3_url: str) -> None:
    state = agent_run(local, 40)
    local.add_remote("cloud", s3_url)
    pushed = local.push("cloud", "main")
    assert pushed.transfer.commits == 40

    with snapvc.open(s3_url, create=False) as cloud:
        requests_before = cloud.backend.s3_stats.copy()
        assert commit_ids(cloud) == commit_ids(local)
        assert cloud.checkout("main") == state
        assert cloud.fsck().ok
        cloud.commit({**state, "cloud": True}, message="committed on S3")
        spent = cloud.backend.s3_stats - requests_before
        assert spent.total_requests > 0 and spent.bytes_received > 0

    clone = snapvc.clone(s3_url, str(tmp_path / "clone.snapvc"))
    with clone:
        assert clone.checkout("main")["cloud"] is True
        assert clone.remotes()["origin"].location == s3_url
        assert clone.fsck().ok

    pulled = local.pull("cloud", "main")
    assert pulled.merge is not None and pulled.merge.fast_forward
    assert local.checkout("main")["cloud"] is True


def test_clone_from_disk_to_s3_and_back_keeps_every_frame(local2: snapvc.Repository, tmp_path: Path,
                                                          s3_url: str) -> None:
    local = local2  # format 2: the same frames as S3 keeps (deltas, dictionary frames), so they travel as stored
    library_run(local, 30)
    local.tag("v1", at="main~10")
    with snapvc.clone(str(local.location), s3_url) as cloud:
        assert cloud.tags() == local.tags()
        assert cloud.backend.objects.dictionaries() == local.backend.objects.dictionaries()
    with snapvc.clone(s3_url, str(tmp_path / "back.snapvc"), format=2) as back:
        ids = list(local.backend.objects.iter_ids())
        assert back.backend.objects.get_many(ids) == local.backend.objects.get_many(ids)
        assert commit_ids(back) == commit_ids(local)
        assert back.fsck().ok


def test_clone_from_format_3_to_s3_and_back_reframes_both_ways(local: snapvc.Repository, tmp_path: Path,
                                                               s3_url: str) -> None:
    state = library_run(local, 20)
    local.tag("v1", at="main~5")
    with snapvc.clone(str(local.location), s3_url) as cloud:
        assert cloud.tags() == local.tags()
        assert large_raw_frames(cloud) == 0  # S3 keeps frames compressed one by one
        assert cloud.checkout("main") == state and cloud.fsck().ok
    with snapvc.clone(s3_url, str(tmp_path / "back.snapvc")) as back:
        assert codecs_of(back) == {CODEC_RAW}  # and the format 3 file raw frames for its packs
        assert set(back.backend.objects.iter_ids()) == set(local.backend.objects.iter_ids())
        assert commit_ids(back) == commit_ids(local) and back.checkout("v1") == local.checkout("v1")
        assert back.fsck().ok


# -- the commands ------------------------------------------------------------------------


def run(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


def test_the_commands(tmp_path: Path) -> None:
    here, there = tmp_path / "here.snapvc", tmp_path / "there.snapvc"
    with snapvc.open(here) as repo:
        agent_run(repo, 3)
    assert run("remote", "add", "origin", str(there), "--repo", str(here)).exit_code == 0
    listed = run("remote", "--repo", str(here), "--json")
    assert json.loads(listed.output) == {"origin": {"location": str(there), "options": {}}}
    snapvc.open(there).close()

    pushed = run("push", "--repo", str(here), "--json")
    assert pushed.exit_code == 0, pushed.output
    assert json.loads(pushed.output)["sent"]["commits"] == 3

    cloned = run("clone", str(there), str(tmp_path / "copy.snapvc"))
    assert cloned.exit_code == 0 and "3 commits" in cloned.output
    with snapvc.open(there, create=False) as repo:
        repo.commit({"new": 1}, message="upstream")
    pulled = run("pull", "--repo", str(tmp_path / "copy.snapvc"), "--json")
    assert pulled.exit_code == 0 and json.loads(pulled.output)["fast_forward"] is True

    with snapvc.open(here, create=False) as repo:
        repo.commit({"diverged": 1}, message="local")
    refused = CliRunner().invoke(cli, ["push", "--repo", str(here)])
    assert refused.exit_code != 0 and isinstance(refused.exception, PushRejectedError)
    forced = run("push", "--force", "--repo", str(here))
    assert forced.exit_code == 0 and "forced" in forced.output


def test_the_commands_on_s3(tmp_path: Path, s3_url: str) -> None:
    here = tmp_path / "here.snapvc"
    with snapvc.open(here) as repo:
        agent_run(repo, 4)
    assert run("remote", "add", "cloud", s3_url, "--repo", str(here)).exit_code == 0
    pushed = run("push", "cloud", "main", "--repo", str(here), "--json")
    assert pushed.exit_code == 0 and json.loads(pushed.output)["sent"]["commits"] == 4
    logged = run("log", "--oneline", "--repo", s3_url)  # a repository on S3 read in place
    assert logged.exit_code == 0 and len(logged.output.splitlines()) == 4
    cloned = run("clone", s3_url, str(tmp_path / "back.snapvc"), "--json")
    assert cloned.exit_code == 0 and json.loads(cloned.output)["commits"] == 4


def test_progress_hears_of_every_object_sent(local: snapvc.Repository) -> None:
    agent_run(local, 10)
    heard: list[tuple[int, int]] = []
    result = local.push(snapvc.open("memory://"), "main", progress=lambda done, total: heard.append((done, total)))
    assert heard[-1] == (result.transfer.objects, result.transfer.objects)
    assert all(done <= total for done, total in heard) and [d for d, _ in heard] == sorted(d for d, _ in heard)


def test_a_push_creates_the_remote_a_fetch_does_not(local: snapvc.Repository, tmp_path: Path) -> None:
    agent_run(local, 2)
    with pytest.raises(snapvc.RepositoryNotFoundError):
        local.fetch(str(tmp_path / "nowhere.snapvc"))
    assert not (tmp_path / "nowhere.snapvc").exists()
    local.push(str(tmp_path / "new.snapvc"), "main")
    with snapvc.open(tmp_path / "new.snapvc", create=False) as created:
        assert created.resolve("main") == local.resolve("main")


def test_s3_to_s3_clone_and_push(local2: snapvc.Repository, s3_bucket: str) -> None:
    local = local2  # format 2: its dictionary is shipped to S3 and on to the second copy
    first, second = f"s3://{s3_bucket}/sync-a-{id(local)}", f"s3://{s3_bucket}/sync-b-{id(local)}"
    state = library_run(local, 12)
    local.push(first, "main")
    with snapvc.clone(first, second) as copy:
        assert copy.checkout("main") == state
        assert copy.backend.objects.dictionaries() == local.backend.objects.dictionaries()
    state = agent_run(local, 3, start=12, state=state)
    local.push(first, "main")
    with snapvc.open(second, create=False) as copy:
        pulled = copy.pull("origin", "main")  # origin is the first repository on S3
        assert pulled.merge is not None and pulled.merge.fast_forward and pulled.fetch.transfer.commits == 3
        assert copy.checkout("main") == state and copy.fsck().ok


def test_commits_sent_are_young_until_a_ref_reaches_them(local: snapvc.Repository, tmp_path: Path) -> None:
    agent_run(local, 3)
    with snapvc.open(tmp_path / "dst.snapvc") as dst:
        snapvc.maintenance.sync.copy_history(local, dst, [local.resolve("main")])  # as a push does before its ref moves
        report = dst.gc(dry_run=True)  # the default grace period: nothing young goes
        assert not report.removed_commits and not report.removed_objects
        assert dst.gc(dry_run=True, grace=0).removed_commits  # without a grace period they would


def test_a_push_after_an_interrupted_one_sends_what_the_first_left_out(local: snapvc.Repository,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    state = library_run(local, 8)
    remote = snapvc.open("memory://")
    monkeypatch.setattr(snapvc.maintenance.sync, "BATCH_BYTES", 1)  # a batch per level of the trees
    put_many = remote.backend.objects.put_many
    calls = 0

    def failing(items: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError("connection reset")
        return put_many(items)

    remote.backend.objects.put_many = failing  # type: ignore[method-assign]
    with pytest.raises(OSError):
        local.push(remote, "main")
    assert remote.refs.get("refs/heads/main") is None
    remote.backend.objects.put_many = put_many  # type: ignore[method-assign]
    local.push(remote, "main")
    assert remote.checkout("main") == state
    assert remote.fsck().ok


def _dangling(repo: snapvc.Repository) -> dict[snapvc.ObjectId, list[snapvc.ObjectId]]:
    """Every object ``repo`` holds that names an object it does not hold (a child, or the
    base of a delta frame), with what it lacks."""
    ids = list(repo.backend.objects.iter_ids())
    held = set(ids)
    frames = repo.backend.objects.get_many(ids)
    canonical = repo.store.get_many(ids)
    lacking = {}
    for oid in ids:
        named = [child for child, _ in read_children(oid, canonical[oid])]
        if frames[oid] and frames[oid][0] == CODEC_ZSTD_DELTA:
            named.append(frame_base(oid, frames[oid]))
        missing = [child for child in named if child not in held]
        if missing:
            lacking[oid] = missing
    return lacking


@pytest.mark.parametrize("fmt", [3, 2])
def test_a_push_interrupted_at_any_write_leaves_no_object_without_its_children(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: int) -> None:
    """Objects are written deepest first, so wherever a push is interrupted the remote
    holds no object whose children (or delta base: format 2) it lacks, and the next push,
    which skips what the remote holds, completes it. Tried at every write of the push."""
    rnd = random.Random(1)
    with snapvc.open(tmp_path / "local.snapvc", format=fmt) as local:
        state = agent_run(local, 3)
        state["table"] = [{"row": i, "text": words(rnd, 400)} for i in range(100)]  # a tree of nodes
        local.commit(state)
        state["table"][5]["text"] += " edited"
        state["doc"] += words(rnd, 2000)
        local.commit(state)
        monkeypatch.setattr(snapvc.maintenance.sync, "BATCH_BYTES", 1)  # a write per object
        n = 0
        while True:
            n += 1
            backend = open_backend("memory://")
            faulty = FaultyStore(backend.objects)
            backend.objects = faulty
            remote = snapvc.Repository(backend)
            faulty.fail_write(n)
            try:
                local.push(remote, "main")
            except OSError:
                pass
            else:
                assert faulty.injected == 0  # the push took fewer than n writes: every one was tried
                break
            assert remote.refs.get("refs/heads/main") is None
            assert _dangling(remote) == {}, f"interrupted at write {n}"
            faulty.heal()
            local.push(remote, "main")
            assert remote.checkout("main") == state, f"interrupted at write {n}"
        assert remote.fsck().ok
        assert n > 90, n


def test_a_delta_frame_travels_with_its_base_when_nothing_sent_reaches_the_base(local2: snapvc.Repository,
                                                                                 tmp_path: Path) -> None:
    """A branch started from a checkout of another holds frames stored as deltas against
    the other branch's objects (format 2). Pushed alone, those bases travel with it, as
    frames the remote holds must be readable there."""
    rnd = random.Random(2)
    draft = local2.commit({"doc": words(rnd, 6000), "notes": {f"n{i}": words(rnd, 300) for i in range(20)}},
                          branch="draft")
    state = local2.checkout(draft.id)  # taught to main's encoder: main's first commit stores deltas
    state["doc"] = state["doc"][:10000] + " an edit " + state["doc"][10000:]
    state["notes"]["n3"] += " edited"
    main = local2.commit(state, message="from the draft")
    assert main.parents == ()  # nothing of the draft reaches main's commits...
    with snapvc.open(tmp_path / "remote.snapvc", format=2) as remote:
        local2.push(remote, "main")
        frames = remote.backend.objects.get_many(list(remote.backend.objects.iter_ids()))
        bases = {frame_base(oid, frame) for oid, frame in frames.items() if frame and frame[0] == CODEC_ZSTD_DELTA}
        assert bases and bases <= frames.keys()  # ... but the frames sent name its objects, and they went too
        assert _dangling(remote) == {}
        assert remote.checkout("main") == state
        assert remote.fsck().ok
    with snapvc.open(tmp_path / "remote.snapvc") as reopened:  # read from the file, not a cache
        assert reopened.checkout("main") == state


def test_a_push_again_after_a_failed_write_that_trained_a_dictionary(local: snapvc.Repository, tmp_path: Path) -> None:
    """Into a format 2 file, the objects a push sends are compressed by the destination,
    which trains its zstd dictionary on the first batch and stores it in that batch's
    transaction. When the write fails, the dictionary is rolled back with the batch: the
    next push through the same handle must not compress with it (its frames would name
    a dictionary that is not stored, and the branch would point at unreadable states)."""
    state = library_run(local, 3)
    path = tmp_path / "remote.snapvc"
    backend = open_backend(str(path), format=2)
    faulty = FaultyStore(backend.objects)
    backend.objects = faulty
    with snapvc.Repository(backend) as remote:
        faulty.fail_write(1)
        with pytest.raises(OSError, match="injected write fault"):
            local.push(remote, "main")
        assert remote.backend.objects.dictionaries() == {}  # rolled back with the batch
        faulty.heal()
        local.push(remote, "main")
    with snapvc.open(path, create=False) as reopened:
        assert reopened.checkout("main") == state
        assert reopened.fsck().ok
