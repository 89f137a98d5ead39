"""The A2A methods this edge answers, as rows of the method table.

Every handler runs after the gateway token was verified for `params.tenant`; every task it
touches is the verified caller's own (the store scopes each query to the caller).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

import attrs

from looping_core._logs import bind
from looping_core.a2a import (
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    part_to_block,
    to_wire,
)
from looping_core.a2a.internal import (
    CancelTaskRequest,
    ContentTypeNotSupported,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    InvalidParams,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Method,
    SendMessageConfiguration,
    SendMessageRequest,
    SendMessageResponse,
    SignedCard,
    SubscribeToTaskRequest,
    UnsupportedOperation,
    id_problem,
    media_type_accepted,
    media_type_of,
    origin_of,
    push_target_problems,
)
from looping_core.content import (
    APPROVALS_KEY,
    ApprovalsInvalid,
    ContentError,
    Decision,
    decisions_in,
)
from looping_core.server._call_path import CallContext
from looping_core.server._streams import EventHub, TaskStream
from looping_core.store.internal import TaskStore, TurnStart

__all__ = ["METHODS"]


def _invalid(field: str, problem: str) -> InvalidParams:
    return InvalidParams(f"{field}: {problem}", violations=[(field, problem)])


def _refuse(violations: list[tuple[str, str]]) -> None:
    if violations:
        summary = "; ".join(f"{field}: {problem}" for field, problem in violations)
        raise InvalidParams(f"Invalid parameters: {summary}", violations=violations)


def _check_ids(*ids: tuple[str, str, bool]) -> None:
    """`(field, value, required)` triples, each held to the id grammar."""
    _refuse(
        [
            (field, problem)
            for field, value, required in ids
            if (problem := id_problem(value, required=required)) is not None
        ]
    )


def _check_history_length(value: int | None, field: str) -> None:
    if value is not None and value < 0:
        raise _invalid(field, "must not be negative")


def _check_push_config(
    context: CallContext, config: TaskPushNotificationConfig, prefix: str
) -> None:
    """A push config must be deliverable (URL and header grammars) and aim at an allowlisted
    gateway origin only, so pushes can never reach internal hosts."""
    auth = config.authentication
    violations = [
        (f"{prefix}.{field}", problem)
        for field, problem in push_target_problems(
            config.url,
            config.token,
            auth.scheme if auth is not None else None,
            auth.credentials if auth is not None else "",
        )
    ]
    for field, value in ((f"{prefix}.id", config.id), (f"{prefix}.taskId", config.task_id)):
        if (problem := id_problem(value)) is not None:
            violations.append((field, problem))
    if not violations and origin_of(config.url) not in context.services.edge.gateway_origins:
        violations.append(
            (f"{prefix}.url", "the push URL must be on an allowlisted gateway origin")
        )
    _refuse(violations)


def _check_message(message: Message, prefix: str, input_modes: Iterable[str]) -> None:
    """Ids held to their grammar; every part must be of a media type the tenant takes and have a
    form the agent can be given."""
    _check_ids(
        (f"{prefix}.messageId", message.message_id, True),
        (f"{prefix}.contextId", message.context_id, False),
        (f"{prefix}.taskId", message.task_id, False),
        *(
            (f"{prefix}.referenceTaskIds[{index}]", task_id, True)
            for index, task_id in enumerate(message.reference_task_ids)
        ),
    )
    _check_parts(message.parts, f"{prefix}.parts", tuple(input_modes))


def _check_output_modes(accepted: Iterable[str], answers: tuple[str, ...] | None) -> None:
    """A caller that lists the media types it accepts must accept one the agent answers with
    (when the agent says what it answers with); none listed: it takes what comes."""
    wanted = [mode.split(";", 1)[0].strip().lower() for mode in accepted]
    if not wanted or not answers:
        return
    if any(media_type_accepted(answer, wanted) for answer in answers):
        return
    field = "params.configuration.acceptedOutputModes"
    raise ContentTypeNotSupported(
        f"{field}: this agent answers with {', '.join(answers)}, which none of the accepted "
        f"output modes ({', '.join(wanted)}) takes",
        metadata={"field": field, "mediaType": answers[0]},
    )


def _decisions_of(message: Message) -> list[Decision] | None:
    """The caller's decisions on a task's tool calls that wait for approval, when the message
    gives them (a `toolApprovals` data part); `InvalidParams` naming where one is malformed."""
    found: list[Decision] | None = None
    for index, part in enumerate(message.parts):
        if not (isinstance(part.data, Mapping) and APPROVALS_KEY in part.data):
            continue
        field = f"params.message.parts[{index}].data"
        if found is not None:
            raise _invalid(field, "give the decisions in one part, not several")
        try:
            given = decisions_in([part_to_block(part)])
        except ApprovalsInvalid as exc:
            raise _invalid(f"{field}.{exc.where}", exc.problem) from None
        assert given is not None
        found = given[1]
    if found is not None and not message.task_id:
        raise _invalid(
            "params.message.taskId", "decisions on tool calls answer a task: name it here"
        )
    return found


def _check_parts(parts: Iterable[Part], prefix: str, input_modes: tuple[str, ...]) -> None:
    for index, part in enumerate(parts):
        field = f"{prefix}[{index}]"
        media_type = media_type_of(part)
        if not media_type_accepted(media_type, input_modes):
            raise ContentTypeNotSupported(
                f"{field}: this agent does not take {media_type} (its card's "
                f"defaultInputModes: {', '.join(input_modes)})",
                metadata={"field": field, "mediaType": part.media_type},
            )
        try:
            part_to_block(part)
        except (ContentError, ValueError) as exc:
            raise ContentTypeNotSupported(
                f"{field}: {exc}",
                metadata={"field": field, "mediaType": part.media_type},
            ) from None


def _trim(task: Task, history_length: int | None) -> Task:
    if history_length is None:
        return task
    return attrs.evolve(task, history=task.history[-history_length:] if history_length else ())


async def get_extended_agent_card(
    context: CallContext, params: GetExtendedAgentCardRequest
) -> SignedCard:
    """The verified caller's tenant's own signed card (the tenant was checked against the token)."""
    return context.services.edge.tenant_cards[context.identity.tenant]


async def _accept(context: CallContext, params: SendMessageRequest) -> TurnStart:
    """Check a SendMessage (or SendStreamingMessage) and begin, join or find its turn: exactly
    once per messageId."""
    configuration = params.configuration or SendMessageConfiguration()
    push = configuration.task_push_notification_config
    tenant = context.services.edge.config.tenants[context.identity.tenant]
    if push is None and not tenant.allow_configless:
        raise _invalid(
            "params.configuration.taskPushNotificationConfig",
            "required: results are delivered by push to the gateway",
        )
    if push is not None:
        _check_push_config(context, push, "params.configuration.taskPushNotificationConfig")
    if params.message.role is not Role.ROLE_USER:
        raise _invalid("params.message.role", "must be ROLE_USER")
    _check_message(params.message, "params.message", tenant.card.input_modes)
    _check_output_modes(
        configuration.accepted_output_modes,
        context.services.edge.answer_modes.get(context.identity.tenant),
    )
    _check_history_length(configuration.history_length, "params.configuration.historyLength")
    decisions = _decisions_of(params.message)
    runner, limits = context.runner, context.services.limits
    # A new task whose turn can run at once is accepted and begun in one transaction.
    reserved = not params.message.task_id and await runner.reserve()
    try:
        start = await context.store.start_turn(
            context.identity,
            params.message,
            push,
            begin=reserved,
            limits=limits.turns[context.identity.tenant],
            decisions=decisions,
        )
    except BaseException:
        if reserved:
            runner.release()
        raise
    bind(task_id=start.task.id)
    if start.begun is not None:
        runner.start_begun(start.begun)
        return start
    if reserved:
        runner.release()
    if start.started:
        runner.start(start.task.id, context.identity)
    return start


async def send_message(context: CallContext, params: SendMessageRequest) -> SendMessageResponse:
    """Start a task (or continue an interrupted one) exactly once per messageId."""
    task = (await _accept(context, params)).task
    configuration = params.configuration or SendMessageConfiguration()
    if not configuration.return_immediately:
        store, runner = context.store, context.runner
        tenant = context.services.edge.config.tenants[context.identity.tenant]
        await runner.wait_settled(task.id, tenant.max_wait_seconds)
        answer = await store.answer(context.identity, task.id, configuration.history_length)
        if isinstance(answer, Message):
            return SendMessageResponse(message=answer)
        return SendMessageResponse(task=answer)
    return SendMessageResponse(task=_trim(task, configuration.history_length))


async def get_task(context: CallContext, params: GetTaskRequest) -> Task:
    _check_ids(("params.id", params.id, True))
    _check_history_length(params.history_length, "params.historyLength")
    return await context.store.get(context.identity, params.id, params.history_length)


async def list_tasks(context: CallContext, params: ListTasksRequest) -> ListTasksResponse:
    if params.page_size is not None and not 1 <= params.page_size <= 100:
        raise _invalid("params.pageSize", "must be between 1 and 100")
    _check_ids(("params.contextId", params.context_id, False))
    _check_history_length(params.history_length, "params.historyLength")
    response = await context.store.list_tasks(context.identity, params)
    if params.include_artifacts:
        return response
    tasks = tuple(attrs.evolve(task, artifacts=()) for task in response.tasks)
    return attrs.evolve(response, tasks=tasks)


async def cancel_task(context: CallContext, params: CancelTaskRequest) -> Task:
    _check_ids(("params.id", params.id, True))
    runner = context.runner
    words = runner.canceled_message(context.identity.tenant)
    task, _ = await context.store.cancel(context.identity, params.id, words)
    await runner.cancel(params.id)  # wherever it runs
    return task


async def create_push_config(
    context: CallContext, params: TaskPushNotificationConfig
) -> TaskPushNotificationConfig:
    if not params.task_id:
        raise _invalid("params.taskId", "required field missing")
    _check_push_config(context, params, "params")
    return await context.store.put_push_config(context.identity, params)


async def get_push_config(
    context: CallContext, params: GetTaskPushNotificationConfigRequest
) -> TaskPushNotificationConfig:
    _check_ids(("params.taskId", params.task_id, True), ("params.id", params.id, True))
    return await context.store.get_push_config(context.identity, params.task_id, params.id)


async def list_push_configs(
    context: CallContext, params: ListTaskPushNotificationConfigsRequest
) -> ListTaskPushNotificationConfigsResponse:
    _check_ids(("params.taskId", params.task_id, True))
    configs = await context.store.list_push_configs(context.identity, params.task_id)
    return ListTaskPushNotificationConfigsResponse(configs=tuple(configs))


async def delete_push_config(
    context: CallContext, params: DeleteTaskPushNotificationConfigRequest
) -> None:
    _check_ids(("params.taskId", params.task_id, True), ("params.id", params.id, True))
    await context.store.delete_push_config(context.identity, params.task_id, params.id)


def _hub(context: CallContext) -> EventHub:
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
    release = _hub(context).reserve(context.identity)
    try:
        start = await _accept(context, params)
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
    _check_ids(("params.id", params.id, True))
    release = _hub(context).reserve(context.identity)
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
    hub, store = _hub(context), context.store
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
        first = (cursor, json.dumps(to_wire(StreamResponse(task=task)), separators=(",", ":")))
        if state.is_terminal or state.is_interrupted:
            release()
            return TaskStream(hub, None, first, heartbeat)
        return TaskStream(hub, hub.subscribe(task_id, cursor), first, heartbeat, release)
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
    return TaskStream(hub, hub.subscribe(task_id, after), None, heartbeat, release)


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


METHODS: Mapping[str, Method] = {
    "GetExtendedAgentCard": Method(GetExtendedAgentCardRequest, get_extended_agent_card),
    "SendMessage": Method(SendMessageRequest, send_message),
    "GetTask": Method(GetTaskRequest, get_task),
    "ListTasks": Method(ListTasksRequest, list_tasks),
    "CancelTask": Method(CancelTaskRequest, cancel_task),
    "CreateTaskPushNotificationConfig": Method(TaskPushNotificationConfig, create_push_config),
    "GetTaskPushNotificationConfig": Method(GetTaskPushNotificationConfigRequest, get_push_config),
    "ListTaskPushNotificationConfigs": Method(
        ListTaskPushNotificationConfigsRequest, list_push_configs
    ),
    "DeleteTaskPushNotificationConfig": Method(
        DeleteTaskPushNotificationConfigRequest, delete_push_config
    ),
    "SendStreamingMessage": Method(SendMessageRequest, send_streaming_message),
    "SubscribeToTask": Method(SubscribeToTaskRequest, subscribe_to_task),
}
