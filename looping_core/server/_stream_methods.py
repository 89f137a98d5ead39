"""The streaming methods (`SendStreamingMessage`, `SubscribeToTask`), as rows of the method
table: what they answer is a `TaskStream`, which each binding writes in its own form (server-sent
events, gRPC messages)."""

from __future__ import annotations

import json
from collections.abc import Callable

from looping_core.a2a import StreamResponse, Task, to_wire
from looping_core.a2a.internal import (
    InvalidParams,
    SendMessageRequest,
    SubscribeToTaskRequest,
    UnsupportedOperation,
)
from looping_core.server._accepting import accept
from looping_core.server._call_path import CallContext
from looping_core.server._generations import with_generation
from looping_core.server._param_checks import check_ids
from looping_core.server._streams import EventHub, TaskStream
from looping_core.store.internal import TaskStore

__all__ = ["hub_of", "send_streaming_message", "subscribe_to_task"]


def hub_of(context: CallContext) -> EventHub:
    """This process's event hub; `UnsupportedOperation` while streaming is off."""
    hub = context.services.streams
    if hub is None:
        # §3.3.4: UnsupportedOperation while the card says so (not "method not found").
        raise UnsupportedOperation(
            "Streaming is not supported by this agent (its card says capabilities.streaming: "
            "false); use SendMessage with a push notification config, or GetTask"
        )
    return hub


async def send_streaming_message(context: CallContext, params: SendMessageRequest) -> TaskStream:
    """SendMessage, answered as a stream of the task's events: the task first, then its status
    and artifact updates until it ends or asks for input. A retried send with `Last-Event-ID`
    goes on from there (the messageId names the same task). A caller at its stream cap is
    refused before anything is accepted."""
    release = hub_of(context).reserve(context.identity)
    try:
        start = await accept(context, params)
        # A new task streams from the task as accepted (SUBMITTED, before its first event),
        # whether or not its turn began in the same transaction; any other from a fresh read.
        fresh = start.started and not params.message.task_id
        accepted = (start.task, 0) if fresh else None
        return await _task_stream(
            context, start.task.id, subscribing=False, release=release, accepted=accepted
        )
    except BaseException:
        release()
        raise


async def subscribe_to_task(context: CallContext, params: SubscribeToTaskRequest) -> TaskStream:
    """The stream of a running task: its snapshot first (or, with `Last-Event-ID`, the events
    after that one), then its updates until it ends or asks for input."""
    check_ids(("params.id", params.id, True))
    release = hub_of(context).reserve(context.identity)
    try:
        return await _task_stream(context, params.id, subscribing=True, release=release)
    except BaseException:
        release()
        raise


async def _task_stream(
    context: CallContext,
    task_id: str,
    *,
    subscribing: bool,
    release: Callable[[], None],
    accepted: tuple[Task, int] | None = None,
) -> TaskStream:
    """The stream, holding the caller's stream slot `release` gives back (at once when the
    stream is its snapshot alone). `accepted`: the task as it was when its event `cursor`
    was the latest, to begin with instead of reading it."""
    hub, store = hub_of(context), context.store
    heartbeat = context.services.edge.config.streaming.heartbeat_seconds
    after = _last_event_id(context.last_event_id)
    if after is None:
        task, cursor = accepted or await store.stream_start(context.identity, task_id)
        state = task.status.state
        if subscribing and state.is_terminal:
            raise UnsupportedOperation(
                "The task has ended, so it has no more events to stream; GetTask returns it",
                metadata={"taskId": task_id},
            )
        if context.generations:
            task = with_generation(task, cursor)
        first = (cursor, json.dumps(to_wire(StreamResponse(task=task)), separators=(",", ":")))
        if state.is_terminal or state.is_interrupted:
            release()
            return TaskStream(hub, None, first, heartbeat, generations=context.generations)
        subscription = hub.subscribe(task_id, cursor)
        return TaskStream(
            hub, subscription, first, heartbeat, release, generations=context.generations
        )
    state, cursor = await store.latest_event(context.identity, task_id)
    if after > cursor:
        raise InvalidParams(
            "Last-Event-ID is not an event of this task (its latest is "
            f"{cursor}); reconnect without it for the task as it is now",
            violations=[("Last-Event-ID", "not an event of this task")],
        )
    if after == cursor and (state.is_terminal or state.is_interrupted):
        raise UnsupportedOperation(
            "No events were missed and the task has no more to stream (it ended or waits for "
            "input); GetTask returns it",
            metadata={"taskId": task_id},
        )
    if state.is_terminal and not await _events_kept_after(store, task_id, after):
        raise UnsupportedOperation(
            "The task has ended and the events after that one are no longer kept "
            "([retention] events_after_seconds); GetTask returns it",
            metadata={"taskId": task_id},
        )
    subscription = hub.subscribe(task_id, after)
    return TaskStream(hub, subscription, None, heartbeat, release, generations=context.generations)


async def _events_kept_after(store: TaskStore, task_id: str, after: int) -> bool:
    """Whether the event after `after` is still stored (retention deletes old events of ended
    tasks; a stream resumed across the gap would wait for it forever)."""
    events = await store.events_after({task_id: after})
    return bool(events) and events[0].seq == after + 1


def _last_event_id(header: str | None) -> int | None:
    """The `Last-Event-ID` a reconnecting client sends: an event number this server gave."""
    if header is None:
        return None
    value = header.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise InvalidParams(
            "Last-Event-ID must be the id of an event this stream sent (a decimal number)",
            violations=[("Last-Event-ID", "not an event id")],
        )
    return int(value)
