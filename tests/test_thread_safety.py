"""Threads: snapvc used from several threads at once, each commit and checkout verified.

Three ways an application uses threads, each run as a stress in a child process:

- every thread on a repository of its own (a worker pool, one agent per repository);
- every thread on one shared ``Repository``: its own branch, one branch they all build
  on with compare-and-swap and retry, and reads through a second shared ``Repository``;
- several repositories under ``snapvc.aio``, each with its own worker thread.

Each writes new compressible objects every round (so zstd compresses on every thread)
and reads them back through a repository whose caches have not seen them (so zstd
decompresses on every thread), including a large first commit (zstd's batch calls) and
the frames of a trained dictionary. A zstd context shared between threads corrupts the
heap: the process dies (a segfault, ``free(): invalid size``) or zstd fails, or a read
returns garbage. The stress runs in a child, so that a dead interpreter is reported
here as a failure naming the signal.

The last tests hold one thread inside the encoding of a value (an adapter that waits)
while another encodes: an encoder shared between threads mixes up their paths.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import snapvc
import snapvc.aio
from snapvc.errors import RefConflictError

ROOT = Path(__file__).resolve().parents[1]
THREADS = 4
REPOSITORIES = 8  # fresh repositories one after another: see PLAIN_BYTES
SHARED_REPOSITORIES = 6
READERS = 6  # Repository objects reading each shared repository file, one after another
# A repository compresses with plain zstd until it has sampled TRAIN_AFTER_BYTES (256 KiB)
# of objects, then trains a dictionary and uses it for every later frame. The rounds write
# about PLAIN_BYTES to each repository with plain zstd first, then one large round (over
# 64 objects and 1 MiB: zstd's batch calls, and the training), then rounds compressed
# with the dictionary, which a fresh reader must first decompress itself.
PLAIN_BYTES = 200 << 10
ROUND_BYTES = 3 * 3200  # three new documents of about 3 KB a round, each one object
DICTIONARY_ROUNDS = 2

_WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ro", "su", "ti", "va", "ze") for b in range(300)]


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _state(rng: random.Random, who: str, i: int, large: bool = False) -> dict[str, Any]:
    """A state with new text every round: every object it brings is compressed whole.
    ``large``: 80 documents of about 14 KB (chunked), over 64 objects and 1 MiB."""
    docs, words = (80, 2000) if large else (3, 450)
    return {
        "who": who,
        "round": i,
        "docs": {f"doc-{j}": _prose(rng, words) for j in range(docs)},
        "messages": [{"role": "user", "content": _prose(rng, 30)} for _ in range(1 + i % 4)],
    }


def _rounds(writers: int, large: bool = True) -> list[bool]:
    """The rounds one writer makes on one repository that ``writers`` write at once:
    whether each is the large one (``large``: make one, and rounds after it)."""
    plain = [False] * (PLAIN_BYTES // (ROUND_BYTES * writers))
    return plain + [True] + [False] * DICTIONARY_ROUNDS if large else plain


# -- the stresses (run in a child process) -----------------------------------------------


def _run_threads(work: Callable[[int], None], *barriers: threading.Barrier) -> None:
    """``work(k)`` on THREADS threads at once; the first exception any raised, raised here.
    A thread that fails breaks ``barriers``, so that the others stop instead of waiting."""
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def run(k: int) -> None:
        try:
            start.wait(timeout=60)
            work(k)
        except BaseException as exc:
            errors.append(exc)
            for barrier in barriers:
                barrier.abort()

    threads = [threading.Thread(target=run, args=(k,), name=f"worker-{k}") for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def stress_own_repositories(folder: Path) -> str:
    def work(k: int) -> None:
        rng = random.Random(k)
        for r in range(REPOSITORIES):
            path = folder / f"own-{k}-{r}.snapvc"
            with snapvc.open(path) as repo, snapvc.open(path) as reader:
                rounds = _rounds(1, large=r == REPOSITORIES - 1)
                for i, large in enumerate(rounds):
                    state = _state(rng, f"t{k}", i, large)
                    commit = repo.commit(state, message=f"round {i}")
                    # The reader's caches have never seen these objects: it decompresses them.
                    assert reader.checkout(commit.id) == state, f"thread {k}, {path.name}, round {i}: the checkout differs"
                assert len(list(reader.log("main"))) == len(rounds)

    _run_threads(work)
    rounds = sum(len(_rounds(1, large=r == REPOSITORIES - 1)) for r in range(REPOSITORIES))
    return f"{THREADS} threads x {REPOSITORIES} repositories of their own, {rounds} rounds each"


def stress_one_shared_repository(folder: Path) -> str:
    # Per repository file, Repository objects each shared by every thread: one they write
    # through, and READERS they read through, whose caches have not seen what was written.
    paths = [folder / f"shared-{r}.snapvc" for r in range(SHARED_REPOSITORIES)]
    repos = [snapvc.open(path) for path in paths]
    readers = [[snapvc.open(path) for _ in range(READERS)] for path in paths]
    for repo in repos:
        repo.commit({"entries": []}, branch="common", message="start")
    written: dict[tuple[int, int, int], tuple[snapvc.ObjectId, dict[str, Any]]] = {}
    # Only the last repository gets the large round: writes to one Repository take turns,
    # the reads are what runs at once, so most repositories are read before their dictionary.
    rounds = [_rounds(THREADS, large=r == SHARED_REPOSITORIES - 1) for r in range(SHARED_REPOSITORIES)]
    step = threading.Barrier(THREADS)
    retries = [0]

    def read_all(reader: snapvc.Repository, r: int, upto: int) -> None:
        """Every thread's states of repository ``r``'s rounds up to ``upto``, checked; all
        threads read them in the same order at once, so they decompress together."""
        for i in range(upto + 1):
            for other in range(THREADS):
                oid, expected = written[r, i, other]
                assert reader.checkout(oid) == expected, f"repository {r}, round {i}: t{other}'s state differs"
                assert reader.snapshot(oid)["docs"]["doc-1"] == expected["docs"]["doc-1"]

    def work(k: int) -> None:
        rng = random.Random(k)
        for r, repo in enumerate(repos):
            for i, large in enumerate(rounds[r]):
                state = _state(rng, f"t{k}", i, large and k == 0)
                written[r, i, k] = repo.commit(state, branch=f"t{k}", message=f"round {i}").id, state
                step.wait(timeout=60)
                read_all(readers[r][0], r, i)  # reads beside the writes: agents reading each other's work
                while True:  # every thread adds to one branch, each on the tip it read
                    tip = repo.resolve("common")
                    common = repo.checkout(tip)
                    common["entries"].append(f"t{k}-{i}")
                    try:
                        repo.commit(common, branch="common", message=f"t{k} {i}", parents=(tip,))
                        break
                    except RefConflictError:
                        retries[0] += 1
            step.wait(timeout=60)
            for reader in readers[r][1:]:  # a pool of threads serving reads from one Repository
                read_all(reader, r, len(rounds[r]) - 1)
                step.wait(timeout=60)

    try:
        _run_threads(work, step)
        for r, made in enumerate(rounds):
            reader = readers[r][0]
            for k in range(THREADS):
                assert [c.message for c in reader.log(f"t{k}")] == [f"round {i}" for i in reversed(range(len(made)))]
            entries = reader.checkout("common")["entries"]
            assert sorted(entries) == sorted(f"t{k}-{i}" for k in range(THREADS) for i in range(len(made)))
            assert len(list(reader.log("common"))) == 1 + THREADS * len(made)
            assert reader.fsck().ok
    finally:
        for repo in [*repos, *(reader for group in readers for reader in group)]:
            repo.close()
    return (f"{THREADS} threads x {SHARED_REPOSITORIES} shared repositories x {sum(map(len, rounds))} rounds, "
            f"each read through {READERS} shared readers; {retries[0]} lost races retried")


def stress_aio_repositories(folder: Path) -> str:
    async def one(k: int) -> None:
        rng = random.Random(k)
        for r in range(REPOSITORIES):
            path = folder / f"aio-{k}-{r}.snapvc"
            async with await snapvc.aio.open(path) as repo, await snapvc.aio.open(path) as reader:
                for i, large in enumerate(_rounds(1, large=r == REPOSITORIES - 1)):
                    state = _state(rng, f"r{k}", i, large)
                    commit = await repo.commit(state, message=f"round {i}")
                    assert await reader.checkout(commit.id) == state, f"{path.name}, round {i}: the checkout differs"

    async def main() -> None:
        await asyncio.gather(*(one(k) for k in range(THREADS)))

    asyncio.run(main())
    rounds = sum(len(_rounds(1, large=r == REPOSITORIES - 1)) for r in range(REPOSITORIES))
    return (f"{THREADS} x {REPOSITORIES} repositories, {rounds} rounds each, under snapvc.aio, "
            f"each repository on its own worker thread")


STRESSES: dict[str, Callable[[Path], str]] = {
    "own": stress_own_repositories,
    "shared": stress_one_shared_repository,
    "aio": stress_aio_repositories,
}


def _in_child(name: str, folder: Path) -> str:
    """Run a stress in a child process; what it printed, or a failure naming how it died."""
    proc = subprocess.run([sys.executable, str(Path(__file__)), name, str(folder)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode < 0:
        pytest.fail(f"the {name!r} stress killed the process with {signal.Signals(-proc.returncode).name}:\n"
                    f"{proc.stderr[-3000:]}")
    assert proc.returncode == 0, f"the {name!r} stress failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(STRESSES))
def test_threads_commit_and_check_out_at_once(tmp_path: Path, name: str) -> None:
    started = time.perf_counter()
    print(_in_child(name, tmp_path), f"in {time.perf_counter() - started:.1f} s: every checkout verified")


# -- encoders of values -------------------------------------------------------------------


@dataclass
class Gate:
    """A typed value whose adapter holds one chosen thread inside its encoding."""

    n: int


class _Holder:
    """Holds the thread ``held`` inside ``Gate``'s adapter until ``release`` is set."""

    def __init__(self) -> None:
        self.held: threading.Thread | None = None
        self.inside = threading.Event()
        self.release = threading.Event()

    def to_fields(self, gate: Gate) -> dict[str, Any]:
        if threading.current_thread() is self.held and not self.release.is_set():
            self.inside.set()
            self.release.wait(timeout=30)
        return {"n": gate.n}


