"""Property-based fuzzing of both bindings: no request gets an internal error.

Every method, from a valid request, with structured mutations (a value replaced by any JSON value,
huge and deep values, lone surrogates, NaN, big integers, bad enums; a field removed; a field
added; the envelope broken; the raw bytes cut or flipped). For each: never a 5xx, never -32603,
always valid JSON holding a result or an error, no ERROR log line; afterwards the server still
serves a normal turn.

Bounded for CI (`EXAMPLES_PER_METHOD`); `pytest --fuzz-long tests/a2a/test_fuzz.py -s` sends
about 10,000 requests and prints what came back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import fuzzing

EXAMPLES_PER_METHOD = 60
LONG_EXAMPLES_PER_METHOD = 1_000  # 10 kinds of request: about 10,000 requests


class Served(fuzzing.Served):
    """The agent, and the seed task the mutations aim at."""

    def __init__(self) -> None:
        super().__init__()
        self.task_id = ""

    def post(self, body: bytes | str) -> tuple[int, bytes]:
        token = self.gateway.token(tenant="alice", aud=self.agent.endpoint, sub="fuzzer")

        async def send() -> tuple[int, bytes]:
            headers = {
                "Content-Type": "application/json",
                "A2A-Version": "1.0",
                "Authorization": f"Bearer {token}",
            }
            async with self.agent.session.post(
                self.agent.endpoint, data=body, headers=headers
            ) as response:
                return response.status, await response.read()

        return self.run(send())


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    errors = fuzzing.ErrorLog()
    logging.getLogger().addHandler(errors)
    server = Served()
    try:
        status, body = server.run(
            server.gateway.send_turn(server.agent.endpoint, tenant="alice", text="seed")
        )
        server.task_id = body["result"]["task"]["id"]
        yield server
        # Afterwards it still serves a normal turn, and nothing was logged as an error.
        server.gateway.pushes.clear()
        status, body = server.run(
            server.gateway.send_turn(server.agent.endpoint, tenant="alice", text="after the storm")
        )
        assert status == 200, body
        task_id = body["result"]["task"]["id"]

        async def completed() -> None:
            while not any(
                p.claims and p.claims["taskId"] == task_id and p.error is None
                for p in server.gateway.pushes
            ):
                await asyncio.sleep(0.01)

        server.run(asyncio.wait_for(completed(), 10))
        print(f"\nfuzz: {sum(server.codes.values())} requests; answers: {dict(server.codes)}")
        assert errors.records == [], [r.getMessage() for r in errors.records]
    finally:
        server.close()
        logging.getLogger().removeHandler(errors)


# -- strategies -----------------------------------------------------------------------------------

_surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
_controls = st.text(st.characters(max_codepoint=0x1F), min_size=1)
_texts = st.one_of(
    st.text(max_size=40),
    _surrogates,
    _controls,
    st.sampled_from(["", "\n", "a\r\nb: c", "\x00", "x" * 5000, "ROLE_USER", "TASK_STATE_WORKING"]),
    st.text(max_size=20).map(lambda tail: "http://127.0.0.1:1/" + tail),
)
_numbers = st.one_of(
    st.integers(),
    st.sampled_from([2**31, -(2**31) - 1, 2**53, 2**53 + 1, 2**63, -(2**63), 2**64, 10**400]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, 5e-324, -0.0, 0.1]),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _texts)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_texts, children, max_size=4)
    ),
    max_leaves=12,
)


class _Deep:
    """Arrays and objects nested `depth` levels, spliced in as text when the body is written
    (as a Python value it would be too deep to generate, walk or encode)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.marker = f"deep-{uuid.uuid4().hex}"

    def text(self) -> str:
        opening = "".join('{"k": ' if level % 2 else "[" for level in range(self.depth))
        closing = "".join("}" if level % 2 else "]" for level in reversed(range(self.depth)))
        return opening + "0" + closing


_values = st.one_of(_json, _json, _json, _json, st.integers(50, 1_500).map(_Deep))


def _encode(document: Any) -> str:
    """JSON text (NaN and Infinity bare, surrogates as \\u escapes) with deep values spliced."""
    deep: list[_Deep] = []

    def marker(value: Any) -> str:
        if isinstance(value, _Deep):
            deep.append(value)
            return value.marker
        raise TypeError(type(value).__name__)

    text = json.dumps(document, default=marker)
    for value in deep:
        text = text.replace(f'"{value.marker}"', value.text())
    return text


