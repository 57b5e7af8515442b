"""gc: what it removes, what it keeps (refs, recent reflog, young objects, delta bases),
retention, dry runs, and writers whose caches name what a sweep deleted."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

import snapvc
from snapvc import Keep
from snapvc.errors import UnknownRevisionError
from snapvc.maintenance.gc import plan_gc, sweep
from snapvc.maintenance.graph import ref_roots
from snapvc.maintenance.stats import format_bytes

HOUR = 3600.0


class Clock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _grow(repo: snapvc.Repository, clock: Clock, steps: int, branch: str = "main", step_seconds: float = 600) -> dict:
    state: dict = {"messages": [], "doc": f"intro to {branch} " * 3000}
    for i in range(steps):
        state["messages"].append({"role": "user", "content": f"message {i} on {branch} " * 40})
        state["doc"] = state["doc"][:2000] + f" edit {i} " + state["doc"][2000:]
        state["step"] = i
        repo.commit(state, branch=branch, message=f"step {i}", metadata={"step": i})
        clock.now += step_seconds
    return state


@pytest.fixture(params=["sqlite", "memory"])
def repo_and_clock(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[snapvc.Repository, Clock]:
    clock = Clock()
    location = str(tmp_path / "gc.snapvc") if request.param == "sqlite" else "memory://"
    repo = snapvc.open(location, clock=clock)
    yield repo, clock
    repo.close()


@pytest.fixture(params=["sqlite", "memory"])
def delta_repo_and_clock(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[snapvc.Repository, Clock]:
    """A store that writes delta frames: a format 2 file (a format 3 file's packs keep
    raw frames, no deltas) or memory."""
    clock = Clock()
    if request.param == "sqlite":
        repo = snapvc.open(tmp_path / "gc.snapvc", clock=clock, format=2)
    else:
        repo = snapvc.open("memory://", clock=clock)
    yield repo, clock
    repo.close()


def packed_ids(repo: snapvc.Repository) -> set[bytes]:
    """Every id listed in a row of a format 3 file's table ``packs``."""
    rows = repo.backend.file.conn.execute("SELECT ids FROM packs").fetchall()
    return {ids[i : i + 32] for (ids,) in rows for i in range(0, len(ids), 32)}


def test_nothing_to_remove_in_a_fresh_history(repo_and_clock: tuple[snapvc.Repository, Clock]) -> None:
    repo, clock = repo_and_clock
    _grow(repo, clock, 10)
    report = repo.gc(grace=0)
    assert report.removed_objects == () and report.removed_commits == () and report.bytes_freed == 0
    assert report.objects_before > 0 and report.commits_before == 10
    assert repo.fsck().ok


def test_a_deleted_branch_is_kept_by_its_reflog_then_removed_with_the_bytes_counted(
        repo_and_clock: tuple[snapvc.Repository, Clock]) -> None:
    repo, clock = repo_and_clock
    final = _grow(repo, clock, 5)
    repo.branch("scratch")
    _grow(repo, clock, 5, branch="scratch")
    scratch_tip = repo.resolve("scratch")
    repo.delete_branch("scratch")
    clock.now += 2 * HOUR
    assert repo.gc(grace=HOUR).removed_commits == ()  # the reflog (30 days) still names it
    clock.now += 31 * 86400
    before = repo.backend.objects.sizes()
    dry = repo.gc(dry_run=True)
    assert len(dry.removed_commits) == 5 and scratch_tip in dry.removed_commits
    assert repo.backend.objects.sizes() == before  # a dry run changes nothing
    report = repo.gc()
    assert set(report.removed_commits) == set(dry.removed_commits)
    assert set(report.removed_objects) == set(dry.removed_objects) and report.bytes_freed == dry.bytes_freed
    after = repo.backend.objects.sizes()
    assert before.objects - after.objects == len(report.removed_objects) > 0
    object_bytes = before.stored_bytes - after.stored_bytes
    assert 0 < object_bytes <= report.bytes_freed  # plus the commits' rows
    assert report.expired_reflog_entries == dry.expired_reflog_entries > 0 and repo.reflog("scratch") == []
    assert repo.checkout("main") == final and repo.fsck().ok
    with pytest.raises(UnknownRevisionError):
        repo.resolve(scratch_tip.hex)


