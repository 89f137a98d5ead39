"""The local model endpoint: the official openai client and the `openai` provider talk to it as
to a hosted model (streamed and not, tool calls, usage, errors), it answers from a
FunctionModel or TestModel, and `load_model` finds what `--model module:attr` names."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from looping_core.agent import (
    ContextTooLong,
    ModelError,
    ModelRequest,
    ModelUnavailable,
    OpenAIChatModel,
    run_tool_loop,
)
from looping_core.content import (
    AssistantMessage,
    ImageBlock,
    SystemMessage,
    TextBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from looping_core.modelserver import (
    FunctionModel,
    ModelLoadError,
    ModelReply,
    ModelServer,
    TestModel,
    ToolCall,
    load_model,
)
from looping_core.tools import tool


@pytest.fixture
async def served() -> AsyncIterator[tuple[ModelServer, list[ModelRequest]]]:
    """A server whose FunctionModel answers from what it was sent (and keeps every request)."""
    seen: list[ModelRequest] = []

    def react(request: ModelRequest) -> ModelReply | str | ModelError:
        seen.append(request)
        last = request.messages[-1]
        text = "".join(b.text for b in last.content if isinstance(b, TextBlock))  # type: ignore[union-attr]
        if text == "down":
            return ModelUnavailable("fn", "scripted outage")
        if text == "long":
            return ContextTooLong("fn", "scripted overflow")
        if isinstance(last, ToolResultMessage):
            return f"results: {len(last.content)}"
        if request.tools:
            return ModelReply(
                text="calling",
                tool_calls=(ToolCall("weather", {"city": text}, id="call-1"),),
                usage=Usage(input_tokens=7, output_tokens=3),
            )
        return ModelReply(text=f"echo {text}", usage=Usage(input_tokens=5, output_tokens=2))

    async with ModelServer(FunctionModel(react)) as server:
        yield server, seen


def _client(server: ModelServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)


WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


async def test_a_plain_completion_with_usage(served: Any) -> None:
    server, seen = served
    async with _client(server) as client:
        reply = await client.chat.completions.create(
            model="anything",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
            ],
            max_tokens=50,
        )
    assert reply.choices[0].message.content == "echo hi"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "anything"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (5, 2)
    [request] = seen
    assert request.system == "Be brief."
    assert request.messages == (UserMessage([TextBlock("hi")]),)
    assert request.max_output_tokens == 50


async def test_a_streamed_completion_with_tool_calls_and_usage(served: Any) -> None:
    server, seen = served
    async with _client(server) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Oslo"}],
            tools=[WEATHER],  # type: ignore[list-item]
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text == "calling"
    assert [(tc.id, tc.function.name, tc.function.arguments) for tc in calls] == [  # type: ignore[union-attr]
        ("call-1", "weather", '{"city": "Oslo"}')
    ]
    assert finish == ["tool_calls"]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 10
    [request] = seen
    assert [spec.name for spec in request.tools] == ["weather"]
    assert request.tools[0].input_schema == WEATHER["function"]["parameters"]  # type: ignore[index]


async def test_a_whole_conversation_reads_back_as_the_content_vocabulary(served: Any) -> None:
    server, seen = served
    image = "data:image/jpeg;base64,AAAA"
    async with _client(server) as client:
        reply = await client.chat.completions.create(
            model="m",
            messages=[
                {"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": image}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city":"X"}'},
                        },
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "weather", "arguments": "{}"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "sunny"},
                {"role": "tool", "tool_call_id": "b", "content": "rain"},
                {"role": "system", "content": "Later words."},
            ],
        )
    assert reply.choices[0].message.content == "echo Later words."
    [request] = seen
    assert request.system == "Rules."
    user, asked, results, later = request.messages
    assert user == UserMessage([TextBlock("look"), ImageBlock(media_type="image/jpeg", url=image)])
    assert asked == AssistantMessage(
        [ToolUseBlock("a", "weather", {"city": "X"}), ToolUseBlock("b", "weather", {})]
    )
    assert isinstance(results, ToolResultMessage)
    assert [r.tool_use_id for r in results.content] == ["a", "b"]
    assert later == SystemMessage([TextBlock("Later words.")])


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"model": "m"}, "messages: a non-empty list is required"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role: 'robot' is not"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "messages[0].content[0].type: 'input_audio' parts are not read here",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id: the id"),
        ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream: must be"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{}]}, "tools[0].function"),
    ],
)
async def test_a_request_it_cannot_read_is_a_400_naming_where(
    served: Any, body: dict[str, Any], says: str
) -> None:
    server, seen = served
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.base_url}/chat/completions", json=body) as response,
    ):
        assert response.status == 400
        error = (await response.json())["error"]
    assert error["type"] == "invalid_request_error"
    assert says in error["message"]
    assert seen == []


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    "body", [b"{oops", b'{"messages": [{"role": "user", "content": NaN}]}', b"[" * 100_000]
)
async def test_a_body_that_is_not_json_is_a_400(served: Any, body: bytes) -> None:
    server, _ = served
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.base_url}/chat/completions", data=body, headers=JSON) as response,
    ):
        assert response.status == 400
        assert (await response.json())["error"]["message"] == "the body is not JSON"


# Shapes that once made the endpoint answer 500 with a traceback.
ODD_BODIES = [
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 1}}]}]},
    {"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": 5}}]}]},
    {"messages": [{"role": "assistant", "tool_calls": [{"id": "", "function": {}}]}]},
    {"messages": [{"role": "tool", "tool_call_id": "c", "content": 7}]},
    {"messages": [{"role": "user", "content": "x"}], "tools": "none"},
    {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
    {"messages": [{"role": "user", "content": None}]},
    {"messages": [{"role": None}]},
    {"messages": [[]]},
    {"messages": {}},
]


@pytest.mark.parametrize("body", ODD_BODIES)
async def test_every_body_it_cannot_read_is_a_400_never_a_500(served: Any, body: Any) -> None:
    server, seen = served
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.base_url}/chat/completions", json=body) as response,
    ):
        assert response.status == 400, await response.text()
        error = (await response.json())["error"]
    assert error["type"] == "invalid_request_error"
    assert "Traceback" not in error["message"]
    assert seen == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
async def test_only_json_is_taken(served: Any, content_type: str) -> None:
    """A page can post text/plain to 127.0.0.1 without asking first: such a body is refused."""
    server, seen = served
    body = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{server.base_url}/chat/completions",
            data=body,
            headers={"Content-Type": content_type} if content_type else {},
            skip_auto_headers=["Content-Type"],
        ) as response,
    ):
        assert response.status == 415
        assert (await response.json())["error"]["message"].startswith("send JSON")
    assert seen == []


async def test_a_conversation_as_large_as_hosted_endpoints_take_is_read() -> None:
    """Five megabytes of conversation (an agent's follow-up carries all of it) is answered; a
    body over the limit is refused naming it."""
    big = {"messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]}
    async with (
        ModelServer(FunctionModel(lambda request: "read")) as server,
        aiohttp.ClientSession() as session,
    ):
        url = f"{server.base_url}/chat/completions"
        async with session.post(
            url, data=io.BytesIO(json.dumps(big).encode()), headers=JSON
        ) as response:
            assert response.status == 200
            answer = await response.json()
        assert answer["choices"][0]["message"]["content"] == "read"
        huge = b'{"messages": "' + b"x" * (ModelServer.max_body_bytes + 1) + b'"}'
        async with session.post(url, data=io.BytesIO(huge), headers=JSON) as response:
            assert response.status == 413
            message = (await response.json())["error"]["message"]
    assert (
        message == f"the body is over this endpoint's limit of {ModelServer.max_body_bytes} bytes"
    )


async def test_the_test_model_fills_arguments_within_bounds() -> None:
    """A few hundred bytes of schema cannot make the default model build a huge answer."""
    nested: dict[str, Any] = {"type": "string", "minLength": 10**9}
    for _ in range(5):
        nested = {"type": "array", "minItems": 100, "items": nested}
    schema = {"type": "object", "properties": {"x": nested}, "required": ["x"]}
    body = {
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": schema}}],
    }
    async with ModelServer() as server, aiohttp.ClientSession() as session:
        url = f"{server.base_url}/chat/completions"
        async with session.post(url, json=body) as response:
            assert response.status == 200
            raw = await response.read()
    assert len(raw) < 2_000_000
    [called] = json.loads(raw)["choices"][0]["message"]["tool_calls"]
    assert called["function"]["name"] == "t"


def test_a_function_model_keeps_only_its_latest_requests() -> None:
    model = FunctionModel(lambda request: "ok")
    model.max_kept_requests = 3

    async def ask(text: str) -> None:
        request = ModelRequest(messages=(UserMessage([TextBlock(text)]),))
        async for _ in model.stream(request):
            pass

    async def ask_all() -> None:
        for n in range(5):
            await ask(str(n))

    asyncio.run(ask_all())
    kept = [request.messages[0].content[0].text for request in model.requests]  # type: ignore[union-attr]
    assert kept == ["2", "3", "4"]


async def test_the_providers_errors_come_back_as_the_same_kinds(served: Any) -> None:
    """Through the `openai` provider, an unavailable model is `ModelUnavailable` (a fallback
    may answer) and an overflow `ContextTooLong` (the loop compacts): streamed, as it asks."""
    server, _ = served
    model = OpenAIChatModel("m", base_url=server.base_url, max_retries=0)
    try:
        for text, kind in (("down", ModelUnavailable), ("long", ContextTooLong)):
            request = ModelRequest(messages=(UserMessage([TextBlock(text)]),))
            with pytest.raises(kind):
                async for _ in model.stream(request):
                    pass
    finally:
        await model.aclose()


async def test_an_agents_tools_are_called_over_http_by_the_default_test_model() -> None:
    """The default endpoint (TestModel) through the openai provider and the tool loop: every
    typed tool called once with valid arguments, then an answer with their results."""
    calls: list[tuple[str, int]] = []

    @tool
    def book(room: str, nights: int) -> str:
        """Book a room."""
        calls.append((room, nights))
        return f"booked {room}"

    async with ModelServer() as server:
        model = OpenAIChatModel("llama3.2", base_url=server.base_url, max_retries=0)
        try:
            request = ModelRequest(messages=(UserMessage([TextBlock("book")]),))
            outcome = await run_tool_loop([model], request, [book])
        finally:
            await model.aclose()
    assert calls == [("book", 0)]  # the first text parameter got the user's text
    final = "".join(b.text for b in outcome.final.message.content if isinstance(b, TextBlock))
    assert json.loads(final) == {"book": "booked book"}
    assert outcome.served_by == ("openai:llama3.2", "openai:llama3.2")


async def test_models_lists_the_one_model(served: Any) -> None:
    server, _ = served
    async with _client(server) as client:
        listed = await client.models.list()
    assert [m.id for m in listed.data] == ["function"]


# -- load_model ---------------------------------------------------------------------------------


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "lpt_models.py").write_text(
        textwrap.dedent(
            """
            from looping_core.modelserver import FunctionModel, TestModel

            ready = TestModel(text="ready-made")

            def reply(request):
                return "from a function"

            def make():
                return FunctionModel(lambda request: "made", label="made")

            def two(a, b):
                return None

            not_a_model = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lpt_models"
    sys.modules.pop("lpt_models", None)


def test_load_model_takes_a_model_a_function_or_a_maker(module: str) -> None:
    assert load_model(f"{module}:ready").label == "test"
    function = load_model(f"{module}:reply")
    assert isinstance(function, FunctionModel)
    assert function.label == "reply"
    assert load_model(f"{module}:make").label == "made"
    assert isinstance(load_model("looping_core.modelserver:TestModel"), TestModel)


@pytest.mark.parametrize(
    ("attribute", "says"),
    [
        ("not_a_model", "is a int, not a chat model; point it at a FunctionModel or TestModel"),
        ("two", "is a function, not a chat model"),
        ("missing", "'lpt_models' has no 'missing'"),
    ],
)
def test_load_model_refuses_what_is_no_model(module: str, attribute: str, says: str) -> None:
    with pytest.raises(ModelLoadError, match=f"--model 'lpt_models:{attribute}'") as refused:
        load_model(f"{module}:{attribute}")
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("reference", "says"),
    [
        ("no_colon", "write it as module:attribute"),
        ("lpt_nowhere_at_all:x", "cannot import 'lpt_nowhere_at_all' (ModuleNotFoundError"),
    ],
)
def test_load_model_says_what_is_wrong_with_the_reference(reference: str, says: str) -> None:
    with pytest.raises(ModelLoadError) as refused:
        load_model(reference)
    assert says in str(refused.value)


def test_a_test_modules_model_named_without_its_package_gets_the_name_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "lpt_test_agent.py").write_text("fn = None\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError) as refused:
        load_model("lpt_test_agent:fn")
    assert str(refused.value).endswith("; did you mean tests.lpt_test_agent:fn?")
    with pytest.raises(ModelLoadError) as plain:
        load_model("lpt_nowhere_at_all:fn")
    assert "did you mean" not in str(plain.value)
