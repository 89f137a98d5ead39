"""The model runtime: the built-in openai provider over real HTTP (a fake OpenAI-compatible server
on 127.0.0.1), folding streams, failures, and fallback between models."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable

import pytest

from looping_core.agent import (
    ContextTooLong,
    MissingExtra,
    ModelError,
    ModelRequest,
    ModelUnavailable,
    OpenAIChatModel,
    StreamEnd,
    ToolSpec,
    openai_provider,
    respond,
    respond_with_fallback,
)
from looping_core.content import (
    AssistantMessage,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    RefusalBlock,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from looping_core.testing import FakeModelServer, Reply, ScriptedModel

from support.ports import unused_port

HELLO = ModelRequest(messages=(UserMessage([TextBlock("hello")]),), system="Be brief.")


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


@pytest.fixture
async def models() -> AsyncIterator[list[OpenAIChatModel]]:
    """Models a test makes; their connections are closed after it."""
    made: list[OpenAIChatModel] = []
    yield made
    for model in made:
        await model.aclose()


@pytest.fixture
def model_on(models: list[OpenAIChatModel]) -> Callable[..., OpenAIChatModel]:
    def make(
        server: FakeModelServer, name: str = "fake-model", **options: object
    ) -> OpenAIChatModel:
        settings = {"max_retries": 0, "timeout": 5.0, **options}
        model = OpenAIChatModel(name, base_url=server.base_url, **settings)  # type: ignore[arg-type]
        models.append(model)
        return model

    return make


async def test_a_streamed_answer_becomes_one_assistant_message_with_usage(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    server.replies.append(Reply.text("Hel", "lo", "!", prompt_tokens=12, completion_tokens=3))
    response = await respond(model_on(server), HELLO)
    assert response.message.content == (TextBlock("Hello!"),)
    assert response.message.usage == Usage(input_tokens=12, output_tokens=3, context_tokens=12)
    assert (response.stop_reason, response.served_by, response.model) == (
        "end",
        "openai:fake-model",
        "fake-model",
    )
    [sent] = server.requests
    assert sent["stream"] is True
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]


async def test_interleaved_tool_calls_are_kept_apart(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    server.replies.append(
        Reply.tool_calls(("call-1", "notes.add", {"text": "milk"}), ("call-2", "notes.list", {}))
    )
    tools = (ToolSpec("notes.add", "Adds a note.", {"type": "object"}),)
    response = await respond(model_on(server), ModelRequest(HELLO.messages, tools=tools))
    assert response.stop_reason == "tool_use"
    assert response.tool_calls == (
        ToolUseBlock("call-1", "notes.add", {"text": "milk"}),
        ToolUseBlock("call-2", "notes.list", {}),
    )
    assert server.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "notes.add",
                "description": "Adds a note.",
                "parameters": {"type": "object"},
            },
        }
    ]


async def test_a_tool_call_sent_with_an_empty_id_gets_one_and_goes_on(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    """Some OpenAI-compatible servers send `"id": ""` for a tool call; it used to fail the
    whole turn (MODEL_ERROR)."""
    server.replies.append(Reply.tool_calls(("", "notes.add", {"text": "milk"})))
    tools = (ToolSpec("notes.add", "Adds a note.", {"type": "object"}),)
    response = await respond(model_on(server), ModelRequest(HELLO.messages, tools=tools))
    [call] = response.tool_calls
    assert (call.name, call.input) == ("notes.add", {"text": "milk"})
    assert call.id.startswith("call_")


async def test_reasoning_refusals_and_detailed_usage_are_mapped(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    server.replies.append(
        Reply(
            chunks=(
                {"delta": {"reasoning_content": "thinking..."}},
                {"delta": {"refusal": "I cannot help with that."}},
                {"delta": {}, "finish_reason": "stop"},
            ),
            usage={
                "prompt_tokens": 100,
                "completion_tokens": 40,
                "prompt_tokens_details": {"cached_tokens": 60},
                "completion_tokens_details": {"reasoning_tokens": 30},
            },
        )
    )
    response = await respond(model_on(server), HELLO)
    assert response.message.content == (
        ThinkingBlock("thinking..."),
        RefusalBlock("I cannot help with that."),
    )
    assert response.message.usage == Usage(
        input_tokens=40,
        cache_read_tokens=60,
        output_tokens=40,
        reasoning_tokens=30,
        context_tokens=100,
    )


async def test_a_conversation_is_sent_in_chat_completions_form(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    server.replies.append(Reply.text("ok"))
    conversation = (
        UserMessage([TextBlock("look"), ImageBlock("image/png", data=b"\x89PNG")]),
        AssistantMessage(
            [
                ThinkingBlock("hidden"),
                TextBlock("Let me add it."),
                ToolUseBlock("call-1", "notes.add", {"text": "milk"}),
            ]
        ),
        ToolResultMessage([ToolResultBlock("call-1", (TextBlock("added"),))]),
        UserMessage([DocumentBlock("text/plain", "list.txt", text="milk, eggs")]),
    )
    await respond(model_on(server), ModelRequest(conversation))
    assert server.requests[0]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me add it.",
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "notes.add", "arguments": '{"text": "milk"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call-1", "content": "added"},
        {"role": "user", "content": [{"type": "text", "text": "milk, eggs"}]},
    ]


async def test_a_tools_images_follow_its_text_result_as_a_user_message(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    """Chat Completions takes only text in a tool message: what else a tool returned (an
    MCP server's screenshot) goes in one user message of those parts right after the tool
    messages, and no words are added."""
    server.replies.append(Reply.text("ok"))
    png = b"\x89PNG"
    conversation = (
        UserMessage([TextBlock("look")]),
        AssistantMessage(
            [ToolUseBlock("call-1", "shot", {}), ToolUseBlock("call-2", "sum", {"a": 1})]
        ),
        ToolResultMessage([
            ToolResultBlock("call-1", (TextBlock("page"), ImageBlock("image/png", data=png))),
            ToolResultBlock("call-2", (DataBlock({"sum": 3}),)),
        ]),
    )  # fmt: skip
    await respond(model_on(server), ModelRequest(conversation))
    assert server.requests[0]["messages"][2:] == [
        {"role": "tool", "tool_call_id": "call-1", "content": "page"},
        {"role": "tool", "tool_call_id": "call-2", "content": '{"sum":3}'},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}
            ],
        },
    ]


async def test_the_request_body_is_exactly_what_the_model_is_asked(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    """The body is built from plain JSON (not through the client's per-call transform): every
    key, and nothing more; the key and extra headers still go the client's way."""
    server.replies.append(Reply.text("ok"))
    model = model_on(
        server,
        api_key="sk-test",
        options={"temperature": 0.2, "extra_body": {"top_k": 5}, "extra_headers": {"X-Run": "7"}},
    )
    request = ModelRequest(
        (UserMessage([TextBlock("add milk")]),),
        system="Be brief.",
        tools=(ToolSpec("notes.add", "Add a note.", {"type": "object", "properties": {}}),),
        max_output_tokens=64,
        options={"seed": 7},
    )
    await respond(model, request)
    assert server.requests == [
        {
            "model": "fake-model",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "add milk"}]},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.2,
            "top_k": 5,
            "seed": 7,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "notes.add",
                        "description": "Add a note.",
                        "parameters": {"type": "object", "properties": {}},
                    },
                }
            ],
            "max_completion_tokens": 64,
        }
    ]
    [headers] = server.headers
    assert headers["Authorization"] == "Bearer sk-test"
    assert headers["X-Run"] == "7"


