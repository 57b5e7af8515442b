"""``SnapvcConversations``: Pydantic AI's ``ConversationStore`` on a repository, with real
``Agent`` runs on Pydantic AI's offline models (``TestModel``, ``FunctionModel``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import UsageLimits

from snapvc.errors import CheckpointNotFoundError, InvalidRefNameError, SnapvcError
from snapvc.integrations.pydantic_ai import ConversationConflictError, SnapvcConversations, messages_to_data

NOW = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def every_kind() -> list[ModelMessage]:
    # BinaryContent of an image reads back as Pydantic AI's narrowed BinaryImage (as its
    # own JSON round trip does): built narrowed here, so equality is exact.
    image = BinaryContent.narrow_type(BinaryContent(b"\x89PNG\r\n\x00\xff", media_type="image/png"))
    return [
        ModelRequest(parts=[SystemPromptPart("You are terse.", timestamp=NOW),
                            UserPromptPart(["Look:", ImageUrl("https://example.com/cat.png"), image], timestamp=NOW)]),
        ModelResponse(parts=[ThinkingPart("a cat, probably", signature="sig-1"), TextPart("Checking."),
                             ToolCallPart("lookup", {"q": "cat", "n": [1, 2]}, tool_call_id="call-1")],
                      model_name="fn-model", timestamp=NOW),
        ModelRequest(parts=[ToolReturnPart("lookup", {"raw": b"\x00\x01bytes", "when": NOW}, tool_call_id="call-1",
                                           timestamp=NOW),
                            ToolReturnPart("lookup", "n must be small", tool_call_id="call-2", outcome="retried",
                                           timestamp=NOW),
                            RetryFeedbackPart("answer in one word", retry=RetryInfo("validation_error", attempt=1),
                                              timestamp=NOW)]),
        ModelResponse(parts=[TextPart("A cat.")], model_name="fn-model", timestamp=NOW),
    ]


def weather_agent(model: Any = None) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model or TestModel())

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


def echo_model(tag: str) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = messages[-1].parts[-1]
        return ModelResponse(parts=[TextPart(f"{tag}: {getattr(prompt, 'content', '')}")])
    return FunctionModel(reply, model_name=f"echo-{tag}")


NO_LIMIT = UsageLimits(request_limit=None)


def test_every_part_kind_round_trips_as_plain_data(tmp_path: Path) -> None:
    location = tmp_path / "chats.snapvc"
    messages = every_kind()

    async def scenario() -> None:
        with SnapvcConversations(location) as store:
            await store.save(Conversation(conversation_id="kinds", messages=messages))
        with SnapvcConversations(location) as again:  # nothing cached: read from the file
            loaded = await again.load("kinds")
            assert loaded is not None
            assert loaded.messages == messages
            tool_return = loaded.messages[2].parts[0]
            assert isinstance(tool_return, ToolReturnPart)
            assert tool_return.content == {"raw": b"\x00\x01bytes", "when": NOW}  # bytes stay bytes
            # Stored as plain data, a dict per message and per part, timestamps typed.
            state = again.repo.checkout("kinds")
            assert state["messages"] == messages_to_data(messages)
            assert state["messages"][1]["parts"][2] == {**state["messages"][1]["parts"][2],
                                                        "part_kind": "tool-call", "args": {"q": "cat", "n": [1, 2]}}
            assert state["messages"][0]["parts"][0]["timestamp"] == NOW
            assert type(state["messages"][0]["parts"][1]["content"][2]["data"]) is bytes
            assert len(state["entry_ids"]) == 4

    asyncio.run(scenario())


def test_agent_turns_then_a_fresh_process_loads_the_conversation(tmp_path: Path) -> None:
    location = tmp_path / "chats.snapvc"
    agent = weather_agent()

    async def scenario() -> list[ModelMessage]:
        with SnapvcConversations(location) as store:
            result = None
            for prompt in ["Weather in Paris?", "And in Rome?", "Thanks"]:
                conversation = await store.load("trip") or Conversation(conversation_id="trip")
                result = await agent.run(prompt, conversation=conversation, usage_limits=NO_LIMIT)
                await store.save(result)
            assert result is not None
            log = list(store.repo.log("trip"))
            total = len(result.all_messages())
            # A commit per save, newest first; the first run called the tool (4 messages).
            assert [c.metadata["messages"] for c in log] == [total, total - 2, 4]
            assert log[0].metadata["conversation_id"] == "trip"
            assert log[0].metadata["model_name"] == "test"
            responses = sum(isinstance(m, ModelResponse) for m in result.all_messages())
            assert log[0].metadata["token_usage"]["requests"] == responses
            # message_history= takes them too
            loaded = await store.load("trip")
            assert loaded is not None
            follow = await agent.run("Bye", message_history=loaded.messages)
            assert follow.all_messages()[:total] == loaded.messages
            return result.all_messages()

    expected = asyncio.run(scenario())
    code = ("import asyncio, sys\n"
            "from pydantic_ai.messages import ModelMessagesTypeAdapter\n"
            "from snapvc.integrations.pydantic_ai import SnapvcConversations\n"
            "store = SnapvcConversations(sys.argv[1])\n"
            "c = asyncio.run(store.load('trip'))\n"
            "sys.stdout.buffer.write(ModelMessagesTypeAdapter.dump_json(c.messages))\n")
    out = subprocess.run([sys.executable, "-c", code, str(location)], capture_output=True, check=True)
    assert ModelMessagesTypeAdapter.validate_json(out.stdout) == expected


def test_fork_at_a_message_and_continue_differently(tmp_path: Path) -> None:
    async def scenario() -> None:
        with SnapvcConversations(tmp_path / "chats.snapvc") as store:
            conversation = Conversation(conversation_id="main-chat")
            for prompt in ["one", "two", "three"]:
                result = await weather_agent(echo_model("a")).run(prompt, conversation=conversation)
                await store.save(result)
                conversation = result.conversation
            fork = await store.fork("main-chat", at=2, new_conversation_id="what-if")
            assert len(fork.messages) == 2
            other = await weather_agent(echo_model("b")).run("TWO", conversation=fork)
            await store.save(other)

            original = await store.load("main-chat")
            forked = await store.load("what-if")
            assert original is not None and forked is not None
            assert [m.parts[-1].content for m in original.messages] == ["one", "a: one", "two", "a: two", "three",
                                                                         "a: three"]
            assert [m.parts[-1].content for m in forked.messages] == ["one", "a: one", "TWO", "b: TWO"]
            assert forked.messages[:2] == original.messages[:2]
            record = await store.read_record("what-if")
            assert record is not None and record.forked_from == "main-chat"
            # In the repository: the fork's first commit follows a commit of main-chat.
            repo = store.repo
            main_ids = {c.id for c in repo.log("main-chat")}
            own = [c for c in repo.log("what-if") if c.id not in main_ids]
            assert [c.metadata["messages"] for c in own] == [4, 2]
            assert own[-1].parent in main_ids and own[-1].message == "fork of 'main-chat' at message 2: 2 messages"
            assert repo.get_commit(repo.resolve("what-if")).metadata["model_name"] == "echo-b"
            listed = [r.conversation_id for r in await store.list_conversations()]
            assert listed == ["what-if", "main-chat"]  # newest save first

    asyncio.run(scenario())


def test_a_rewritten_history_is_a_new_commit_and_the_old_line_stays(tmp_path: Path) -> None:
    location = tmp_path / "chats.snapvc"

    async def scenario() -> None:
        with SnapvcConversations(location) as store:
            messages = every_kind()
            await store.save(Conversation(conversation_id="edit", messages=messages))
            old_tip = store.repo.resolve("edit")
            # An edited past, saved as a plain conversation: its messages from the first
            # difference on replace the stored ones, in a commit after the old tip.
            edited = [*messages[:2], ModelRequest(parts=[UserPromptPart("never mind", timestamp=NOW)])]
            loaded = await store.load("edit")
            assert loaded is not None
            await store.save(Conversation(conversation_id="edit", messages=edited, revision=loaded.revision))
            commit = store.repo.get_commit(store.repo.resolve("edit"))
            assert commit.parent == old_tip
            assert commit.metadata["new_from"] == 2 and commit.metadata["messages"] == 3
            reloaded = await store.load("edit")
            assert reloaded is not None and reloaded.messages == edited
            record = await store.read_record("edit")
            assert record is not None and len(record.branches) == 1
            changes = store.repo.diff(old_tip, "edit", paths="messages")
            assert {c.path[:2] for c in changes} >= {("messages", 2), ("messages", 3)}
        with SnapvcConversations(location) as fresh:  # the old line is found from its entry id alone
            record = await fresh.read_record("edit")
            assert record is not None
            back = await fresh.branch("edit", from_entry=record.branches[0], expected_revision=record.revision)
            assert back.messages == messages

    asyncio.run(scenario())


def test_a_save_stores_the_new_messages_not_the_history(tmp_path: Path) -> None:
    location = tmp_path / "long.snapvc"

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"answer {len(messages)}: " + "lorem ipsum dolor sit amet " * 8)])

    agent: Agent[None, str] = Agent(FunctionModel(reply))

    async def scenario() -> tuple[int, int, int, int]:
        with SnapvcConversations(location) as store:
            conversation = Conversation(conversation_id="long")
            for i in range(250):  # 500 messages
                result = await agent.run(f"question {i} " + "tell me more " * 6, conversation=conversation,
                                         usage_limits=NO_LIMIT)
                await store.save(result)
                conversation = result.conversation
            before = store.repo.stats().stored_bytes
            result = await agent.run("one more", conversation=conversation, usage_limits=NO_LIMIT)
            await store.save(result)
            in_process = store.repo.stats().stored_bytes - before
        with SnapvcConversations(location) as fresh:
            loaded = await fresh.load("long")
            assert loaded is not None and len(loaded.messages) == 502
            before = fresh.repo.stats().stored_bytes
            result = await agent.run("and another", conversation=loaded, usage_limits=NO_LIMIT)
            await fresh.save(result)
            fresh_process = fresh.repo.stats().stored_bytes - before
            whole = len(json.dumps(messages_to_data(result.all_messages()), default=str))
            new = len(json.dumps(messages_to_data(result.new_messages()), default=str))
        return in_process, fresh_process, whole, new

    in_process, fresh_process, whole, new = asyncio.run(scenario())
    # Two new messages of ~1.5 KB against a history of ~390 KB (as JSON): a save costs a few KB.
    assert new < 2_000 and whole > 350_000
    assert 0 < in_process < 8_000, in_process
    assert 0 < fresh_process < 8_000, fresh_process


def test_concurrent_saves(tmp_path: Path) -> None:
    location = tmp_path / "chats.snapvc"

    async def two_conversations() -> None:
        with SnapvcConversations(location) as store:
            async def talk(cid: str) -> None:
                conversation = Conversation(conversation_id=cid)
                for i in range(5):
                    result = await weather_agent(echo_model(cid)).run(f"{cid} {i}", conversation=conversation)
                    await store.save(result)
                    conversation = result.conversation
            await asyncio.gather(talk("left"), talk("right"))
            for cid in ("left", "right"):
                loaded = await store.load(cid)
                assert loaded is not None
                assert [m.parts[-1].content for m in loaded.messages][1::2] == [f"{cid}: {cid} {i}" for i in range(5)]
                assert len(list(store.repo.log(cid))) == 5

    asyncio.run(two_conversations())

    # One conversation, two stores (as two processes would have) saving what each loaded.
    async def load(store: SnapvcConversations) -> Conversation:
        loaded = await store.load("left")
        assert loaded is not None
        return loaded

    with SnapvcConversations(location) as one, SnapvcConversations(location) as two:
        a, b = asyncio.run(load(one)), asyncio.run(load(two))
        errors: list[BaseException] = []

        def save(store: SnapvcConversations, conversation: Conversation, text: str) -> None:
            conversation.messages.append(ModelRequest(parts=[UserPromptPart(text, timestamp=NOW)]))
            try:
                asyncio.run(store.save(conversation))
            except BaseException as e:  # noqa: BLE001 - collected and checked below
                errors.append(e)

        workers = [threading.Thread(target=save, args=(s, c, t)) for s, c, t in ((one, a, "from one"), (two, b, "from two"))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert len(errors) == 1, errors
        assert isinstance(errors[0], ConversationConflict) and isinstance(errors[0], SnapvcError)
        final = asyncio.run(load(one))
        assert len(final.messages) == 11
        assert final.messages[-1].parts[0].content in ("from one", "from two")


def test_bad_ids_and_what_is_not_a_conversation(tmp_path: Path) -> None:
    async def scenario() -> None:
        with SnapvcConversations(tmp_path / "chats.snapvc") as store:
            with pytest.raises(InvalidRefNameError):
                await store.load("")
            with pytest.raises(InvalidRefNameError):
                await store.save(Conversation(conversation_id=""))
            assert await store.load("never-saved") is None
            # An id with characters a branch name cannot hold is escaped, and comes back.
            await store.save(Conversation(conversation_id="user 1/chat:2", messages=every_kind()[:1]))
            assert store.repo.branches().keys() >= {"user%201%2Fchat%3A2"}
            assert [r.conversation_id for r in await store.list_conversations()] == ["user 1/chat:2"]
            # A branch of something else is no conversation: not loaded, not listed, not overwritten.
            store.repo.commit({"x": 1}, branch="main")
            assert await store.load("main") is None
            with pytest.raises(ConversationConflictError, match="holds no conversation"):
                await store.save(Conversation(conversation_id="main", messages=every_kind()[:1]))
            assert store.repo.checkout("main") == {"x": 1}
            with pytest.raises(CheckpointNotFoundError, match="no-such-entry"):
                await store.read_entry("no-such-entry")
            with pytest.raises(ConversationConflict):  # saved as new, but it exists
                await store.save(Conversation(conversation_id="user 1/chat:2", messages=every_kind()))

    asyncio.run(scenario())


def test_delete_and_scopes(tmp_path: Path) -> None:
    async def scenario() -> None:
        with SnapvcConversations(tmp_path / "chats.snapvc") as store:
            await store.save(Conversation(conversation_id="a", messages=every_kind()), scope="alice")
            await store.save(Conversation(conversation_id="b", messages=every_kind()[:2]), scope="bob")
            fork = await store.fork("a", at=2, new_conversation_id="a2")
            assert [r.conversation_id for r in await store.list_conversations(scope="alice")] == ["a2", "a"]
            assert await store.load("a", scope="bob") is None
            await store.delete("a", scope="bob")  # another owner's: left as it is
            assert await store.load("a") is not None
            await store.delete("a")
            assert await store.load("a") is None
            assert "a" not in store.repo.branches()
            # The fork keeps the history it shares with the deleted conversation.
            kept = await store.load("a2")
            assert kept is not None and kept.messages == fork.messages == every_kind()[:2]
            assert [r.conversation_id for r in await store.list_conversations()] == ["a2", "b"]

    asyncio.run(scenario())


def test_cli_diff_between_two_saves_shows_the_messages(tmp_path: Path) -> None:
    location = tmp_path / "chats.snapvc"

    async def scenario() -> None:
        with SnapvcConversations(location) as store:
            agent = weather_agent(echo_model("x"))
            first = await agent.run("hello", conversation=Conversation(conversation_id="cli"))
            await store.save(first)
            second = await agent.run("how are you", conversation=first.conversation)
            await store.save(second)

    asyncio.run(scenario())
    out = subprocess.run([sys.executable, "-m", "snapvc", "--color", "never", "--no-pager", "diff", "--repo",
                          str(location), "cli~1", "cli"], capture_output=True, text=True, check=True).stdout
    assert "messages" in out and "[2]" in out and "[3]" in out
    assert '+ [2]: {"conversation_id": "cli", "instructions": null, "kind": "request"' in out
    assert '"content": "how are you"' in out
    as_json = subprocess.run([sys.executable, "-m", "snapvc", "diff", "--json", "--repo", str(location), "cli~1", "cli"],
                             capture_output=True, text=True, check=True).stdout
    assert "x: how are you" in as_json
    log = subprocess.run([sys.executable, "-m", "snapvc", "--color", "never", "--no-pager", "log", "--oneline",
                          "--repo", str(location), "cli"], capture_output=True, text=True, check=True).stdout
    assert "cli: 4 messages (+2)" in log and "cli: 2 messages (+2)" in log


def test_a_record_written_as_new_never_replaces_a_stored_conversation(tmp_path: Path) -> None:
    """``write_record(..., expected_revision=None)`` means "this conversation is new"
    (Pydantic AI's ``ConversationStore`` contract): if one is stored under that id, it is
    a ``ConversationConflict`` and the stored one stays. A fork onto an existing id writes
    so, and two writers that each found no conversation and create it."""
    location = tmp_path / "chats.snapvc"

    async def scenario() -> None:
        with SnapvcConversations(location) as store, SnapvcConversations(location) as other:
            await store.save(Conversation(conversation_id="a", messages=every_kind()))
            await store.save(Conversation(conversation_id="b", messages=every_kind()[:2]))
            tip = store.repo.resolve("b")
            with pytest.raises(ConversationConflict):
                await store.fork("a", new_conversation_id="b")
            assert store.repo.resolve("b") == tip
            loaded = await store.load("b")
            assert loaded is not None and loaded.messages == every_kind()[:2] and loaded.conversation_id == "b"

            # Two writers create conversation "c": both found none; the second is refused.
            assert await store.read_record("c") is None and await other.read_record("c") is None
            mine = await store.read_record("a")
            assert mine is not None
            await store.write_record(dataclasses.replace(mine, conversation_id="c", revision="first"),
                                     expected_revision=None)
            with pytest.raises(ConversationConflict):
                await other.write_record(dataclasses.replace(mine, conversation_id="c", revision="second",
                                                             head_id=None), expected_revision=None)
            record = await other.read_record("c")
            assert record is not None and record.revision == "first"
            assert (await other.load("c")).messages == every_kind()  # type: ignore[union-attr]

    asyncio.run(scenario())
