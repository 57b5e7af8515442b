"""Resumable execution of agent steps: a checkpoint after each step, a rollback when one
fails, and a restart that continues where the last run stopped.

    from snapvc.agent.runner import Runner, Step, END

    runner = Runner(repo.state("job-42"), [fetch, analyze, Step(report, retries=2)], agent_id="researcher")
    checkpoint = runner.run()        # or: await runner.arun()

A step is a callable over the ``State`` (``def`` or ``async def``) that changes it and
returns None or a mapping of JSON metrics. After each step that returns, the runner
snapshots the state (``"step 3: analyze"``) with flat metadata, so that
``repo.log(where={"step_name": "analyze"})`` and ``thread.get(step=3)`` find it:

=============  ==========================================================================
key            value
=============  ==========================================================================
``step``       the step's number in the run, 1, 2, 3 … (continuing across restarts; a
               step a loop runs again gets a new number each time)
``step_name``  the step's name
``agent_id``   the step's ``agent_id``, else the runner's (absent when neither is set)
``status``     ``"completed"``
``metrics``    what the step returned, when it returned a mapping
``duration``   the step's run time in seconds (a float)
``next_step``  the name of the step to run next; None when the run is finished
=============  ==========================================================================

Order and graphs
----------------
Steps run in list order unless a ``Step`` says otherwise with ``next``: a step name,
``END``, or a route ``route(state) -> name | END`` called after the step (branches and
loops). ``Runner`` checks the names it can (unique names, known ``next``) when built.

Failure and resume
------------------
Each step runs inside ``state.rollback_on_error()``: when it raises, the working copy
is back as it was after the last completed step, the step is tried again up to
``retries`` times, and then its exception goes on, with a note naming the step and the
checkpoint the state is back at. Failures are not committed. ``run()`` reads where to
start from the state's last checkpoint: its ``next_step`` (resume there, numbering on),
None (the run is finished: ``run()`` returns that checkpoint, ``run(restart=True)``
starts again from the first step), or no runner metadata (start at the first step).
A step is therefore run again after a crash only if its checkpoint was not written:
steps with effects outside the state should tolerate running twice.

Durability
----------
``durability=`` says when each checkpoint reaches the file (the modes of
``snapvc.backends.sqlite.file`` are the repository's; a memory repository keeps nothing):

==========  ===============================================================================
mode        what survives
==========  ===============================================================================
``sync``    the repository is in its ``"sync"`` mode for the run (its previous mode comes
            back after): every completed step's checkpoint is on disk (fsync) before the
            next step starts, and survives a process crash and a power loss.
``normal``  (default) each checkpoint is committed before the next step starts, in the
            repository's own mode: it survives a process crash. A power loss may lose
            the last few checkpoints in ``"normal"`` (a restart resumes after the last
            one that survived); in ``"batch"`` it may lose more, or rarely damage the file.
``exit``    the run is one ``repo.deferred()`` block: all its checkpoints are written in
            one transaction when the run ends, returning or raising (faster). A process
            crash during the run loses all of them: the restart starts again where this
            run started. Once the run has ended they survive a process crash, and a power
            loss as one commit of the repository's mode does (in ``"normal"`` they may be
            lost together). Until it ends, other processes read the repository as it was
            before the run and wait to write; other threads of this process wait to read
            and write.
==========  ===============================================================================

Async
-----
``arun()`` awaits async steps (sync ones are called as they are) and takes each
snapshot on a worker thread (``asyncio.to_thread``), so the event loop is free while
it is encoded and written; a cancellation during a snapshot waits for it to end (the
working copy and its branch must agree) and then goes on. In ``"exit"`` mode snapshots
are taken on the event loop's thread: the deferred block belongs to that thread (only
it may use the repository until the block ends), and they write nothing to the file
until the run ends. ``run()`` refuses async steps.

A ``Runner`` and its ``State`` belong to one thread or task at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from snapvc.errors import InvalidArgumentError, InvalidStepError, ResumeError, StepContractError
from snapvc.agent.state import Checkpoint, State
from snapvc.agent.threads import Thread

__all__ = ["END", "Runner", "Step"]

DURABILITY_MODES: Final = ("sync", "normal", "exit")


class _End:
    """The type of ``END``: one value, shown as ``END``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END"

    def __copy__(self) -> _End:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _End:
        return self


END: Final = _End()
"""``next=END`` (or a route returning it): no step follows; the run is finished."""