_HOLDER = _Holder()
snapvc.register_type(Gate, _HOLDER.to_fields, lambda fields: Gate(**fields), name="tests.thread_safety:Gate")


def _deep(value: Any, depth: int) -> Any:
    """``value`` at the bottom of ``depth`` nested dicts: inline, and deep enough that
    two encodings sharing one path would pass the depth limit (100)."""
    for _ in range(depth):
        value = {"x": value}
    return value


def _while_another_thread_is_encoding(call: Callable[[], Any]) -> tuple[Any, Any]:
    """``call()`` in a thread held inside Gate's adapter, and meanwhile ``call()`` here;
    both results (or exceptions)."""
    results: dict[str, Any] = {}

    def held() -> None:
        try:
            results["held"] = call()
        except BaseException as exc:
            results["held"] = exc

    thread = threading.Thread(target=held)
    _HOLDER.held, _HOLDER.inside, _HOLDER.release = thread, threading.Event(), threading.Event()
    thread.start()
    try:
        assert _HOLDER.inside.wait(timeout=30), "the held thread never reached the adapter"
        try:
            results["here"] = call()
        except BaseException as exc:
            results["here"] = exc
    finally:
        _HOLDER.release.set()
        thread.join()
        _HOLDER.held = None
    return results["held"], results["here"]