@pytest.mark.parametrize(
    ("reply", "error", "reason"),
    [
        (Reply.failure(429, "slow down"), ModelUnavailable, "HTTP 429"),
        (Reply.failure(500), ModelUnavailable, "HTTP 500"),
        (Reply.failure(503), ModelUnavailable, "HTTP 503"),
        (
            Reply.failure(400, "too long", code="context_length_exceeded"),
            ContextTooLong,
            "context window",
        ),
        (Reply.failure(401, "bad key"), ModelError, "HTTP 401"),
        (Reply.malformed("data: {not json"), ModelError, "malformed stream"),
        (
            Reply.malformed(
                'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "a"}}]}'
            ),
            ModelUnavailable,
            "without a finish reason",
        ),
    ],
)
async def test_failures_are_model_errors_that_say_whether_to_fall_back(
    server: FakeModelServer,
    reply: Reply,
    error: type[ModelError],
    reason: str,
    model_on: Callable[..., OpenAIChatModel],
) -> None:
    server.replies.append(reply)
    with pytest.raises(ModelError) as caught:
        await respond(model_on(server), HELLO)
    assert type(caught.value) is error
    assert reason in str(caught.value)
    assert caught.value.retryable is (error is ModelUnavailable)


async def test_a_timeout_is_unavailable(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    server.replies.append(Reply.slow(5))
    with pytest.raises(ModelUnavailable, match="timed out"):
        await respond(model_on(server, timeout=0.2), HELLO)


async def test_a_connection_refused_is_unavailable(
    model_on: Callable[..., OpenAIChatModel],
) -> None:
    async with FakeModelServer() as gone:
        model = model_on(gone, "m", timeout=2)  # then the server goes away
    with pytest.raises(ModelUnavailable, match="connection failed"):
        await respond(model, HELLO)


async def test_the_clients_own_retries_come_first(
    server: FakeModelServer, model_on: Callable[..., OpenAIChatModel]
) -> None:
    server.replies += [Reply.failure(429), Reply.text("finally")]
    response = await respond(model_on(server, max_retries=1), HELLO)
    assert response.message.content == (TextBlock("finally"),)
    assert len(server.requests) == 2


async def test_fallback_moves_on_only_when_a_model_is_unavailable(
    server: FakeModelServer,
    caplog: pytest.LogCaptureFixture,
    model_on: Callable[..., OpenAIChatModel],
) -> None:
    async with FakeModelServer(model="backup-model") as backup:
        server.replies.append(Reply.failure(503))
        backup.replies.append(Reply.text("from the backup"))
        primary = model_on(server)
        secondary = model_on(backup, "backup-model")
        with caplog.at_level(logging.WARNING):
            response = await respond_with_fallback([primary, secondary], HELLO)
        assert response.served_by == "openai:backup-model"
        assert response.message.content == (TextBlock("from the backup"),)
        assert "openai:fake-model" in caplog.text

        server.replies.append(Reply.failure(400, "bad request"))
        with pytest.raises(ModelError, match="HTTP 400"):
            await respond_with_fallback([primary, secondary], HELLO)
        assert backup.replies == []
        assert len(backup.requests) == 1  # not asked again


async def test_when_every_model_is_unavailable_the_last_failure_is_raised() -> None:
    first = ScriptedModel([ModelUnavailable("first", "down")], label="first")
    second = ScriptedModel([ModelUnavailable("second", "down too")], label="second")
    with pytest.raises(ModelUnavailable, match="second"):
        await respond_with_fallback([first, second], HELLO)


@pytest.mark.parametrize(
    ("events", "reason"),
    [
        ([TextChunk("cut off")], "ended before the response did"),
        ([StreamEnd(Usage(), "end"), TextChunk("late")], "went on after its end"),
        ([StreamEnd(Usage(), "weird")], "unknown stop reason"),
        (
            [ToolUseChunk(0, "{}"), StreamEnd(Usage(), "tool_use")],
            "malformed stream: tool call 0 never received its id and name",
        ),
    ],
)
async def test_a_broken_stream_is_a_model_error(events: list[object], reason: str) -> None:
    model = ScriptedModel([events])  # type: ignore[list-item]
    with pytest.raises(ModelError, match=reason):
        await respond(model, HELLO)


async def test_the_fake_model_server_listens_on_the_port_it_is_given(
    model_on: Callable[..., OpenAIChatModel],
) -> None:
    port = unused_port()
    async with FakeModelServer([Reply.text("on a fixed port")], port=port) as fixed:
        assert fixed.base_url == f"http://127.0.0.1:{port}/v1"
        response = await respond(model_on(fixed), HELLO)
    assert response.message.content == (TextBlock("on a fixed port"),)


async def test_the_scripted_model_records_requests_and_answers_in_order() -> None:
    model = ScriptedModel.says("one", "two")
    assert (await respond(model, HELLO)).message.content == (TextBlock("one"),)
    assert (await respond(model, HELLO)).message.content == (TextBlock("two"),)
    assert model.requests == [HELLO, HELLO]
    with pytest.raises(AssertionError, match="more often than scripted"):
        await respond(model, HELLO)


async def test_the_provider_registers_as_a_model_provider(server: FakeModelServer) -> None:
    provider = openai_provider()
    assert provider.name == "openai"
    model = provider.factory("gpt-test", {"base_url": server.base_url, "api_key": "k"})
    assert isinstance(model, OpenAIChatModel)
    assert model.label == "openai:gpt-test"
    await model.aclose()


def test_a_missing_openai_package_is_named_with_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # what an uninstalled package looks like
    with pytest.raises(MissingExtra, match=r"pip install 'looping-core\[openai\]'"):
        OpenAIChatModel("gpt-test")


async def test_arguments_that_are_not_json_are_named_not_fatal() -> None:
    events = [ToolUseChunk(0, "{not json", id="c", name="t"), StreamEnd(Usage(), "tool_use")]
    response = await respond(ScriptedModel([events]), HELLO)
    assert response.tool_calls == (ToolUseBlock("c", "t", {}),)
    assert response.bad_arguments == {"c": "the arguments are not JSON"}
