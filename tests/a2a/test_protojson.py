"""The ProtoJSON converter: names, defaults, enums, timestamps, and errors that name the field."""

from __future__ import annotations

import datetime
import enum

import attrs
import pytest

from looping_core.a2a import WireError, from_wire, to_wire
from looping_core.a2a._models import AgentCapabilities, AgentInterface, GetExtendedAgentCardRequest


class State(enum.Enum):
    TASK_STATE_UNSPECIFIED = 0
    TASK_STATE_WORKING = 2


@attrs.frozen
class Status:
    state: State
    timestamp: datetime.datetime | None = None


@attrs.frozen
class Envelope:
    task_id: str
    status: Status
    history_length: int | None = None
    context_ids: tuple[str, ...] = ()


def test_camel_case_out_and_defaults_omitted() -> None:
    value = AgentInterface(url="https://a/x", protocol_binding="JSONRPC", protocol_version="1.0")
    assert to_wire(value) == {
        "url": "https://a/x",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }


def test_explicitly_set_optional_false_is_written() -> None:
    assert to_wire(AgentCapabilities(streaming=False)) == {"streaming": False}
    assert to_wire(AgentCapabilities()) == {}


def test_camel_or_snake_case_in() -> None:
    camel = from_wire(
        {"url": "u", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}, AgentInterface
    )
    snake = from_wire(
        {"url": "u", "protocol_binding": "JSONRPC", "protocol_version": "1.0"}, AgentInterface
    )
    assert camel == snake


def test_unknown_fields_are_ignored() -> None:
    assert from_wire({"tenant": "a", "future": 1}, GetExtendedAgentCardRequest).tenant == "a"


def test_enums_by_name_or_number_and_timestamps_with_z() -> None:
    value = from_wire(
        {"taskId": "t", "status": {"state": 2, "timestamp": "2026-01-31T12:00:00.123456+01:00"}},
        Envelope,
    )
    assert value.status.state is State.TASK_STATE_WORKING
    assert to_wire(value) == {
        "taskId": "t",
        "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-31T11:00:00.123Z"},
    }
    assert from_wire(
        {"taskId": "t", "status": {"state": "TASK_STATE_WORKING"}}, Envelope
    ) == Envelope("t", Status(State.TASK_STATE_WORKING))


def test_errors_name_every_field_by_its_wire_path() -> None:
    with pytest.raises(WireError) as caught:
        from_wire(
            {"status": {"state": "working", "timestamp": "yesterday"}, "historyLength": "3",
             "contextIds": ["a", 2]},
            Envelope,
        )  # fmt: skip
    assert caught.value.problems == [
        ("taskId", "required field missing"),
        ("status.state", "expected one of TASK_STATE_UNSPECIFIED, TASK_STATE_WORKING"),
        ("status.timestamp", "expected an RFC 3339 timestamp such as 2026-01-31T12:00:00Z"),
        ("historyLength", "expected an integer, got string"),
        ("contextIds[1]", "expected a string, got integer"),
    ]


def test_error_messages_never_echo_values() -> None:
    with pytest.raises(WireError) as caught:
        from_wire({"taskId": 12345678, "status": {"state": "SECRET_VALUE"}}, Envelope)
    assert "12345678" not in str(caught.value)
    assert "SECRET_VALUE" not in str(caught.value)


def test_a_timestamp_without_a_zone_is_refused() -> None:
    with pytest.raises(WireError) as caught:
        from_wire(
            {"taskId": "t", "status": {"state": 2, "timestamp": "2026-01-31T12:00:00"}}, Envelope
        )
    assert caught.value.problems == [
        ("status.timestamp", "the timestamp needs a time zone (use Z for UTC)")
    ]
