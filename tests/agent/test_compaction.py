"""Compaction: the oldest messages leave the conversation before it outgrows the context window,
never parting a tool call from its result nor touching the latest user turns; listeners are told
exactly what left; the app's prompt writes the summary (no prompt: truncation); a provider's
"context too long" compacts and retries once."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import pytest

from looping_core.agent import (
    Compaction,
    Compactor,
    ContextTooLong,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    StreamEnd,
    displaceable,
    estimate_tokens,
    run_tool_loop,
)
from looping_core.config import Config, PluginsConfig
from looping_core.content import (
    AssistantMessage,
    ImageBlock,
    Message,
    TextBlock,
    TextChunk,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from looping_core.contract import Identity, SessionRef
from looping_core.plugins import PluginHost
from looping_core.testing import ScriptedModel


def user(text: str) -> UserMessage:
    return UserMessage([TextBlock(text)])


def said(text: str) -> AssistantMessage:
    return AssistantMessage([TextBlock(text)])


CALL = AssistantMessage([ToolUseBlock("c1", "notes.add", {"text": "milk"})])
RESULT = ToolResultMessage([ToolResultBlock("c1", (TextBlock("saved"),))])
CONVERSATION: tuple[Message, ...] = (
    user("one " * 100),
    CALL,
    RESULT,
    said("first answer"),
    user("two " * 100),
    said("second answer"),
    user("three"),
)


def answer(text: str, input_tokens: int = 10) -> list[Any]:
    return [TextChunk(text), StreamEnd(Usage(input_tokens=input_tokens, output_tokens=2), "end")]


class Session:
    """A displacing log in memory."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = list(messages)

    async def displace(self, displaced: Sequence[Message], replacement: Sequence[Message]) -> bool:
        if self.messages[: len(displaced)] != list(displaced):
            return False
        self.messages[: len(displaced)] = replacement
        return True


class Listener:
    def __init__(self) -> None:
        self.told: list[list[Message]] = []

    async def __call__(self, messages: Sequence[Message]) -> None:
        self.told.append(list(messages))


def test_the_cut_keeps_the_latest_user_turns_and_never_parts_a_call_from_its_result() -> None:
    assert displaceable(CONVERSATION, keep_last=1) == 6
    assert displaceable(CONVERSATION, keep_last=2) == 4
    assert displaceable(CONVERSATION, keep_last=3) == 0
    # A tool result is never where a cut falls, however many turns there are.
    for keep in range(1, 4):
        cut = displaceable(CONVERSATION, keep)
        assert cut == 0 or isinstance(CONVERSATION[cut], UserMessage)


def test_the_estimate_counts_text_and_media() -> None:
    text = estimate_tokens([user("x" * 400)])
    picture = estimate_tokens([UserMessage([ImageBlock("image/png", data=b"\0" * 100_000)])])
    assert 100 < text < 110
    assert picture < 1100  # media count as a fixed amount, not by their bytes
    assert estimate_tokens([], system="s" * 40) == 10


async def test_over_the_threshold_the_oldest_turns_are_summarized_and_listeners_told() -> None:
    summarizer = ScriptedModel([answer("Earlier: a note about milk.")])
    session, listener = Session(CONVERSATION), Listener()
    config = Compaction(compact_at=0.5, keep_last=2, prompt="App: summarize.")
    compactor = Compactor(config, 400, [summarizer], session=session, on_displaced=listener)
    request = ModelRequest(CONVERSATION, system="soul")
    assert compactor.over(request)
    compacted = await compactor.compact(request)
    summary = user("Earlier: a note about milk.")
    assert compacted == (summary, *CONVERSATION[4:])
    assert session.messages == list(compacted)
    assert listener.told == [list(CONVERSATION[:4])]
    [asked] = summarizer.requests
    assert asked.system == "App: summarize."
    assert asked.messages == CONVERSATION[:4]
    assert asked.tools == ()
    assert compactor.usage == Usage(input_tokens=10, output_tokens=2)
    assert not compactor.over(ModelRequest(compacted, system="soul"))


async def test_without_a_prompt_it_truncates_and_listeners_are_still_told() -> None:
    session, listener = Session(CONVERSATION), Listener()
    compactor = Compactor(Compaction(keep_last=1), 100, [], session=session, on_displaced=listener)
    compacted = await compactor.compact(ModelRequest(CONVERSATION))
    assert compacted == (user("three"),)
    assert session.messages == [user("three")]
    assert listener.told == [list(CONVERSATION[:6])]


