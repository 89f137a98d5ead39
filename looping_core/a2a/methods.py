"""The A2A methods this edge answers, as rows of the method table.

Every handler runs after the gateway token was verified for `params.tenant`; every task it
touches is the verified caller's own (the store scopes each query to the caller).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from looping_core.a2a.edge import CallContext
from looping_core.a2a.errors import InvalidParams
from looping_core.a2a.gateway_token import origin_of
from looping_core.a2a.jsonrpc import Method
from looping_core.a2a.models import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
)
from looping_core.a2a.protojson import to_wire
from looping_core.appkeys import DELIVERER, RUNNER, STORE

__all__ = ["METHODS"]


def _invalid(field: str, problem: str) -> InvalidParams:
    return InvalidParams(f"{field}: {problem}", violations=[(field, problem)])


def _check_history_length(value: int | None, field: str) -> None:
    if value is not None and value < 0:
        raise _invalid(field, "must not be negative")


def _check_push_url(context: CallContext, config: TaskPushNotificationConfig, field: str) -> None:
    """Pushes go to allowlisted gateway origins only, so they can never aim at internal hosts."""
    if origin_of(config.url) not in context.edge.policy.gateway_origins:
        raise _invalid(field, "the push URL must be on an allowlisted gateway origin")


def _trim(task: Task, history_length: int | None) -> Task:
    if history_length is None:
        return task
    return attrs.evolve(task, history=task.history[-history_length:] if history_length else ())


async def get_extended_agent_card(
    context: CallContext, params: GetExtendedAgentCardRequest
) -> dict[str, Any]:
    """The verified caller's tenant's own signed card (the tenant was checked against the token)."""
    card = context.edge.tenant_cards[context.identity.tenant]
    result: dict[str, Any] = json.loads(card.body)
    return result


async def send_message(context: CallContext, params: SendMessageRequest) -> dict[str, Any]:
    """Start a task (or continue an interrupted one) exactly once per messageId."""
    configuration = params.configuration or SendMessageConfiguration()
    push = configuration.task_push_notification_config
    tenant = context.edge.config.tenants[context.identity.tenant]
    if push is None and not tenant.allow_configless:
        raise _invalid(
            "params.configuration.taskPushNotificationConfig",
            "required: results are delivered by push to the gateway",
        )
    if push is not None:
        _check_push_url(context, push, "params.configuration.taskPushNotificationConfig.url")
    if params.message.role is not Role.ROLE_USER:
        raise _invalid("params.message.role", "must be ROLE_USER")
    _check_history_length(configuration.history_length, "params.configuration.historyLength")
    app = context.request.app
    start = await app[STORE].start_turn(context.identity, params.message, push)
    task = start.task
    if start.started:
        app[RUNNER].start(task.id)
    if not configuration.return_immediately:
        await app[RUNNER].wait_settled(task.id, tenant.max_wait_seconds)
        task = await app[STORE].get(context.identity, task.id)
    return {"task": to_wire(_trim(task, configuration.history_length))}


async def get_task(context: CallContext, params: GetTaskRequest) -> Any:
    _check_history_length(params.history_length, "params.historyLength")
    store = context.request.app[STORE]
    return to_wire(await store.get(context.identity, params.id, params.history_length))


async def list_tasks(context: CallContext, params: ListTasksRequest) -> Any:
    if params.page_size is not None and not 1 <= params.page_size <= 100:
        raise _invalid("params.pageSize", "must be between 1 and 100")
    _check_history_length(params.history_length, "params.historyLength")
    response = await context.request.app[STORE].list_tasks(context.identity, params)
    document: dict[str, Any] = to_wire(response)
    if not params.include_artifacts:
        for task in document["tasks"]:
            task.pop("artifacts", None)
    return document


async def cancel_task(context: CallContext, params: CancelTaskRequest) -> Any:
    app = context.request.app
    task, _ = await app[STORE].cancel(context.identity, params.id)
    app[RUNNER].cancel_local(params.id)
    app[DELIVERER].wake()
    return to_wire(task)


async def create_push_config(context: CallContext, params: TaskPushNotificationConfig) -> Any:
    if not params.task_id:
        raise _invalid("params.taskId", "required field missing")
    _check_push_url(context, params, "params.url")
    stored = await context.request.app[STORE].put_push_config(context.identity, params)
    return to_wire(stored)


async def get_push_config(
    context: CallContext, params: GetTaskPushNotificationConfigRequest
) -> Any:
    store = context.request.app[STORE]
    return to_wire(await store.get_push_config(context.identity, params.task_id, params.id))


async def list_push_configs(
    context: CallContext, params: ListTaskPushNotificationConfigsRequest
) -> Any:
    configs = await context.request.app[STORE].list_push_configs(context.identity, params.task_id)
    document: dict[str, Any] = to_wire(
        ListTaskPushNotificationConfigsResponse(configs=tuple(configs))
    )
    document.setdefault("configs", [])
    return document


async def delete_push_config(
    context: CallContext, params: DeleteTaskPushNotificationConfigRequest
) -> Any:
    await context.request.app[STORE].delete_push_config(context.identity, params.task_id, params.id)
    return {}


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
}
