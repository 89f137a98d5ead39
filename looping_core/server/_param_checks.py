"""What the methods check of their params before anything is written: ids, history lengths,
push targets, a message's parts and the media types it accepts, decisions on tool calls. Each
failure is `InvalidParams` (or `ContentTypeNotSupported`) naming the field by its wire path."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from looping_core.a2a import Message, Part, TaskPushNotificationConfig, part_to_block
from looping_core.a2a.internal import (
    ContentTypeNotSupported,
    InvalidParams,
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

__all__ = [
    "check_history_length",
    "check_ids",
    "check_message",
    "check_output_modes",
    "check_parts",
    "check_push_config",
    "decisions_of",
    "invalid",
    "refuse",
]


def invalid(field: str, problem: str) -> InvalidParams:
    return InvalidParams(f"{field}: {problem}", violations=[(field, problem)])


def refuse(violations: list[tuple[str, str]]) -> None:
    if violations:
        summary = "; ".join(f"{field}: {problem}" for field, problem in violations)
        raise InvalidParams(f"Invalid parameters: {summary}", violations=violations)


def check_ids(*ids: tuple[str, str, bool]) -> None:
    """`(field, value, required)` triples, each held to the id grammar."""
    refuse(
        [
            (field, problem)
            for field, value, required in ids
            if (problem := id_problem(value, required=required)) is not None
        ]
    )


def check_history_length(value: int | None, field: str) -> None:
    if value is not None and value < 0:
        raise invalid(field, "must not be negative")


def check_push_config(
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
    refuse(violations)


def check_message(message: Message, prefix: str, input_modes: Iterable[str]) -> None:
    """Ids held to their grammar; every part must be of a media type the tenant takes and have a
    form the agent can be given."""
    check_ids(
        (f"{prefix}.messageId", message.message_id, True),
        (f"{prefix}.contextId", message.context_id, False),
        (f"{prefix}.taskId", message.task_id, False),
        *(
            (f"{prefix}.referenceTaskIds[{index}]", task_id, True)
            for index, task_id in enumerate(message.reference_task_ids)
        ),
    )
    check_parts(message.parts, f"{prefix}.parts", tuple(input_modes))


def check_output_modes(accepted: Iterable[str], answers: tuple[str, ...] | None) -> None:
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


def decisions_of(message: Message) -> list[Decision] | None:
    """The caller's decisions on a task's tool calls that wait for approval, when the message
    gives them (a `toolApprovals` data part); `InvalidParams` naming where one is malformed."""
    found: list[Decision] | None = None
    for index, part in enumerate(message.parts):
        if not (isinstance(part.data, Mapping) and APPROVALS_KEY in part.data):
            continue
        field = f"params.message.parts[{index}].data"
        if found is not None:
            raise invalid(field, "give the decisions in one part, not several")
        try:
            given = decisions_in([part_to_block(part)])
        except ApprovalsInvalid as exc:
            raise invalid(f"{field}.{exc.where}", exc.problem) from None
        assert given is not None
        found = given[1]
    if found is not None and not message.task_id:
        raise invalid(
            "params.message.taskId", "decisions on tool calls answer a task: name it here"
        )
    return found


def check_parts(parts: Iterable[Part], prefix: str, input_modes: tuple[str, ...]) -> None:
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
