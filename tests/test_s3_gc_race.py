"""gc on S3 beside writers (``snapvc.backends.s3.packs``, "gc beside writers"), against a real
SeaweedFS server (tests/conftest.py): a writer relies only on bytes stored recently, a
sweep removes only entries that stayed older than its cutoff, a grace below the safe
minimum is refused unless forced, and gc run in a loop beside two writers at that
minimum loses nothing any commit returned.

The bounds are shrunk to seconds (``GcTiming``) so the loop runs in seconds; every
client of a repository is opened with the same ones, as the docs require."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.errors import RepositoryError
from snapvc.ids import ObjectId
from snapvc.backends.s3 import GcTiming
from snapvc.backends.s3.packfile import TOUCH, decode_pack_header

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["plan", "tool", "result", "claim", "source", "draft", "check", "agent", "memory", "note"]


class Clock:
    """A clock that stays where it is put."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def document(seed: str, words: int) -> str:
    import random

    rnd = random.Random(seed)
    return " ".join(f"{rnd.choice(WORDS)}{rnd.randrange(1000)}" for _ in range(words))


def new_pack_entries(repo: snapvc.Repository, before: set[str]) -> dict[bytes, int]:
    """Each object id in the packs written since ``before`` -> its entry's length (TOUCH for a touch)."""
    client = repo.backend.client
    out: dict[bytes, int] = {}
    for key, _ in client.list("packs/"):
        if key in before:
            continue
        found = client.get(key)
        assert found is not None
        decoded = decode_pack_header(client.where(key), found[0])
        assert not isinstance(decoded, int)
        out.update({bytes(raw): length for raw, _, length, _ in decoded[1]["objects"]})
    return out


def pack_keys(repo: snapvc.Repository) -> set[str]:
    return {key for key, _ in repo.backend.client.list("packs/")}


# Small for a test; the defaults are minutes (``GcTiming``).
MINUTE = GcTiming(reuse_window=60.0, longest_write=30.0, clock_skew=5.0)


def test_a_writer_uploads_again_bytes_stored_longer_ago_than_the_reuse_window(s3_url: str) -> None:
    clock = Clock()
    doc = {"doc": document("a", 3000)}  # chunks of a long string: objects of their own
    with snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as repo:
        repo.commit(doc, branch="first")
        stored = repo.backend.objects.has_many([ObjectId(raw) for raw in new_pack_entries(repo, set())])
        assert len(stored) > 3
        clock.now += MINUTE.reuse_window / 2
        before = pack_keys(repo)
        repo.commit(doc, branch="second")  # recent bytes: relied on, a touch each at most
        again = new_pack_entries(repo, before)
        assert all(again.get(bytes(oid), TOUCH) == TOUCH for oid in stored)
        clock.now += MINUTE.reuse_window
        assert repo.backend.objects.has_many(stored) == stored  # stored, but too old to rely on
        assert not repo.backend.reusable(stored)
        before = pack_keys(repo)
        repo.commit(doc, branch="third")
        again = new_pack_entries(repo, before)
        assert {oid for oid in stored if again.get(bytes(oid), TOUCH) != TOUCH} == stored
        assert repo.backend.reusable(stored) == stored  # their bytes are recent again


def _start_together(processes: list[subprocess.Popen[str]]) -> None:
    """Wait until each process printed "ready" (its repository open), then tell them all "go"."""
    for p in processes:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line == "ready\n", line + (p.stderr.read() if p.stderr else "")
    for p in processes:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


def _once_before(owner: Any, method: str, action: Callable[[], Any]) -> list[Any]:
    """Run ``action`` once, just before ``owner``'s ``method`` is next called. Returns
    the list that will hold what it returned."""
    original = getattr(owner, method)
    done: list[Any] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(action())
        return original(*args, **kwargs)

    setattr(owner, method, wrapped)
    return done


def _during_the_sweep(cleaner: snapvc.Repository, action: Callable[[], Any]) -> list[Any]:
    """Run ``action`` once, in the gap no lock on S3 closes: after the sweep read the refs
    again and before it lists the packs to delete from. Returns what it returned."""
    return _once_before(cleaner.backend.packs, "delete", action)