def test_young_unreachable_objects_are_kept_until_the_grace_period_ends(tmp_path: Path) -> None:
    clock = Clock()
    with snapvc.open(tmp_path / "young.snapvc", clock=clock) as repo:
        repo.commit({"a": 1})
        # Another writer's work in progress: stored, no ref yet (as commit_tree leaves it).
        orphan = repo.commit_tree({"draft": "x" * 5000}, parents=[repo.resolve("main")])
        clock.now += 10
        report = repo.gc(grace=HOUR, reflog_expiry=0)
        assert report.removed_commits == () and report.removed_objects == ()
        assert report.kept_young == 0  # the young commit is a root, so its objects are reached
        assert repo.checkout(orphan.id) == {"draft": "x" * 5000}
        checked = repo.fsck()  # nothing reaches it: dangling, which is no problem
        assert checked.ok and checked.dangling_commits == (orphan.id,)
        clock.now += 2 * HOUR
        report = repo.gc(grace=HOUR, reflog_expiry=0)
        assert orphan.id in report.removed_commits and len(report.removed_objects) >= 1
        assert set(report.removed_objects) == set(checked.dangling_objects)
        assert repo.fsck().ok


def test_put_of_an_existing_object_refreshes_its_age(repo_and_clock: tuple[snapvc.Repository, Clock]) -> None:
    repo, clock = repo_and_clock
    repo.commit({"doc": "y" * 5000})
    oid = next(iter(repo.backend.objects.iter_ids()))
    first = repo.backend.objects.mtimes([oid])[oid]
    clock.now += HOUR
    repo.backend.objects.put_many([(oid, repo.backend.objects.get(oid))])
    assert repo.backend.objects.mtimes([oid])[oid] == pytest.approx(first + HOUR)


def test_delta_bases_of_kept_frames_are_kept(delta_repo_and_clock: tuple[snapvc.Repository, Clock]) -> None:
    repo, clock = delta_repo_and_clock
    final = _grow(repo, clock, 20)
    clock.now += 40 * 86400
    report = repo.gc(keep=Keep(last=3), reflog_expiry=0, grace=0)
    assert report.rewrites and report.rewrites[0].kept == 3 and report.rewrites[0].total == 20
    assert report.kept_delta_bases > 0  # old node versions the kept frames are deltas on
    assert len(report.removed_commits) == 20  # the 3 kept ones were written again
    fresh = snapvc.Repository(repo.backend)  # nothing served from the caches
    assert fresh.checkout("main") == final
    assert [c.metadata["step"] for c in fresh.log("main")] == [19, 18, 17]
    checked = repo.fsck()
    assert checked.ok and checked.dangling_objects == () == checked.dangling_commits  # bases are not dangling


def test_retention_on_format_3_rewrites_the_packs_holding_garbage_and_gives_the_pages_back(tmp_path: Path) -> None:
    clock = Clock()
    with snapvc.open(tmp_path / "packs.snapvc", clock=clock) as repo:
        final = _grow(repo, clock, 20)
        clock.now += 40 * 86400
        before = repo.backend.objects.sizes()
        report = repo.gc(keep=Keep(last=3), reflog_expiry=0, grace=0)
        assert report.rewrites[0].kept == 3 and len(report.removed_commits) == 20
        assert report.kept_delta_bases == 0  # raw frames in packs: no deltas, no bases to keep
        removed = set(report.removed_objects)
        assert removed and not removed & packed_ids(repo)  # gone from every pack row
        assert packed_ids(repo) == {bytes(oid) for oid in repo.backend.objects.iter_ids()}
        assert before.objects - repo.backend.objects.sizes().objects == len(removed)
        conn = repo.backend.file.conn
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0  # the freed pages went back
        fresh = snapvc.Repository(repo.backend)  # nothing served from the caches
        assert fresh.checkout("main") == final
        checked = repo.fsck()
        assert checked.ok and checked.dangling_objects == () == checked.dangling_commits
    with snapvc.open(tmp_path / "packs.snapvc", create=False) as reopened:
        assert reopened.checkout("main") == final and reopened.fsck().ok


