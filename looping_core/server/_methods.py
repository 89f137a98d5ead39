"""The A2A methods this edge answers, as rows of the method table.

Every handler runs after the gateway token was verified for `params.tenant`; every task it
touches is the verified caller's own (the store scopes each query to the caller).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from looping_core.a2a import (
    Message,
    Task,
    TaskPushNotificationConfig,
)
from looping_core.a2a.internal import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
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
)
from looping_core.server._accepting import accept
from looping_core.server._call_path import CallContext
from looping_core.server._generations import (
    current_task,
    generation_of,
    trim_history,
    with_generation,
)
from looping_core.server._param_checks import (
    check_history_length,
    check_ids,
    check_push_config,
    invalid,
)
from looping_core.server._stream_methods import send_streaming_message, subscribe_to_task

__all__ = ["METHODS"]


async def get_extended_agent_card(
    context: CallContext, params: GetExtendedAgentCardRequest
) -> SignedCard:
    """The verified caller's tenant's own signed card (the tenant was checked against the token)."""
    return context.services.edge.tenant_cards[context.identity.tenant]


async def send_message(context: CallContext, params: SendMessageRequest) -> SendMessageResponse:
    """Start a task (or continue an interrupted one) exactly once per messageId."""
    start = await accept(context, params)
    task = start.task
    configuration = params.configuration or SendMessageConfiguration()
    if not configuration.return_immediately:
        store, runner = context.store, context.runner
        tenant = context.services.edge.config.tenants[context.identity.tenant]
        await runner.wait_settled(task.id, tenant.max_wait_seconds)
        generation = await generation_of(context, task.id) if context.generations else 0
        answer = await store.answer(context.identity, task.id, configuration.history_length)
        if isinstance(answer, Message):
            return SendMessageResponse(message=answer)
        if context.generations:
            answer = with_generation(answer, generation - 1)
        return SendMessageResponse(task=answer)
    if context.generations:
        task = with_generation(task, start.generation - 1)
    return SendMessageResponse(task=trim_history(task, configuration.history_length))


async def get_task(context: CallContext, params: GetTaskRequest) -> Task:
    """The caller's task; in 1.1, with its generation, held while `currentGeneration` is
    current (a long-poll)."""
    check_ids(("params.id", params.id, True))
    check_history_length(params.history_length, "params.historyLength")
    if context.generations:
        return await current_task(
            context, params.id, params.history_length, params.current_generation
        )
    return await context.store.get(context.identity, params.id, params.history_length)


async def list_tasks(context: CallContext, params: ListTasksRequest) -> ListTasksResponse:
    if params.page_size is not None and not 1 <= params.page_size <= 100:
        raise invalid("params.pageSize", "must be between 1 and 100")
    check_ids(("params.contextId", params.context_id, False))
    check_history_length(params.history_length, "params.historyLength")
    generations = context.generations
    response = await context.store.list_tasks(context.identity, params, generations=generations)
    if params.include_artifacts:
        return response
    tasks = tuple(attrs.evolve(task, artifacts=()) for task in response.tasks)
    return attrs.evolve(response, tasks=tasks)


async def cancel_task(context: CallContext, params: CancelTaskRequest) -> Task:
    check_ids(("params.id", params.id, True))
    runner = context.runner
    words = runner.canceled_message(context.identity.tenant)
    task, _ = await context.store.cancel(context.identity, params.id, words)
    await runner.cancel(params.id)  # wherever it runs
    if context.generations:  # it ended: its generation is the one the cancel gave it
        return with_generation(task, await generation_of(context, params.id) - 1)
    return task


async def create_push_config(
    context: CallContext, params: TaskPushNotificationConfig
) -> TaskPushNotificationConfig:
    if not params.task_id:
        raise invalid("params.taskId", "required field missing")
    check_push_config(context, params, "params")
    return await context.store.put_push_config(context.identity, params)


async def get_push_config(
    context: CallContext, params: GetTaskPushNotificationConfigRequest
) -> TaskPushNotificationConfig:
    check_ids(("params.taskId", params.task_id, True), ("params.id", params.id, True))
    return await context.store.get_push_config(context.identity, params.task_id, params.id)


async def list_push_configs(
    context: CallContext, params: ListTaskPushNotificationConfigsRequest
) -> ListTaskPushNotificationConfigsResponse:
    check_ids(("params.taskId", params.task_id, True))
    configs = await context.store.list_push_configs(context.identity, params.task_id)
    return ListTaskPushNotificationConfigsResponse(configs=tuple(configs))


async def delete_push_config(
    context: CallContext, params: DeleteTaskPushNotificationConfigRequest
) -> None:
    check_ids(("params.taskId", params.task_id, True), ("params.id", params.id, True))
    await context.store.delete_push_config(context.identity, params.task_id, params.id)


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