@pytest.mark.parametrize("words", [600, 12_000], ids=["touched", "found-stored"])
def test_content_brought_back_while_gc_removes_it_stays_readable(s3_url: str, words: int) -> None:
    """A value dropped long ago comes back in a commit made while a gc removes it. A few
    objects are put again (a touch each, before); many are found stored and skipped."""
    clock = Clock()
    doc = document("b", words)
    with snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as writer:
        writer.commit({"n": 0})
        writer.commit({"n": -1, "doc": doc}, branch="scratch")
        writer.delete_branch("scratch")
        clock.now += 10 * MINUTE.min_grace  # long unreachable and old
        with snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as cleaner:
            made = _during_the_sweep(cleaner, lambda: writer.commit({"n": 1, "doc": doc}))
            report = cleaner.gc(grace=MINUTE.min_grace, reflog_expiry=0)
            assert made and report.removed_objects  # the old copies did go
    with snapvc.open(s3_url, create=False, gc_timing=MINUTE) as reader:
        assert reader.checkout(made[0].id) == {"n": 1, "doc": doc}
        assert reader.fsck().ok


def _sweep_before_the_ref_moves(writer: snapvc.Repository, sweep: Callable[[], Any]) -> list[Any]:
    """Run ``sweep`` once inside the writer's next commit, after it compared the gc epoch
    and just before its ref moves: the gap no lock on S3 closes. Returns what it returned."""
    return _once_before(writer.refs, "compare_and_swap", sweep)


@pytest.mark.parametrize("taught_by", ["its-own-commit", "a-checkout"])
def test_a_writer_does_not_rely_on_its_encode_cache_once_another_client_moved_the_branch(
        s3_url: str, taught_by: str) -> None:
    """A writer's encode cache knows a document as stored: by its own commit of it on the
    branch, which another client then reset, or by checking out a commit of a branch
    another client then deleted. The document is old and unreachable, and a gc at the
    minimum grace removes it while the writer commits it again: that commit must not name
    the removed copy (the cache describes no commit the branch holds)."""
    clock = Clock()
    doc = document("d", 12_000)  # chunks of a long string: many objects the cache knows
    with (snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as writer,
          snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as other):
        start = writer.commit({"step": 0})
        if taught_by == "its-own-commit":
            writer.commit({"step": 1, "notes": doc})
            other.reset("main", to=start.id)
            state = {"step": 2, "notes": doc}  # the same str object: its encoding is cached
        else:
            side = writer.commit({"step": 1, "notes": doc}, branch="side")
            state = writer.checkout(side.id)  # teaches main's encode cache (HEAD's branch)
            other.delete_branch("side")
            state["step"] = 2
        clock.now += 10 * MINUTE.min_grace  # the document is long unreachable and old
        with snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as cleaner:
            reports = _sweep_before_the_ref_moves(
                writer, lambda: cleaner.gc(grace=MINUTE.min_grace, reflog_expiry=0))
            made = writer.commit(state)
        assert reports and reports[0].removed_objects  # the old copy of the document did go
        assert made.parents == (start.id,)
    with snapvc.open(s3_url, create=False, gc_timing=MINUTE) as reader:
        assert reader.checkout(made.id) == {"step": 2, "notes": doc}
        assert reader.fsck().ok


def _commit_that_lost_its_race(writer: snapvc.Repository, other: snapvc.Repository, cleaner: snapvc.Repository,
                               clock: Clock) -> tuple[ObjectId, ObjectId, ObjectId]:
    """A commit of ``writer`` on main whose compare-and-swap lost: ``other`` reset main to
    its first commit meanwhile, and ``cleaner``'s gc removed the tip the commit built on
    (old, and reached by nothing once main moved) before the writer's ref moved. Returns
    the commit main was reset to, the parent removed, and the commit stored on it that
    no ref reaches (young)."""
    notes = document("h", 12_000)  # the same str in both states: its encoding comes from the encode cache
    start = writer.commit({"step": 0})
    parent = writer.commit({"step": 1, "notes": notes, "log": "q" * 20_000})
    clock.now += 10 * MINUTE.min_grace

    def reset_and_sweep() -> snapvc.GcReport:
        other.reset("main", to=start.id)
        return cleaner.gc(grace=MINUTE.min_grace, reflog_expiry=0)

    _sweep_before_the_ref_moves(writer, reset_and_sweep)
    with pytest.raises(snapvc.RefConflictError):
        writer.commit({"step": 2, "notes": notes, "log": "q" * 20_000 + "r"})  # "log": a delta on the parent's
    lost = [oid for oid in cleaner.commits.ids() if cleaner.commits.get(oid).parents == (parent.id,)]
    assert len(lost) == 1 and parent.id not in cleaner.commits.ids()
    return start.id, parent.id, lost[0]