def test_a_sealed_pack_holds_its_objects_for_the_grace_period_of_its_youngest_block(tmp_path: Path) -> None:
    """A block's time is the age of its objects; a sealed pack takes the youngest time of
    what it joined, so old garbage sealed with new objects is young again (kept), until
    the grace period of the pack's time ends."""
    clock = Clock()
    with snapvc.open(tmp_path / "sealed.snapvc", clock=clock) as repo:
        repo.commit({"main": 1})
        repo.branch("scratch")
        repo.commit({"draft": "old draft " * 800}, branch="scratch")
        repo.delete_branch("scratch")
        old = [oid for oid in repo.backend.objects.iter_ids() if repo.backend.objects.mtimes([oid])[oid] == clock.now]
        joined_at = clock.now + 2 * HOUR
        clock.now = joined_at
        repo.commit({"main": 2, "notes": "new notes " * 800})
        repo.backend.objects.finish_stream()
        assert repo.backend.objects.seal_all() >= 1
        assert set(repo.backend.objects.mtimes(old).values()) == {joined_at}
        report = repo.gc(grace=HOUR, reflog_expiry=0)
        assert report.removed_objects == () and report.kept_young > 0
        assert repo.checkout("main") == {"main": 2, "notes": "new notes " * 800}
        clock.now = joined_at + 2 * HOUR
        report = repo.gc(grace=HOUR, reflog_expiry=0)
        assert report.removed_objects and set(report.removed_objects) <= set(old)
        assert repo.fsck().ok


def test_retention_keeps_last_hourly_daily_weekly_and_ids_before_the_first_drop(tmp_path: Path) -> None:
    clock = Clock(datetime(2026, 1, 5, tzinfo=UTC).timestamp())  # a Monday
    with snapvc.open(tmp_path / "keep.snapvc", clock=clock) as repo:
        for i in range(4 * 24 * 4):  # four days, every 15 minutes
            repo.commit({"step": i}, message=f"{i}", metadata={"step": i})
            clock.now += 900
        repo.tag("first", at=[c.id for c in repo.log("main")][-1])
        untouched = [c.id for c in repo.log("main")][-1]
        dry = repo.gc(keep=Keep(last=4, hourly=6, daily=3), dry_run=True)
        assert repo.resolve("main") == dry.rewrites[0].old_tip  # nothing moved
        report = repo.gc(keep=Keep(last=4, hourly=6, daily=3))
        steps = [c.metadata["step"] for c in repo.log("main")]
        # last 4; newest of each of the last 6 hours (4 of them already kept: 383, 379, ...);
        # newest of each of the last 3 days.
        assert steps[:4] == [383, 382, 381, 380]
        assert steps[4:9] == [379, 375, 371, 367, 363]
        assert 287 in steps and 191 in steps and len(steps) == len(set(steps))
        assert report.rewrites[0].kept == len(steps) and dry.rewrites[0].kept == len(steps)
        assert repo.checkout("main") == {"step": 383}
        assert repo.resolve("first") == untouched  # tags keep what they point at
        assert [c.generation for c in repo.log("main")] == list(range(len(steps), 0, -1))
        assert "gc: keep last 4, hourly 6, daily 3" in repo.reflog("main")[0].reason
        assert repo.reset("main", to="main@{1}").metadata["step"] == 383  # the old history, from the reflog
        assert len(list(repo.log("main"))) == 384