def _like(value: Any) -> st.SearchStrategy[Any]:
    """Values of the same JSON type as `value` (they get past type checks, into handlers)."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.one_of(st.integers(-5, 200), _numbers)
    if isinstance(value, str):
        return _texts
    if isinstance(value, list):
        return st.lists(_values, max_size=3)
    if isinstance(value, dict):
        return st.dictionaries(_texts, _values, max_size=3)
    return _values


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON document (keys and indexes), the root first."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any]) -> bytes | str:
    """`valid` (a whole JSON-RPC request) after one to three structured mutations, or its bytes
    after a raw one."""
    document = json.loads(json.dumps(valid))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        # Under params, but not the tenant: a changed tenant stops every request at the token.
        paths = [
            p for p in _paths(document) if p[:1] == ("params",) and p[1:] not in ((), ("tenant",))
        ]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, leaf = _at(document, path[:-1]), path[-1]
        kind = draw(
            st.sampled_from(["same-type"] * 4 + ["replace"] * 3 + ["remove", "add", "envelope"])
        )
        if kind == "same-type":
            parent[leaf] = draw(_like(parent[leaf]))
        elif kind == "replace":
            parent[leaf] = draw(_values)
        elif kind == "remove":
            del parent[leaf]
        elif kind == "add" and isinstance(parent, dict):
            parent[draw(_texts)] = draw(_values)
        elif kind == "envelope":
            document[draw(st.sampled_from(["jsonrpc", "id", "method", "params"]))] = draw(_values)
        if not isinstance(document.get("params"), dict):
            break
    text = _encode(document)
    if draw(st.integers(0, 19)) == 0:
        cut = draw(st.integers(0, len(text)))
        flip = draw(st.sampled_from(["", "}", "\x00", "\xff", "\\", '"', "[" * 2000]))
        return text[:cut] + flip + text[cut + 1 :]
    return text


def _requests(served: Served) -> dict[str, dict[str, Any]]:
    task_id, gateway = served.task_id, served.gateway
    message = {
        "messageId": "m",
        "role": "ROLE_USER",
        "contextId": "c",
        "parts": [{"text": "hi"}, {"data": {"x": [1, 2.5]}, "mediaType": "application/json"}],
        "metadata": {"k": "v"},
    }
    return {
        "SendMessage": {
            "message": message,
            "configuration": {
                "returnImmediately": True,
                "historyLength": 2,
                "acceptedOutputModes": ["text/plain"],
                "taskPushNotificationConfig": gateway.push_config("fuzz"),
            },
            "metadata": {"a": 1},
        },
        "GetTask": {"id": task_id, "historyLength": 1},
        "ListTasks": {
            "contextId": "c",
            "status": "TASK_STATE_COMPLETED",
            "pageSize": 5,
            "pageToken": "",
            "historyLength": 1,
            "statusTimestampAfter": "2026-01-01T00:00:00Z",
            "includeArtifacts": True,
        },
        "CancelTask": {"id": task_id, "metadata": {"why": "fuzz"}},
        "CreateTaskPushNotificationConfig": {
            "taskId": task_id,
            "id": "cfg",
            **gateway.push_config("fuzz"),
        },
        "GetTaskPushNotificationConfig": {"taskId": task_id, "id": "cfg"},
        "ListTaskPushNotificationConfigs": {"taskId": task_id, "pageSize": 3},
        "DeleteTaskPushNotificationConfig": {"taskId": task_id, "id": "cfg"},
        "GetExtendedAgentCard": {},
        "message/send": {"message": message},
    }


METHODS = [
    "SendMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
    "message/send",
]


def _strict_json(body: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} in a response")

    return json.loads(body, parse_constant=refuse)


@pytest.mark.parametrize("method", METHODS)
def test_no_request_gets_an_internal_error(
    served: Served, method: str, request: pytest.FixtureRequest
) -> None:
    long = request.config.getoption("--fuzz-long")
    params = {"tenant": "alice", **_requests(served)[method]}
    valid = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}

    @settings(
        max_examples=LONG_EXAMPLES_PER_METHOD if long else EXAMPLES_PER_METHOD,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=mutated(valid))
    def check(body: bytes | str) -> None:
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        status, answer = served.post(body)
        assert status < 500, (status, answer[:500])
        document = _strict_json(answer)
        assert isinstance(document, dict)
        assert ("result" in document) != ("error" in document), document
        code = document.get("error", {}).get("code", "result")
        served.codes[str(code)] += 1
        assert code != -32603, document

    check()


# -- the HTTP+JSON binding ------------------------------------------------------------------------

_path_texts = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.sampled_from(["", "..", "%2F", "a/b", "x" * 3000, "tasks", "message:send", ":cancel"]),
)


def _rest_calls(served: Served) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(verb, path after the rest path, valid JSON body or query) for every route."""
    task_id, gateway = served.task_id, served.gateway
    requests = _requests(served)
    configs = f"/alice/tasks/{task_id}/pushNotificationConfigs"
    return [
        ("POST", "/alice/message:send", requests["SendMessage"]),
        ("POST", "/alice/message:stream", requests["SendMessage"]),
        ("GET", f"/alice/tasks/{task_id}", {"historyLength": "1"}),
        ("GET", "/alice/tasks", {"pageSize": "5", "status": "TASK_STATE_COMPLETED"}),
        ("POST", f"/alice/tasks/{task_id}:cancel", {"metadata": {"why": "fuzz"}}),
        ("POST", configs, {"id": "cfg", **gateway.push_config("fuzz")}),
        ("GET", f"{configs}/cfg", {}),
        ("DELETE", f"{configs}/cfg", {}),
        ("GET", "/alice/extendedAgentCard", {}),
    ]