StepFunction: TypeAlias = Callable[[State], "Mapping[str, Any] | None | Awaitable[Mapping[str, Any] | None]"]
Route: TypeAlias = Callable[[State], "str | _End"]
Next: TypeAlias = "str | _End | Route | None"


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a ``Runner``: ``fn(state)`` (sync or async) changes the state and
    returns None or a mapping of JSON metrics.

    - ``name``: defaults to ``fn.__name__``; unique within a runner;
    - ``next``: what runs after it: None = the following step of the list (``END``
      after the last), a step name, ``END``, or a route ``route(state) -> name | END``;
    - ``retries``: how many more times it is tried after it raises;
    - ``agent_id``: stamped on its checkpoints (instead of the runner's).
    """

    fn: StepFunction
    name: str = None  # type: ignore[assignment]  # set from fn when not given
    next: Next = field(default=None, kw_only=True)
    retries: int = field(default=0, kw_only=True)
    agent_id: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        given = self.name if isinstance(self.name, str) else None
        if not callable(self.fn):
            raise InvalidStepError(given, f"a step's fn is a callable taking the state, not a {type(self.fn).__name__}")
        if self.name is None:
            name = getattr(self.fn, "__name__", None)
            if not isinstance(name, str):
                raise InvalidStepError(None, f"{self.fn!r} has no __name__: give the step a name (Step(fn, 'name'))")
            object.__setattr__(self, "name", name)
        if not isinstance(self.name, str) or not self.name:
            raise InvalidStepError(None, f"a step's name is a non-empty str, not {self.name!r}")
        if not (self.next is None or self.next is END or isinstance(self.next, str) or callable(self.next)):
            raise InvalidStepError(self.name, f"step {self.name!r}: next is a step name, END, a route callable or "
                                              f"None, not a {type(self.next).__name__}")
        if type(self.retries) is not int or self.retries < 0:
            raise InvalidStepError(self.name, f"step {self.name!r}: retries is an int >= 0, not {self.retries!r}")
        if self.agent_id is not None and not isinstance(self.agent_id, str):
            raise InvalidStepError(self.name, f"step {self.name!r}: agent_id is a str or None, "
                                              f"not a {type(self.agent_id).__name__}")

    @property
    def is_async(self) -> bool:
        """True when ``fn`` is an ``async def`` (only ``Runner.arun`` can run it)."""
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(type(self.fn).__call__)


class Runner:
    """Runs ``steps`` over a ``State`` (or a ``Thread``'s), a checkpoint after each; see
    the module notes. ``on_checkpoint(checkpoint)`` is called after each step's
    checkpoint is committed (in ``"exit"`` mode: added to the run's transaction); an
    error it raises stops the run after that step.

    - ``state``: the working copy the steps change; ``steps``: the ``Step``s;
    - ``last_completed``: the checkpoint of the run's last completed step (also one an
      earlier, interrupted ``run()`` wrote: where the next one resumes), or None;
    - ``next_step``: the name of the step ``run()`` would execute, None if the run is
      finished (``finished``);
    - ``resumed``: True after a ``run()`` that continued an earlier, interrupted one.
    """

    def __init__(self, target: State | Thread, steps: Sequence[Step | StepFunction], *, agent_id: str | None = None,
                 durability: str = "normal", on_checkpoint: Callable[[Checkpoint], None] | None = None) -> None:
        if isinstance(target, Thread):
            target = target.state()
        if not isinstance(target, State):
            raise InvalidArgumentError("target", f"a Runner runs over a State or a Thread, not a {type(target).__name__}")
        if durability not in DURABILITY_MODES:
            raise InvalidArgumentError("durability", f"durability must be one of {', '.join(map(repr, DURABILITY_MODES))}, "
                                                     f"got {durability!r}")
        if agent_id is not None and not isinstance(agent_id, str):
            raise InvalidArgumentError("agent_id", f"agent_id is a str or None, not a {type(agent_id).__name__}")
        if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
            raise InvalidStepError(None, f"steps is a list of Steps or callables, not a {type(steps).__name__}")
        if not steps:
            raise InvalidStepError(None, "a Runner needs at least one step")
        self.state = target
        self.agent_id = agent_id
        self.durability = durability
        self.on_checkpoint = on_checkpoint
        self.steps: tuple[Step, ...] = tuple(s if isinstance(s, Step) else Step(s) for s in steps)
        self._by_name: dict[str, Step] = {}
        for step in self.steps:
            if step.name in self._by_name:
                raise InvalidStepError(step.name, f"two steps are named {step.name!r}: step names must be unique")
            self._by_name[step.name] = step
        for step in self.steps:
            if isinstance(step.next, str) and step.next not in self._by_name:
                raise InvalidStepError(step.name, f"step {step.name!r}: next step {step.next!r} is not a step of this "
                                                  f"runner (steps: {', '.join(self._by_name)})")
        self._after = {step.name: (self.steps[i + 1] if i + 1 < len(self.steps) else None)
                       for i, step in enumerate(self.steps)}
        self.resumed = False

    def __repr__(self) -> str:
        return f"<snapvc.Runner of {len(self.steps)} steps on {self.state.branch!r}, next: {self.next_step!r}>"

    # -- where the run stands ---------------------------------------------------------------

    @property
    def last_completed(self) -> Checkpoint | None:
        """The checkpoint of the last completed step: the state's last checkpoint when a
        runner wrote it (its metadata has ``next_step``), else None."""
        checkpoint = self.state.checkpoint
        return checkpoint if checkpoint is not None and "next_step" in checkpoint.metadata else None

    @property
    def next_step(self) -> str | None:
        """The name of the step ``run()`` would execute next; None if the run is finished."""
        return self._position()[0]

    @property
    def finished(self) -> bool:
        """True when the state's last checkpoint is the final step of a run."""
        return self.next_step is None

    def _position(self) -> tuple[str | None, int, Checkpoint | None]:
        """Where a plain ``run()`` starts: (step name, or None if the run is finished; the
        number it gets; the runner checkpoint it continues, or None)."""
        checkpoint = self.state.checkpoint
        if checkpoint is None or "next_step" not in checkpoint.metadata:
            return self.steps[0].name, 1, None
        done = checkpoint.metadata.get("step")
        following = checkpoint.metadata["next_step"]
        if type(done) is not int or not (following is None or isinstance(following, str)):
            raise ResumeError(checkpoint.id, None, f"checkpoint {checkpoint.id[:12]} holds runner metadata that is not "
                                                   f"a runner's: step={done!r}, next_step={following!r}")
        return following, done + 1, checkpoint

    def _final(self) -> Checkpoint:
        """The final checkpoint of a finished run."""
        checkpoint = self.last_completed
        assert checkpoint is not None, "a finished run ends with a runner checkpoint"
        return checkpoint

    def _begin(self, restart: bool) -> tuple[Step, int] | None:
        """The first step of this ``run()`` and its number; None if the run is finished
        (``last_completed`` is then its final checkpoint)."""
        self.resumed = False
        if restart:
            return self.steps[0], 1
        name, number, continued = self._position()
        if name is None:
            return None
        step = self._by_name.get(name)
        if step is None:
            raise ResumeError(continued.id if continued else None, name,
                              f"checkpoint {continued.id[:12] if continued else '?'} resumes at step {name!r}, "
                              f"which this runner does not have (steps: {', '.join(self._by_name)}): "
                              "the steps changed since; run(restart=True) starts again from the first")
        self.resumed = continued is not None
        return step, number

    # -- running ----------------------------------------------------------------------------

    def run(self, *, restart: bool = False) -> Checkpoint:
        """Run the steps from where the last run stopped (or from the first, with
        ``restart``) to the end; returns the final step's checkpoint. A finished run
        returns its final checkpoint without running anything."""
        waiting = [step.name for step in self.steps if step.is_async]
        if waiting:
            which = f"steps {', '.join(map(repr, waiting))} are" if len(waiting) > 1 else f"step {waiting[0]!r} is"
            raise InvalidStepError(waiting[0], f"{which} async: use 'await runner.arun()'")
        start = self._begin(restart)
        if start is None:
            return self._final()
        step: Step | None
        step, number = start
        with self._durability():
            while step is not None:
                checkpoint, step = self._run_step(step, number)
                self._completed(checkpoint)
                number += 1
        return checkpoint

    async def arun(self, *, restart: bool = False) -> Checkpoint:
        """``run`` for the event loop: async steps are awaited, snapshots are taken off
        the loop (see the module notes)."""
        start = self._begin(restart)
        if start is None:
            return self._final()
        step: Step | None
        step, number = start
        with self._durability():
            while step is not None:
                checkpoint, step, cancelled = await self._arun_step(step, number)
                self._completed(checkpoint)
                if cancelled:
                    raise asyncio.CancelledError()
                number += 1
        return checkpoint

    def _run_step(self, step: Step, number: int) -> tuple[Checkpoint, Step | None]:
        attempts = step.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                with self.state.rollback_on_error():
                    started = time.perf_counter()
                    result = step.fn(self.state)
                    duration = time.perf_counter() - started
                    if inspect.isawaitable(result):
                        if inspect.iscoroutine(result):
                            result.close()
                        raise StepContractError(step.name, f"step {step.name!r} returned an awaitable: "
                                                           "use 'await runner.arun()'")
                    following = self._following(step)
                    checkpoint = self.state.snapshot(*self._record(step, number, result, duration, following))
            except Exception as exc:
                if attempt < attempts and not isinstance(exc, StepContractError):
                    continue
                self._explain(exc, step, number, attempt)
                raise
            return checkpoint, following
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _arun_step(self, step: Step, number: int) -> tuple[Checkpoint, Step | None, bool]:
        attempts = step.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                async with self.state.rollback_on_error():
                    started = time.perf_counter()
                    result = step.fn(self.state)
                    if inspect.isawaitable(result):
                        result = await result
                    duration = time.perf_counter() - started
                    following = self._following(step)
                    message, metadata = self._record(step, number, result, duration, following)
                    if self.durability == "exit":
                        checkpoint, cancelled = self.state.snapshot(message, metadata), False
                    else:
                        checkpoint, cancelled = await self._snapshot_off_loop(message, metadata)
            except Exception as exc:
                if attempt < attempts and not isinstance(exc, StepContractError):
                    continue
                self._explain(exc, step, number, attempt)
                raise
            return checkpoint, following, cancelled
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _snapshot_off_loop(self, message: str, metadata: dict[str, Any]) -> tuple[Checkpoint, bool]:
        """The snapshot, taken on a worker thread, and whether the task was cancelled
        meanwhile. A cancellation waits for the snapshot to end: raised inside the step's
        rollback block after the branch moved, it would put the working copy back behind
        its own checkpoint. The caller raises it once the step is recorded."""
        snapshot = asyncio.ensure_future(asyncio.to_thread(self.state.snapshot, message, metadata))
        cancelled = False
        while True:
            try:
                return await asyncio.shield(snapshot), cancelled
            except asyncio.CancelledError:
                if snapshot.cancelled():
                    raise
                cancelled = True

    def _following(self, step: Step) -> Step | None:
        """The step after ``step`` (its route is asked now, over the changed state)."""
        target = step.next
        if target is None:
            return self._after[step.name]
        if isinstance(target, _End):
            return None
        if isinstance(target, str):
            return self._by_name[target]
        name = target(self.state)
        if isinstance(name, _End):
            return None
        if isinstance(name, str) and name in self._by_name:
            return self._by_name[name]
        raise StepContractError(step.name, f"step {step.name!r}: its route returned {name!r}, which is not a step of "
                                           f"this runner (steps: {', '.join(self._by_name)}) nor END")

    def _record(self, step: Step, number: int, result: Any, duration: float,
                following: Step | None) -> tuple[str, dict[str, Any]]:
        """The message and metadata of the step's checkpoint."""
        if result is not None and not isinstance(result, Mapping):
            raise StepContractError(step.name, f"step {step.name!r} returned a {type(result).__name__}: "
                                               "a step returns None or a mapping of metrics")
        metadata: dict[str, Any] = {"step": number, "step_name": step.name}
        agent_id = step.agent_id if step.agent_id is not None else self.agent_id
        if agent_id is not None:
            metadata["agent_id"] = agent_id
        metadata["status"] = "completed"
        if result is not None:
            metadata["metrics"] = dict(result)
        metadata["duration"] = duration
        metadata["next_step"] = following.name if following is not None else None
        return f"step {number}: {step.name}", metadata

    def _completed(self, checkpoint: Checkpoint) -> None:
        if self.on_checkpoint is not None:
            self.on_checkpoint(checkpoint)

    def _explain(self, exc: BaseException, step: Step, number: int, attempts: int) -> None:
        """Add a note to the step's exception: which step, where the state is back at,
        and what running again does."""
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        checkpoint = self.state.checkpoint
        if checkpoint is None:
            back = "the state is back as it was before the step (the branch has no checkpoint yet)"
        else:
            back = f"the state is back at checkpoint {checkpoint.id[:12]} ({checkpoint.message or 'no message'})"
        try:
            name, again, _ = self._position()
        except ResumeError:
            then = ""
        else:
            if name is None:
                then = "; run(restart=True) starts the run again"
            else:
                then = f"; running again resumes at step {again} ({name!r})"
        exc.add_note(f"snapvc.Runner: step {number} ({step.name!r}) failed{tries}; {back}{then}")

    @contextmanager
    def _durability(self) -> Iterator[None]:
        repo = self.state.repo
        if self.durability == "sync":
            before = repo.durability
            repo.durability = "sync"
            try:
                yield
            finally:
                repo.durability = before
        elif self.durability == "exit":
            with repo.deferred():
                yield
        else:
            yield