def test_a_commit_that_lost_its_race_to_a_reset_does_not_stop_gc_once_its_parent_is_gone(s3_url: str) -> None:
    """A writer commits on main while another client resets main away from the tip the
    commit builds on, and a gc at the minimum grace removes that tip (old, reached by
    nothing any more) before the writer's ref moves. The compare-and-swap fails: the new
    commit stays stored, reached by no ref, its parent gone, and gc keeps it while it is
    younger than the grace. gc then sweeps what else is garbage, naming the missing
    history it met below that commit, instead of stopping on every run; every ref reads
    whole and fsck finds the commit dangling, not damage (as ``git fsck`` ignores a
    missing object that only unreachable ones name)."""
    clock = Clock()
    with (snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as writer,
          snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as other,
          snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as cleaner):
        scratch = other.commit({"draft": document("g", 3000)}, branch="scratch")
        start, parent, lost = _commit_that_lost_its_race(writer, other, cleaner, clock)
        other.delete_branch("scratch")  # old garbage for the next gc; the lost commit is young
        report = cleaner.gc(grace=MINUTE.min_grace, reflog_expiry=0)
        assert scratch.id in report.removed_commits and report.removed_objects
        assert lost not in report.removed_commits  # kept while young
        assert any(lost.short in d and parent.short in d for d in report.damage), report.damage
        assert any("its delta base" in d and "is missing" in d for d in report.damage), report.damage  # and its state's
        assert lost.short in str(report) and "damage:" in str(report)
        assert report.to_dict()["damage"] == list(report.damage)
        assert cleaner.gc(grace=MINUTE.min_grace, reflog_expiry=0).damage == report.damage  # every run, the same
    with snapvc.open(s3_url, create=False, clock=clock, gc_timing=MINUTE) as reader:
        assert reader.branches() == {"main": start}
        assert reader.checkout("main") == {"step": 0}
        fsck = reader.fsck()
        assert fsck.ok, fsck
        assert lost in fsck.dangling_commits
        clock.now += 2 * MINUTE.min_grace  # once the commit is old, gc removes it, and nothing is left to report
        late = reader.gc(grace=MINUTE.min_grace, reflog_expiry=0)
        assert lost in late.removed_commits and not late.damage
        assert reader.fsck().ok and reader.checkout("main") == {"step": 0}


def test_a_ref_moved_to_a_commit_whose_parent_is_gone_stops_gc_again(s3_url: str) -> None:
    """What gc tolerates below a commit reached by no ref stops it again once a ref
    reaches that commit: reset there after gc planned and before it swept, the branch
    is marked again strictly, and gc stops before deleting anything; fsck names what
    the branch lacks."""
    clock = Clock()
    with (snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as writer,
          snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as other,
          snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as cleaner):
        scratch = other.commit({"draft": document("i", 3000)}, branch="scratch")
        start, parent, lost = _commit_that_lost_its_race(writer, other, cleaner, clock)
        other.delete_branch("scratch")  # old garbage; the lost commit is young
        _once_before(cleaner.backend, "transaction", lambda: other.reset("main", to=lost))
        with pytest.raises(RepositoryError, match=f"gc stopped before deleting anything: commit {parent}"):
            cleaner.gc(grace=MINUTE.min_grace, reflog_expiry=0)
        assert scratch.id in cleaner.commits.ids()  # nothing deleted
        assert other.resolve("main") == lost != start
        # And fsck names what main now lacks: the parent, and the frames whose delta base went with it.
        fsck = other.fsck()
        assert any(p.kind == "missing" and p.object_id == parent and "refs/heads/main" in p.refs for p in fsck.problems)
        assert any(p.kind == "corrupt" and "its delta base" in p.message and "is missing" in p.message
                   for p in fsck.problems), fsck