def test_history_compares_inline_values_in_two_threads_at_once() -> None:
    repo = snapvc.open("memory://")
    for n in range(3):
        repo.commit({"v": _deep(Gate(n), 60), "step": n}, message=f"v {n}")

    def history() -> list[tuple[str, Any]]:
        return [(entry.commit.message, entry.value) for entry in repo.history("main", "v")]

    expected = [(f"v {n}", _deep(Gate(n), 60)) for n in reversed(range(3))]
    held, here = _while_another_thread_is_encoding(history)
    assert here == expected
    assert held == expected


def test_merges_compare_inline_values_in_two_threads_at_once() -> None:
    repo = snapvc.open("memory://")
    # The document is an object of its own, so the merge compares the roots entry by
    # entry (a root without references would be compared whole first).
    base = {"v": _deep(Gate(0), 60), "a": 0, "b": 0, "doc": "a long document " * 200}
    repo.commit(base, message="base")
    for n in range(2):
        repo.branch(f"ours-{n}", at="main")
        repo.commit({**base, "a": 1}, branch=f"ours-{n}", message="ours")
        repo.branch(f"theirs-{n}", at="main")
        repo.commit({**base, "b": 1}, branch=f"theirs-{n}", message="theirs")
    taken = iter(range(2))

    def merge() -> dict[str, Any]:
        n = next(taken)
        result = repo.merge(f"theirs-{n}", into=f"ours-{n}")
        assert not result.conflicts, result.conflicts
        return repo.checkout(result.commit.id)

    expected = {**base, "a": 1, "b": 1}
    held, here = _while_another_thread_is_encoding(merge)
    assert here == expected
    assert held == expected


if __name__ == "__main__":  # a stress, run by _in_child
    print(STRESSES[sys.argv[1]](Path(sys.argv[2])))
