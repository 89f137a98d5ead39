"""Accepting a message (SendMessage, SendStreamingMessage): its checks, then its turn begun,
joined or found in one write, exactly once per messageId; the runner told."""

from __future__ import annotations

from looping_core._logs import bind
from looping_core.a2a import Role
from looping_core.a2a.internal import SendMessageConfiguration, SendMessageRequest
from looping_core.server._call_path import CallContext
from looping_core.server._param_checks import (
    check_history_length,
    check_message,
    check_output_modes,
    check_push_config,
    decisions_of,
    invalid,
)
from looping_core.store.internal import TurnStart

__all__ = ["accept"]


async def accept(context: CallContext, params: SendMessageRequest) -> TurnStart:
    """Check a SendMessage (or SendStreamingMessage) and begin, join or find its turn: exactly
    once per messageId."""
    configuration = params.configuration or SendMessageConfiguration()
    push = configuration.task_push_notification_config
    tenant = context.services.edge.config.tenants[context.identity.tenant]
    if push is None and not tenant.allow_configless:
        raise invalid(
            "params.configuration.taskPushNotificationConfig",
            "required: results are delivered by push to the gateway",
        )
    if push is not None:
        check_push_config(context, push, "params.configuration.taskPushNotificationConfig")
    if params.message.role is not Role.ROLE_USER:
        raise invalid("params.message.role", "must be ROLE_USER")
    check_message(params.message, "params.message", tenant.card.input_modes)
    check_output_modes(
        configuration.accepted_output_modes,
        context.services.edge.answer_modes.get(context.identity.tenant),
    )
    check_history_length(configuration.history_length, "params.configuration.historyLength")
    decisions = decisions_of(params.message)
    limits = context.services.limits.turns[context.identity.tenant]

    async def begin(now: bool) -> TurnStart:
        return await context.store.start_turn(
            context.identity,
            params.message,
            push,
            begin=now,
            limits=limits,
            decisions=decisions,
            generations=context.generations,
            # The A2A 1.1 draft's guard; in 1.0 the field is not there to heed.
            if_generation=configuration.if_generation_match if context.generations else None,
        )

    start = await context.runner.accept(
        begin, context.identity, new_task=not params.message.task_id
    )
    bind(task_id=start.task.id)
    return start