def test_the_encode_cache_is_reused_without_a_request_while_it_holds_the_branch_tip(s3_url: str) -> None:
    """The rule above costs nothing while the cache came from the parent or an ancestor of
    it: the next commit sends the change only, with the requests of any commit; after
    another client reset the branch, the state is encoded and sent afresh, once."""
    clock = Clock()
    doc = document("e", 12_000)
    with (snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as writer,
          snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as other):
        first = writer.commit({"step": 0})
        writer.commit({"step": 1, "notes": doc})
        stored = len(new_pack_entries(writer, set()))

        def sent(state: dict[str, Any]) -> tuple[int, dict[str, int]]:
            """Objects and requests of a commit of ``state``, made when every stored byte is
            older than the reuse window (nothing is reused for being recent)."""
            clock.now += 2 * MINUTE.reuse_window
            before, stats = pack_keys(writer), writer.backend.s3_stats.copy()
            writer.commit(state)
            requests = (writer.backend.s3_stats - stats).requests
            return len(new_pack_entries(writer, before)), requests

        objects, requests = sent({"step": 2, "notes": doc})  # the cache holds the tip: reused
        assert objects == 1 and requests["PUT"] == 2 and not requests.get("LIST")  # the root; the pack, the ref
        assert requests.get("GET", 0) <= 2  # the tip (and the gc epoch, read once a second)
        state = writer.checkout("main~1")  # an ancestor of the tip: its encodings may be reused
        state["step"] = 3
        assert sent(state)[0] == 1
        other.reset("main", to=first.id)
        objects, requests = sent({"step": 4, "notes": doc})  # reset by another client: afresh
        assert objects >= stored - 2 > 10 and not requests.get("LIST")
        assert sent({"step": 5, "notes": doc})[0] == 1  # and then the cache holds the tip again
        assert writer.checkout("main") == {"step": 5, "notes": doc}


def test_a_sweep_keeps_what_was_stored_again_since_it_read_the_ages(s3_url: str) -> None:
    """Another client uploads an object again after the sweep judged it old: the new copy
    stays, the old one goes."""
    clock = Clock()
    doc = {"doc": document("c", 3000)}
    with snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as repo:
        repo.commit({"n": 0})
        tree = repo.commit(doc, branch="scratch").tree
        repo.delete_branch("scratch")
        clock.now += 10 * MINUTE.min_grace
        with snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as other:
            frames = repo.backend.objects.get_many([tree])
            _during_the_sweep(repo, lambda: other.backend.objects.put_many(frames.items()))
            repo.gc(grace=MINUTE.min_grace, reflog_expiry=0)
            assert other.backend.reusable([tree]) == {tree}
    with snapvc.open(s3_url, create=False, gc_timing=MINUTE) as reader:
        assert reader.store.get(tree)  # read and verified
        assert reader.fsck().ok


def test_a_grace_below_the_safe_minimum_is_refused_on_s3_unless_forced(s3_url: str, tmp_path: Path) -> None:
    with snapvc.open(s3_url) as repo:
        repo.commit({"n": 0})
        repo.commit({"n": 1, "doc": "d" * 9000}, branch="doomed")
        repo.delete_branch("doomed")
        with pytest.raises(snapvc.UnsafeGcError, match=r"10s is below 30m.*force=True") as info:
            repo.gc(grace=10, reflog_expiry=0)
        assert s3_url in str(info.value) and isinstance(info.value, RepositoryError)
        assert (info.value.location, info.value.grace, info.value.minimum) == (s3_url, 10, 30 * 60)
        assert repo.gc(grace=0, reflog_expiry=0, dry_run=True).removed_objects  # a dry run deletes nothing
        assert repo.commits.count() == 2
        assert repo.gc(grace=30 * 60).removed_objects == ()  # the minimum itself is accepted
        assert repo.gc(grace=0, reflog_expiry=0, force=True).removed_objects
        assert repo.fsck().ok
    with snapvc.open(tmp_path / "local.snapvc") as local:  # a sweep there excludes writers: no minimum
        local.commit({"n": 0})
        local.gc(grace=0)
    with pytest.raises(ValueError, match="reuse_window"):
        GcTiming(reuse_window=-1)
    with pytest.raises(TypeError, match="GcTiming"):
        snapvc.open(s3_url, gc_timing=60)  # type: ignore[arg-type]