def test_retention_on_an_agent_run(tmp_path: Path) -> None:
    """The figures docs/reliability.md quotes, printed (-s): 500 steps one minute apart,
    each editing one of 10 documents a little and appending a message, thinned as
    ``snapvc gc --keep-last 50 --keep-hourly 24 --expire-reflog 0`` does."""
    clock = Clock()
    with snapvc.open(tmp_path / "agent.snapvc", clock=clock) as repo:
        docs = {f"doc{d}": "".join(f"Line {i} of document {d}: notes on the task.\n" for i in range(60))
                for d in range(10)}
        state: dict = {"messages": [], "docs": docs}
        for step in range(500):
            name = f"doc{step % 10}"
            docs[name] = docs[name].replace("notes", f"notes {step}", 1)
            state["messages"].append({"role": "assistant", "content": f"step {step}: " + "thinking " * 20})
            repo.commit(state, message=f"step {step}")
            clock.now += 60
        before = repo.backend.objects.sizes()
        report = repo.gc(keep=Keep(last=50, hourly=24), reflog_expiry=0)
        after = repo.backend.objects.sizes()
        [rewrite] = report.rewrites
        assert (rewrite.kept, rewrite.total) == (57, 500) and len(report.removed_commits) == 500
        assert before.objects - after.objects == len(report.removed_objects) > before.objects // 2
        assert 0 < before.stored_bytes - after.stored_bytes <= report.bytes_freed
        assert repo.checkout("main") == state and repo.fsck().ok
    print(f"agent run: kept {rewrite.kept} of {rewrite.total} commits; removed {len(report.removed_objects)} of "
          f"{before.objects} objects and {len(report.removed_commits)} commit rows, {format_bytes(report.bytes_freed)} "
          f"({format_bytes(before.stored_bytes)} of objects stored); kept {report.kept_delta_bases} old nodes as "
          f"delta bases and {report.kept_young} younger than the grace period; {report.seconds:.2f} s")