@st.composite
def rest_request(
    draw: st.DrawFn, call: tuple[str, str, dict[str, Any] | None]
) -> tuple[str, str, bytes | None, dict[str, str]]:
    verb, path, valid = call
    segments = path.split("/")
    if draw(st.integers(0, 3)) == 0:  # a path segment replaced (percent-encoded as sent)
        index = draw(st.integers(1, len(segments) - 1))
        text = draw(_path_texts)
        # Not a dot segment: clients and the server resolve those away, out of the binding.
        segments[index] = quote("x" + text if text in (".", "..") else text, safe=":")
    path = "/".join(segments)
    if verb != "POST":
        query = {
            name: draw(st.one_of(st.just(value), _path_texts))
            for name, value in (valid or {}).items()
        }
        return verb, path, None, query
    text = draw(mutated({"params": valid or {}}))
    # The mutations worked under "params": the body is what is there (or the raw text, broken).
    try:
        body = _encode(json.loads(text)["params"]) if text.startswith("{") else text
    except (ValueError, KeyError, TypeError, RecursionError):
        body = text
    return verb, path, body.encode("utf-8", "surrogatepass"), {}


def test_no_rest_request_gets_an_internal_error(
    served: Served, request: pytest.FixtureRequest
) -> None:
    long = request.config.getoption("--fuzz-long")
    rest = served.agent.config.server.rest_url
    token = served.gateway.token(tenant="alice", aud=rest, sub="fuzzer", lifetime=3600)
    headers = {
        "Content-Type": "application/a2a+json",
        "A2A-Version": "1.0",
        "Authorization": f"Bearer {token}",
    }

    async def send(
        verb: str, path: str, body: bytes | None, query: dict[str, str]
    ) -> tuple[int, bytes, str]:
        async with served.agent.session.request(
            verb, rest + path, data=body, params=query, headers=headers
        ) as response:
            return response.status, await response.read(), response.content_type

    @settings(
        max_examples=(LONG_EXAMPLES_PER_METHOD if long else EXAMPLES_PER_METHOD) * 3,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        call = data.draw(st.sampled_from(_rest_calls(served)))
        verb, path, body, query = data.draw(rest_request(call))
        status, answer, content_type = served.run(send(verb, path, body, query))
        assert status < 500, (status, answer[:500])
        if content_type == "text/event-stream":
            served.codes["rest stream"] += 1
            return
        document = _strict_json(answer)
        assert isinstance(document, dict)
        error = document.get("error")
        if status >= 400:
            assert error["code"] == status, document
            assert error["details"][0]["@type"].endswith("ErrorInfo"), document
        served.codes[f"rest {status}"] += 1

    check()