async def test_a_summary_the_models_cannot_write_becomes_truncation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = ScriptedModel([ModelUnavailable("scripted", "down")])
    compactor = Compactor(Compaction(keep_last=1, prompt="App: summarize."), 100, [down])
    assert await compactor.compact(ModelRequest(CONVERSATION)) == (user("three"),)
    assert "truncating instead" in caplog.text


async def test_a_session_that_changed_meanwhile_is_left_as_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = Session((user("someone else's turn"), *CONVERSATION))
    compactor = Compactor(Compaction(keep_last=1), 100, [], session=session)
    assert await compactor.compact(ModelRequest(CONVERSATION)) == (user("three"),)
    assert len(session.messages) == len(CONVERSATION) + 1
    assert "the session changed" in caplog.text


async def test_nothing_is_displaced_within_the_latest_turns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = Listener()
    compactor = Compactor(Compaction(keep_last=3), 10, [], on_displaced=listener)
    assert await compactor.compact(ModelRequest(CONVERSATION)) == CONVERSATION
    assert listener.told == []
    assert "nothing was displaced" in caplog.text


def test_the_providers_count_replaces_the_estimate_once_there_is_one() -> None:
    compactor = Compactor(Compaction(compact_at=0.5), 1000, [])
    request = ModelRequest((user("short"),))
    assert not compactor.over(request)
    response = ModelResponse(
        AssistantMessage([TextBlock("ok")], usage=Usage(input_tokens=600, output_tokens=5)),
        "end",
        served_by="scripted",
    )
    compactor.observe(request, response)
    grown = ModelRequest((*request.messages, response.message, user("next")))
    assert compactor.estimate(grown) == 605 + estimate_tokens([user("next")])
    assert compactor.over(grown)


async def test_the_loop_compacts_before_a_call_that_would_not_fit() -> None:
    model = ScriptedModel([answer("Fine.")])
    listener = Listener()
    compactor = Compactor(Compaction(compact_at=0.5, keep_last=1), 150, [], on_displaced=listener)
    outcome = await run_tool_loop([model], ModelRequest(CONVERSATION), compactor=compactor)
    assert model.requests[0].messages == (user("three"),)
    assert outcome.compactions == 1
    assert listener.told == [list(CONVERSATION[:6])]


async def test_context_too_long_compacts_and_retries_once() -> None:
    too_long = ContextTooLong("scripted", "the request exceeds the context window")
    model = ScriptedModel([too_long, answer("Fine.")])
    compactor = Compactor(Compaction(keep_last=1), None, [])  # no window: only the error compacts
    outcome = await run_tool_loop([model], ModelRequest(CONVERSATION), compactor=compactor)
    assert [len(r.messages) for r in model.requests] == [len(CONVERSATION), 1]
    assert outcome.final.message.content == (TextBlock("Fine."),)

    again = ScriptedModel([too_long, too_long])
    with pytest.raises(ContextTooLong):
        await run_tool_loop(
            [again],
            ModelRequest(CONVERSATION),
            compactor=Compactor(Compaction(keep_last=1), None, []),
        )
    assert len(again.requests) == 2  # compacted once, tried once more, then the error stands

    nothing_to_cut = ScriptedModel([too_long])
    with pytest.raises(ContextTooLong):
        await run_tool_loop(
            [nothing_to_cut],
            ModelRequest((user("one"),)),
            compactor=Compactor(Compaction(), None, []),
        )
    assert len(nothing_to_cut.requests) == 1  # nothing could go: no pointless retry


@pytest.mark.usefixtures("installed_test_plugins")
async def test_listeners_that_raise_or_hang_do_not_stop_a_turns_compaction() -> None:
    """Through the plugin host, as `LoopingAgent` tells listeners: each is bounded in time."""
    module = importlib.import_module("lpt_bad.gates")
    module.raising.displaced.clear()
    module.hangs_sync.release.clear()
    config = Config(
        plugins=PluginsConfig(
            enabled=("listener-hangs-async", "listener-hangs-sync", "gate-raises")
        )
    )
    host = PluginHost.load(config, environ={})
    caller = SessionRef(Identity("t", "https://gw.example", "alice"), "ctx")

    async def tell(messages: Sequence[Message]) -> None:
        await host.messages_displaced(messages, caller, timeout=0.1)

    model = ScriptedModel([answer("Fine.")])
    compactor = Compactor(Compaction(compact_at=0.5, keep_last=1), 150, [], on_displaced=tell)
    try:
        outcome = await run_tool_loop([model], ModelRequest(CONVERSATION), compactor=compactor)
    finally:
        module.hangs_sync.release.set()
    assert outcome.compactions == 1
    assert model.requests[0].messages == (user("three"),)
    assert module.raising.displaced == [(list(CONVERSATION[:6]), caller)]