def test_retention_leaves_a_branch_that_moved_meanwhile(repo_and_clock: tuple[snapvc.Repository, Clock],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    repo, clock = repo_and_clock
    _grow(repo, clock, 6)
    monkeypatch.setattr(repo.refs, "compare_and_swap", lambda *args: False)
    report = repo.gc(keep=Keep(last=2))
    assert report.skipped_branches == ("main",) and report.rewrites == ()
    monkeypatch.undo()
    assert len(list(repo.log("main"))) == 6


def test_a_writer_whose_caches_name_swept_objects_commits_whole(tmp_path: Path) -> None:
    """Writer A's encoder caches the encoding of a large state; the branch is reset past
    it and a gc (another Repository on the same file) sweeps its objects; A commits the
    same Python objects again. Without the gc epoch, A reuses the cached ids of deleted
    objects and commits a state that cannot be read."""
    clock = Clock()
    path = tmp_path / "race.snapvc"
    writer = snapvc.open(path, clock=clock)
    state = {"doc": "base " * 5000, "items": [{"n": i, "text": "t" * 300} for i in range(200)]}
    writer.commit({"start": True})
    writer.commit(state)
    writer.reset("main", to="main~1")
    clock.now += 40 * 86400
    with snapvc.open(path, clock=clock) as collector:
        report = collector.gc(grace=0, reflog_expiry=0)
        assert len(report.removed_objects) > 10
    writer.commit(state)  # the same objects: the cache would say "encoded already"
    with snapvc.open(path) as reader:
        assert reader.checkout("main") == state and reader.fsck().ok
    writer.close()


# Format 2 stores the reused nodes as deltas on older versions; format 3 keeps no deltas,
# so there the sweep keeps only what the new commit reaches.
@pytest.mark.parametrize("format", [2, 3])
def test_a_commit_between_plan_and_sweep_keeps_the_delta_bases_of_what_it_reuses(tmp_path: Path, format: int) -> None:
    """The plan dooms a reset branch's objects; before the sweep, a writer whose caches
    name them commits the same state again, reusing nodes stored as deltas on older
    versions (a chain of them). The sweep keeps what the new commit reaches and the
    bases those frames need."""
    clock = Clock()
    path = tmp_path / "between.snapvc"
    writer = snapvc.open(path, clock=clock, format=format)
    writer.commit({"start": True})
    state: dict = {"doc": "base " * 5000, "items": []}
    for step in range(4):
        state["items"].append({"n": step, "text": f"item {step} " * 200})
        writer.commit(state)
    writer.reset("main", to="main~4")
    clock.now += 40 * 86400
    with snapvc.open(path, clock=clock) as collector:
        plan = plan_gc(collector, grace=0, reflog_expiry=0)
        assert plan.delta_bases == 0 and len(plan.garbage_objects) >= 10
        writer.commit(state)  # the same objects: encoded already, found stored, not put again
        removed, _, _, _ = sweep(collector, plan)
        assert removed and len(removed) < len(plan.garbage_objects)
    with snapvc.open(path) as reader:
        assert reader.checkout("main") == state and reader.fsck().ok
    writer.close()


def test_a_branch_to_a_commit_a_gc_removed_meanwhile_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "move.snapvc"
    writer = snapvc.open(path, clock=clock)
    writer.commit({"a": 1})
    doomed = writer.commit({"a": 2})
    writer.reset("main", to="main~1")
    writer.resolve(doomed.id.hex)  # now cached in this process
    clock.now += 40 * 86400
    with snapvc.open(path, clock=clock) as collector:
        assert doomed.id in collector.gc(grace=0, reflog_expiry=0).removed_commits
    with pytest.raises(UnknownRevisionError, match="removed by gc"):
        writer.branch("revive", at=doomed.id)
    assert "revive" not in writer.branches()
    writer.close()


def test_gc_refuses_to_sweep_a_damaged_repository(tmp_path: Path) -> None:
    clock = Clock()
    with snapvc.open(tmp_path / "bad.snapvc", clock=clock) as repo:
        repo.commit({"doc": "z" * 9000, "more": ["w" * 3000]})
        victim = next(oid for oid in repo.backend.objects.iter_ids())
        repo.backend.objects.delete_many([victim])
        repo.commit({"scratch": "s" * 9000}, branch="scratch")  # garbage a sweep would remove
        repo.delete_branch("scratch")
        clock.now += 40 * 86400
        before = repo.backend.objects.sizes()
        with pytest.raises(snapvc.RepositoryError, match=f"gc stopped before deleting anything: .*{victim}"):
            repo.gc(grace=0)
        assert repo.backend.objects.sizes() == before


def test_gc_refuses_to_sweep_when_a_young_commit_a_ref_reaches_is_damaged(tmp_path: Path) -> None:
    """A commit younger than the grace period is a root for its age and for its branch:
    what it lacks stops gc as anything a ref reaches does (the branch is marked strictly,
    before the young commits, whose missing history is only reported)."""
    clock = Clock()
    with snapvc.open(tmp_path / "young.snapvc", clock=clock) as repo:
        repo.commit({"scratch": "s" * 9000}, branch="scratch")
        repo.delete_branch("scratch")
        clock.now += 40 * 86400  # the scratch commit is old garbage
        # Made on no ref (so its age counts: a young root), then a branch moved to it.
        made = repo.commit_tree({"doc": "z" * 9000, "more": ["w" * 3000]})
        repo.branch("kept", at=made.id)
        victim = made.tree
        repo.backend.objects.delete_many([victim])
        before = repo.backend.objects.sizes()
        with pytest.raises(snapvc.RepositoryError, match=f"gc stopped before deleting anything: .*{victim}"):
            repo.gc()
        assert repo.backend.objects.sizes() == before


def test_keep_needs_a_rule_and_counts() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Keep()
    with pytest.raises(ValueError, match="Keep.last"):
        Keep(last=-1)


def test_ref_roots_include_a_detached_head(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "head.snapvc") as repo:
        c = repo.commit({"a": 1})
        repo.refs.compare_and_swap("HEAD", None, c.id, "detach")
        assert ref_roots(repo)["HEAD"] == c.id


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_file_keeps_commit_objects_in_the_store_too(tmp_path: Path, version: int) -> None:
    path = tmp_path / "old.snapvc"
    shutil.copy(Path(__file__).parent / "fixtures" / f"v{version}.snapvc", path)
    with snapvc.open(path) as repo:
        states = {name: repo.checkout(tip) for name, tip in {**repo.branches(), **repo.tags()}.items()}
        tip = repo.resolve("main")
        repo.reset("main", to="main~3")
        report = repo.gc(grace=0, reflog_expiry=0)
        assert tip in report.removed_commits  # from the commit index
        assert tip in report.removed_objects  # and its commit object, as older files hold it
        assert not repo.backend.objects.has_many([tip]) and repo.commits.get(tip) is None
        for name in repo.tags():
            assert repo.checkout(f"refs/tags/{name}") == states[name]
        assert repo.fsck().ok


def test_only_commits_without_a_ref_get_an_age(tmp_path: Path) -> None:
    """A commit on a ref is reached from the moment it is written: it spends no age row."""
    with snapvc.open(tmp_path / "ages.snapvc") as repo:
        repo.commit({"a": 1})
        assert repo.commits.mtimes() == {}
        loose = repo.commit_tree({"a": 2}, parents=[repo.resolve("main")])
        assert set(repo.commits.mtimes()) == {loose.id}


def test_a_commit_reads_the_gc_epoch_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The epoch check is on every commit's path: one read of ``meta``, inside the
    commit's transaction; a sweep elsewhere costs the next commit a second encoding."""
    clock = Clock()
    path = tmp_path / "epoch.snapvc"
    with snapvc.open(path, clock=clock) as repo:
        repo.commit({"n": 0})
        reads = []
        read = repo.backend.gc_epoch
        monkeypatch.setattr(repo.backend, "gc_epoch", lambda: reads.append(1) or read())
        for n in range(1, 4):
            repo.commit({"n": n, "doc": "d" * 9000})
        assert len(reads) == 3
        repo.branch("scratch")
        repo.commit({"scratch": "s" * 9000}, branch="scratch")
        repo.delete_branch("scratch")
        clock.now += 40 * 86400
        with snapvc.open(path, clock=clock) as collector:
            assert collector.gc(grace=0, reflog_expiry=0).removed_objects
        reads.clear()
        repo.commit({"n": 4, "doc": "d" * 9000})
        assert len(reads) == 3  # the check, the epoch the dropped caches are built after, the check again
        assert repo.checkout("main") == {"n": 4, "doc": "d" * 9000}


def test_a_merged_branch_keeps_its_history_once_the_branch_is_deleted(
        repo_and_clock: tuple[snapvc.Repository, Clock]) -> None:
    """gc marks through every parent of a commit, not the first only: a branch merged and
    then deleted (its reflog expired) lives on as the merge commit's second parent."""
    repo, clock = repo_and_clock
    repo.commit({"base": "shared " * 200}, message="base")
    repo.branch("feature")
    side_state = _grow(repo, clock, 3, branch="feature")
    side = [c.id for c in repo.log("feature")]
    repo.commit({"base": "shared " * 200, "main": "main's own " * 200}, message="on main")
    merged = repo.merge("feature", into="main", resolve="theirs")
    assert len(repo.get_commit(merged.commit.id).parents) == 2
    repo.delete_branch("feature")
    clock.now += 40 * 86400
    report = repo.gc(grace=0, reflog_expiry=0)
    assert not set(side) & set(report.removed_commits)
    fresh = snapvc.Repository(repo.backend)  # nothing served from the caches
    for oid in side:
        assert fresh.checkout(oid)  # every commit of the merged history reads back whole
    assert fresh.checkout(side[0]) == side_state
    assert repo.fsck().ok


def test_an_object_put_again_between_plan_and_sweep_is_kept(tmp_path: Path) -> None:
    """A writer that stores again objects the plan found old and unreachable (its
    commit's objects, before it moves the ref) makes them young: the sweep reads their
    ages again and keeps them."""
    clock = Clock()
    with snapvc.open(tmp_path / "again.snapvc", clock=clock) as repo:
        repo.commit({"main": 1})
        draft = repo.commit_tree({"draft": "a draft to be used again " * 400})
        clock.now += 2 * HOUR
        plan = plan_gc(repo, grace=HOUR, reflog_expiry=0)
        doomed = set(plan.garbage_objects)
        assert draft.tree in doomed and draft.id in plan.garbage_commits
        # Another writer's commit in progress stores the draft's objects again, now.
        raw = repo.backend.objects
        raw.put_many([(oid, raw.get(oid)) for oid in doomed])
        removed, _, _, _ = sweep(repo, plan)
        assert removed == []  # put again: young, so kept
        assert set(raw.has_many(doomed)) == doomed
        assert snapvc.Repository(repo.backend).loader.materialize(draft.tree) == {"draft": "a draft to be used again " * 400}


@pytest.mark.parametrize("where", ["sqlite", "memory"])
def test_a_sweep_of_objects_without_commits_moves_the_gc_epoch(tmp_path: Path, where: str) -> None:
    """Objects that no commit names (a commit that failed after storing them) swept
    alone: the epoch still moves, so a writer whose caches found them stored encodes
    again instead of naming what is gone."""
    clock = Clock()
    location = str(tmp_path / "epoch.snapvc") if where == "sqlite" else "memory://"
    with snapvc.open(location, clock=clock) as repo:
        repo.commit({"main": 1})
        loose = repo.commit_tree({"loose": "stored, never committed " * 300})
        # Its commit is gone (the ref never moved to it); its objects are left.
        repo.backend.commits.delete_many([loose.id])
        clock.now += 2 * HOUR
        epoch = repo.backend.gc_epoch()
        report = repo.gc(grace=HOUR, reflog_expiry=0)
        assert report.removed_objects and report.removed_commits == ()
        assert repo.backend.gc_epoch() == epoch + 1


def test_a_rewritten_pack_dates_its_objects_by_its_youngest_block(tmp_path: Path) -> None:
    """gc rewrites a stream holding garbage without it, as a pack; the objects it keeps
    take the youngest block's time, never the oldest: young objects no ref reaches yet
    stay young, and the next gc keeps them until their grace period ends."""
    clock = Clock()
    with snapvc.open(tmp_path / "rewrite.snapvc", clock=clock) as repo:
        repo.commit({"main": 1})
        repo.commit({"old": "old garbage " * 400}, branch="scratch")
        repo.delete_branch("scratch")
        clock.now += 2 * HOUR
        young_at = clock.now
        # Another writer's work in progress: stored in the same stream, no ref yet.
        young = repo.commit_tree({"young": "a young draft " * 400})
        objects = repo.backend.objects
        young_ids = [oid for oid in objects.iter_ids() if objects.mtimes([oid])[oid] == young_at]
        assert young_ids
        clock.now += 10
        report = repo.gc(grace=HOUR, reflog_expiry=0)
        assert report.removed_objects and not set(young_ids) & set(report.removed_objects)
        assert set(objects.mtimes(young_ids).values()) == {young_at}
        report = repo.gc(grace=HOUR, reflog_expiry=0)
        assert not set(young_ids) & set(report.removed_objects)
        assert repo.checkout(young.id) == {"young": "a young draft " * 400}