def test_the_command_line_refuses_a_short_grace_on_s3_and_forces_it(s3_url: str, tmp_path: Path) -> None:
    snapvc.open(s3_url).close()
    command = [sys.executable, "-m", "snapvc", "gc", "--repo", s3_url, "--grace", "0"]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert refused.returncode == 2 and "below 30m" in refused.stderr and "--force" in refused.stderr
    forced = subprocess.run([*command, "--force"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert forced.returncode == 0, forced.stderr


# -- gc in a loop beside writers ------------------------------------------------------------

# One second of reuse, two of the longest write, no skew (one machine): a minimum grace of
# three seconds. A write here takes well under a second.
LOOP = GcTiming(reuse_window=1.0, longest_write=2.0, clock_skew=0.0)
LOOP_SECONDS = 12.0
MAX_STEPS = 150
PAUSE = 0.03  # between a writer's steps: fewer commits to check, as many gc runs beside them
MAX_GC_RUNS = 60

_WRITER = textwrap.dedent(
    """
    import random, sys, time
    import snapvc
    from snapvc.backends.s3 import GcTiming
    from tests.test_s3_gc_race import LOOP, document

    url, agent, seconds, max_steps, pause = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    rnd = random.Random(agent)
    repo = snapvc.open(url, gc_timing=LOOP)
    branch, scratch = f"agents/{agent}", f"scratch/{agent}"
    state = {"messages": [], "doc": "", "step": 0}
    dropped = []  # (when, seed) of documents committed on a scratch branch that is gone
    print("ready", flush=True)
    sys.stdin.readline()
    ends = time.monotonic() + seconds
    step = 0
    while time.monotonic() < ends and step < max_steps:
        # A document written, dropped with its branch, and brought back once it is
        # older than the grace: long or short (many objects found stored, or a few put).
        seed = f"{agent}-{step}"
        words = rnd.choice([600, 12_000])
        repo.commit({"doc": document(seed, words), "step": step}, branch=scratch, message="draft")
        repo.delete_branch(scratch)
        dropped.append((time.monotonic(), seed, words))
        if time.monotonic() - dropped[0][0] > LOOP.min_grace + 0.5:
            _, old, old_words = dropped.pop(0)
            state["doc"] = document(old, old_words)
        state["messages"].append({"role": "assistant", "content": f"{agent} {step} " + "x" * rnd.randrange(200, 900)})
        state["step"] = step
        commit = repo.commit(state, branch=branch, message=f"step {step}", metadata={"step": step})
        print("commit", commit.id.hex, flush=True)
        step += 1
        time.sleep(pause)
    repo.close()
    print("done", flush=True)
    """
)


@pytest.mark.slow
def test_gc_in_a_loop_beside_two_writers_at_the_minimum_grace_loses_nothing(s3_url: str) -> None:
    snapvc.open(s3_url).close()
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, s3_url, f"w{i}", str(LOOP_SECONDS), str(MAX_STEPS), str(PAUSE)],
                         cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    runs = removed = 0
    try:
        _start_together(writers)
        with snapvc.open(s3_url, gc_timing=LOOP) as cleaner:
            ends = time.monotonic() + LOOP_SECONDS + 60
            while any(w.poll() is None for w in writers) and runs < MAX_GC_RUNS and time.monotonic() < ends:
                removed += len(cleaner.gc(grace=LOOP.min_grace, reflog_expiry=0).removed_objects)
                runs += 1
        outputs = [w.communicate(timeout=120) for w in writers]
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
    for w, (_, err) in zip(writers, outputs, strict=True):
        assert w.returncode == 0, err
    commits = [line.split()[1] for out, _ in outputs for line in out.splitlines() if line.startswith("commit ")]
    assert runs >= 3 and removed, (runs, removed)  # gc did run beside them, and removed what they dropped
    assert len(commits) >= 40, len(commits)
    print(f"\n{runs} gc runs at a grace of {LOOP.min_grace:g} s beside 2 writers removed {removed} objects; "
          f"checking the {len(commits)} commits they made")
    with snapvc.open(s3_url, create=False, gc_timing=LOOP) as reader:
        unreadable = []
        for hex_id in commits:
            try:
                reader.checkout(hex_id)
            except snapvc.SnapvcError as exc:
                unreadable.append(f"{hex_id[:12]}: {exc}")
        assert not unreadable, f"{len(unreadable)} of {len(commits)} commits lost: {unreadable[:3]}"
        report = reader.fsck()
        assert report.ok, report


# -- gc in a loop beside writers whose branches another client resets ----------------------

# Every process here runs on one clock, time.time() sped up SPEED times from a common
# start: an agent that thinks for a second between steps is, on this clock, idle for much
# longer than the grace, as agents between steps often are for longer than 30 minutes.
# The bounds hold on it: one machine (no skew), and a write takes well under a second
# of real time, under half of ``longest_write``.
SPEED = 20.0
FAST = GcTiming(reuse_window=1.0, longest_write=10.0, clock_skew=0.0)
RESET_SECONDS = 12.0
THINKING = 0.6  # real seconds between a writer's steps
RESET_PAUSE = 0.4  # real seconds between two resets
RESET_STEPS = 40
RESET_GC_RUNS = 400


class FastClock:
    """time.time() sped up ``SPEED`` times from ``start``: the same in every process."""

    def __init__(self, start: float) -> None:
        self.start = start

    def __call__(self) -> float:
        return self.start + (time.time() - self.start) * SPEED


_RESET_WRITER = textwrap.dedent(
    """
    import random, sys, time
    import snapvc
    from tests.test_s3_gc_race import FAST, FastClock, document

    url, agent, start, seconds, max_steps, pause = (sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]),
                                                    int(sys.argv[5]), float(sys.argv[6]))
    rnd = random.Random(agent)
    repo = snapvc.open(url, clock=FastClock(start), gc_timing=FAST)
    branch = f"agents/{agent}"
    state = {"messages": [], "step": 0}
    print("ready", flush=True)
    sys.stdin.readline()
    ends = time.monotonic() + seconds
    step = 0
    while time.monotonic() < ends and step < max_steps:
        state["messages"].append({"role": "assistant", "content": f"{agent} {step} " + "x" * rnd.randrange(200, 900)})
        state["step"] = step
        while True:
            try:
                commit = repo.commit(state, branch=branch, message=f"step {step}", metadata={"step": step})
                break
            except snapvc.RefConflictError:  # the resetting client moved the branch meanwhile
                pass
        print("commit", commit.id.hex, flush=True)
        if step == 0:
            # A long memory kept from the second commit on, the same str each step: its
            # encoding comes from the encode cache. The first commit, where the resets
            # take the branch back to, does not hold it.
            state["memory"] = document(f"{agent}-memory", 12_000)
        step += 1
        time.sleep(pause)
    repo.close()
    print("done", flush=True)
    """
)

# A client that moves the writers' branches back, as a person or a supervisor undoing an
# agent's steps would: to the branch's first commit, or a few steps back.
_RESETTER = textwrap.dedent(
    """
    import random, sys, time
    import snapvc
    from tests.test_s3_gc_race import FAST, FastClock

    url, start, seconds, pause, branches = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
    rnd = random.Random("resetter")
    repo = snapvc.open(url, clock=FastClock(start), gc_timing=FAST)
    print("ready", flush=True)
    sys.stdin.readline()
    ends = time.monotonic() + seconds
    resets = 0
    while time.monotonic() < ends:
        time.sleep(pause)
        branch = rnd.choice(branches)
        try:
            chain = [c.id for c in repo.log(branch)]
        except snapvc.UnknownRevisionError:  # not there yet
            continue
        # The tip it moves away from was returned by a commit: it reads whole (read by a
        # new client, whose caches hold nothing read before a sweep).
        with snapvc.open(url, create=False, clock=FastClock(start), gc_timing=FAST) as fresh:
            try:
                fresh.checkout(chain[0])
            except snapvc.SnapvcError as exc:
                print("lost", chain[0].hex, exc, flush=True)
        to = chain[-1] if rnd.random() < 0.7 else chain[min(len(chain) - 1, rnd.randrange(1, 5))]
        try:
            repo.reset(branch, to=to)
            resets += 1
        except snapvc.RefConflictError:  # moved meanwhile
            pass
    repo.close()
    print("resets", resets, flush=True)
    """
)


@pytest.mark.slow
def test_gc_in_a_loop_beside_writers_whose_branches_another_client_resets_loses_nothing(s3_url: str) -> None:
    """Two writers commit on their branches, idle between steps for longer than the
    grace, while another client moves their branches back and gc runs at the minimum
    grace: a writer's next commit goes on the older tip, with an encode cache holding
    content that only the commits reset away hold, and that gc finds old and unreachable.
    Each tip the resetting client moves away from reads whole, and so does every commit
    a ref still reaches at the end, each writer's last one included (commits reset away
    may go afterwards: nothing reaches them). No gc run stops: a commit that lost its
    race to a reset, whose parent a sweep removed, is named in the report, not a reason
    to delete nothing."""
    snapvc.open(s3_url).close()
    start = time.time()
    branches = ["agents/w0", "agents/w1"]
    commands = [[_RESET_WRITER, s3_url, f"w{i}", repr(start), str(RESET_SECONDS), str(RESET_STEPS), str(THINKING)]
                for i in range(2)]
    # The resets stop before the writers do: what they commit on the tips left is checked.
    commands.append([_RESETTER, s3_url, repr(start), str(RESET_SECONDS - 3 * THINKING), str(RESET_PAUSE), *branches])
    processes = [subprocess.Popen([sys.executable, "-c", *command], cwd=ROOT, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for command in commands]
    runs = removed = tolerated = 0
    try:
        _start_together(processes)
        with snapvc.open(s3_url, clock=FastClock(start), gc_timing=FAST) as cleaner:
            ends = time.monotonic() + RESET_SECONDS + 60
            while any(p.poll() is None for p in processes) and runs < RESET_GC_RUNS and time.monotonic() < ends:
                # A commit that lost its race to a reset stays stored, unreferenced, and gc
                # keeps it while it is young; a sweep may have removed its parent (old, and
                # reached by nothing once the branch moved). gc goes on, naming that history
                # as missing: every run sweeps.
                report = cleaner.gc(grace=FAST.min_grace, reflog_expiry=0)
                removed += len(report.removed_objects)
                tolerated += bool(report.damage)
                assert all("only commits no ref" in d or "below commits no ref" in d for d in report.damage), report
                runs += 1
        outputs = [p.communicate(timeout=120) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(processes, outputs, strict=True):
        assert p.returncode == 0, err
    resets = int(outputs[-1][0].split("resets")[-1])
    lost = [line for line in outputs[-1][0].splitlines() if line.startswith("lost ")]
    assert not lost, f"{len(lost)} tips found unreadable before a reset: {lost[:3]}"
    made = [line.split()[1] for out, _ in outputs[:-1] for line in out.splitlines() if line.startswith("commit ")]
    assert runs >= 3 and removed and resets >= 5, (runs, removed, resets)
    with snapvc.open(s3_url, create=False, gc_timing=FAST) as reader:
        reachable = {c.id.hex for c in reader.log(list(reader.branches().values()))}
        kept = [hex_id for hex_id in made if hex_id in reachable]
        assert {reader.resolve(b).hex for b in branches} <= set(kept), branches  # the writers' last commits
        print(f"\n{runs} gc runs ({tolerated} met missing history below commits no ref reaches) at the minimum grace beside 2 writers and {resets} resets of "
              f"their branches removed {removed} objects; checking the {len(kept)} of {len(made)} commits still reached")
        unreadable = []
        for hex_id in kept:
            try:
                reader.checkout(hex_id)
            except snapvc.SnapvcError as exc:
                unreadable.append(f"{hex_id[:12]}: {exc}")
        assert not unreadable, f"{len(unreadable)} of {len(kept)} commits lost: {unreadable[:3]}"
        report = reader.fsck()
        assert report.ok, report


def test_a_branch_forked_at_the_tip_sends_its_change_only_and_never_relies_on_the_other(s3_url: str) -> None:
    """A new branch starts from a fork of the cache holding its tip (the parent of its
    first commit): that commit sends the change only. A commit on either branch then
    names nothing the other stored: the parent's next commit sends its own change only,
    the fork's objects being none of its ancestors'."""
    clock = Clock()
    doc = document("f", 12_000)
    with snapvc.open(s3_url, clock=clock, gc_timing=MINUTE) as writer:
        writer.commit({"step": 0, "notes": doc, "log": [f"line {i}" for i in range(300)]})

        def sent(state: dict[str, Any], branch: str) -> int:
            clock.now += 2 * MINUTE.reuse_window  # nothing is reused for being recent
            before = pack_keys(writer)
            writer.commit(state, branch=branch)
            return len(new_pack_entries(writer, before))

        state = {"step": 1, "notes": doc, "log": [f"line {i}" for i in range(300)]}
        sent(state, "main")
        writer.branch("fork", at="main")
        forked = {**state, "step": 2, "log": [*state["log"], "on the fork"]}
        assert sent(forked, "fork") <= 3  # the root and the log's last node (of a tree)
        grown = {**state, "step": 2, "log": [*state["log"], "on main"]}
        assert sent(grown, "main") <= 3
        assert writer.checkout("fork") == forked and writer.checkout("main") == grown
