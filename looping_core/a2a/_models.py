"""A2A 1.0 wire models the edge accepts and emits (proto `lf.a2a.v1`), as frozen attrs.

Attribute names are the proto field names in snake_case; `protojson.to_wire` writes them in
camelCase. A field with a default is optional on the wire and omitted when it holds the default;
a field without one is REQUIRED. `None` marks proto3 `optional` fields: unset is omitted, a set
`False` is written.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from typing import Any, NewType

import attrs

__all__ = [
    "TERMINAL_STATES",
    "AgentCapabilities",
    "AgentCard",
    "AgentCardSignature",
    "AgentInterface",
    "AgentProvider",
    "AgentSkill",
    "Artifact",
    "AuthenticationInfo",
    "CancelTaskRequest",
    "DeleteTaskPushNotificationConfigRequest",
    "GetExtendedAgentCardRequest",
    "GetTaskPushNotificationConfigRequest",
    "GetTaskRequest",
    "HttpAuthSecurityScheme",
    "Int64",
    "ListTaskPushNotificationConfigsRequest",
    "ListTaskPushNotificationConfigsResponse",
    "ListTasksRequest",
    "ListTasksResponse",
    "Message",
    "Part",
    "Role",
    "SecurityRequirement",
    "SecurityScheme",
    "SendMessageConfiguration",
    "SendMessageRequest",
    "StreamResponse",
    "StringList",
    "SubscribeToTaskRequest",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskPushNotificationConfig",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdateEvent",
]

Int64 = NewType("Int64", int)
"""A proto `int64`: a JSON string in ProtoJSON (a number is read too)."""


@attrs.frozen
class AgentInterface:
    url: str
    protocol_binding: str
    protocol_version: str
    tenant: str = ""


@attrs.frozen
class AgentCapabilities:
    streaming: bool | None = None
    push_notifications: bool | None = None
    extended_agent_card: bool | None = None


@attrs.frozen
class AgentProvider:
    url: str
    organization: str


@attrs.frozen
class AgentSkill:
    id: str
    name: str
    description: str
    tags: tuple[str, ...]
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()


@attrs.frozen
class HttpAuthSecurityScheme:
    scheme: str
    description: str = ""
    bearer_format: str = ""


@attrs.frozen
class SecurityScheme:
    """A oneof; only the HTTP auth member is modelled (the gateway token is a bearer JWT)."""

    http_auth_security_scheme: HttpAuthSecurityScheme | None = None


@attrs.frozen
class StringList:
    list: tuple[str, ...] = ()


@attrs.frozen
class SecurityRequirement:
    schemes: Mapping[str, StringList] = attrs.field(factory=dict)


@attrs.frozen
class AgentCardSignature:
    protected: str
    signature: str
    header: Mapping[str, Any] | None = None


@attrs.frozen
class AgentCard:
    name: str
    description: str
    supported_interfaces: tuple[AgentInterface, ...]
    version: str
    capabilities: AgentCapabilities
    default_input_modes: tuple[str, ...]
    default_output_modes: tuple[str, ...]
    skills: tuple[AgentSkill, ...]
    provider: AgentProvider | None = None
    documentation_url: str = ""
    security_schemes: Mapping[str, SecurityScheme] = attrs.field(factory=dict)
    security_requirements: tuple[SecurityRequirement, ...] = ()
    signatures: tuple[AgentCardSignature, ...] = ()
    icon_url: str = ""


@attrs.frozen
class GetExtendedAgentCardRequest:
    tenant: str = ""


def _exactly_one_content(instance: Part, _: attrs.Attribute[Any], __: Any) -> None:
    present = [
        name for name in ("text", "raw", "url", "data") if getattr(instance, name) is not None
    ]
    if len(present) != 1:
        raise ValueError("a part holds exactly one of text, raw, url or data")


@attrs.frozen
class Part:
    """A piece of a message or artifact: exactly one of `text`, `raw`, `url`, `data`.

    `data` is any JSON value except null (an unset oneof member cannot be told from null).
    """

    text: str | None = None
    raw: bytes | None = None
    url: str | None = None
    data: Any = attrs.field(default=None, validator=_exactly_one_content)
    metadata: Mapping[str, Any] | None = None
    filename: str = ""
    media_type: str = ""


class Role(enum.Enum):
    ROLE_UNSPECIFIED = 0
    ROLE_USER = 1
    ROLE_AGENT = 2


class TaskState(enum.Enum):
    TASK_STATE_UNSPECIFIED = 0
    TASK_STATE_SUBMITTED = 1
    TASK_STATE_WORKING = 2
    TASK_STATE_COMPLETED = 3
    TASK_STATE_FAILED = 4
    TASK_STATE_CANCELED = 5
    TASK_STATE_INPUT_REQUIRED = 6
    TASK_STATE_REJECTED = 7
    TASK_STATE_AUTH_REQUIRED = 8

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def is_interrupted(self) -> bool:
        return self in (TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED)


TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


def _at_least_one(instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    if not value:
        raise ValueError(f"{attribute.name} needs at least one element")


@attrs.frozen
class Message:
    message_id: str
    role: Role
    parts: tuple[Part, ...] = attrs.field(validator=_at_least_one)
    context_id: str = ""
    task_id: str = ""
    metadata: Mapping[str, Any] | None = None
    extensions: tuple[str, ...] = ()
    reference_task_ids: tuple[str, ...] = ()


@attrs.frozen
class TaskStatus:
    state: TaskState
    message: Message | None = None
    timestamp: datetime.datetime | None = None


@attrs.frozen
class Artifact:
    artifact_id: str
    parts: tuple[Part, ...] = attrs.field(validator=_at_least_one)
    name: str = ""
    description: str = ""
    metadata: Mapping[str, Any] | None = None
    extensions: tuple[str, ...] = ()


@attrs.frozen
class Task:
    id: str
    context_id: str
    status: TaskStatus
    artifacts: tuple[Artifact, ...] = ()
    history: tuple[Message, ...] = ()
    metadata: Mapping[str, Any] | None = None
    generation: Int64 = Int64(0)
    """A2A 1.1 draft: 1 when the task was created, one more per event since; 0 (left out):
    not given (A2A 1.0)."""


@attrs.frozen
class AuthenticationInfo:
    scheme: str
    credentials: str = ""


@attrs.frozen
class TaskPushNotificationConfig:
    url: str
    tenant: str = ""
    id: str = ""
    task_id: str = ""
    token: str = ""
    authentication: AuthenticationInfo | None = None


@attrs.frozen
class SendMessageConfiguration:
    accepted_output_modes: tuple[str, ...] = ()
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = None
    return_immediately: bool = False
    if_generation_match: Int64 | None = None
    """A2A 1.1 draft: refuse a message to a task whose generation is another."""


@attrs.frozen
class SendMessageRequest:
    message: Message
    tenant: str = ""
    configuration: SendMessageConfiguration | None = None
    metadata: Mapping[str, Any] | None = None


@attrs.frozen
class GetTaskRequest:
    id: str
    tenant: str = ""
    history_length: int | None = None
    current_generation: Int64 | None = None
    """A2A 1.1 draft: hold the call until the task's generation passes this one."""


@attrs.frozen
class SubscribeToTaskRequest:
    id: str
    tenant: str = ""


@attrs.frozen
class ListTasksRequest:
    tenant: str = ""
    context_id: str = ""
    status: TaskState = TaskState.TASK_STATE_UNSPECIFIED
    page_size: int | None = None
    page_token: str = ""
    history_length: int | None = None
    status_timestamp_after: datetime.datetime | None = None
    include_artifacts: bool = False


@attrs.frozen
class SendMessageResponse:
    """A oneof: the task, or the agent's direct message (exactly one is set)."""

    task: Task | None = None
    message: Message | None = None


@attrs.frozen
class ListTasksResponse:
    """All four fields are REQUIRED, so all four are always written (even `nextPageToken: ""`)."""

    tasks: tuple[Task, ...]
    next_page_token: str
    page_size: int
    total_size: int


@attrs.frozen
class CancelTaskRequest:
    id: str
    tenant: str = ""
    metadata: Mapping[str, Any] | None = None


@attrs.frozen
class GetTaskPushNotificationConfigRequest:
    task_id: str
    id: str
    tenant: str = ""


@attrs.frozen
class DeleteTaskPushNotificationConfigRequest:
    task_id: str
    id: str
    tenant: str = ""


@attrs.frozen
class ListTaskPushNotificationConfigsRequest:
    task_id: str
    tenant: str = ""
    page_size: int | None = None
    page_token: str = ""


@attrs.frozen
class ListTaskPushNotificationConfigsResponse:
    configs: tuple[TaskPushNotificationConfig, ...]
    next_page_token: str = ""


@attrs.frozen
class TaskStatusUpdateEvent:
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: Mapping[str, Any] | None = None
    generation: Int64 = Int64(0)
    """A2A 1.1 draft: the task's generation after this update."""


@attrs.frozen
class TaskArtifactUpdateEvent:
    """An artifact of a task, whole or a chunk: `append` adds its parts to the artifact with the
    same id sent before; `last_chunk` says no more parts of it follow."""

    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False
    metadata: Mapping[str, Any] | None = None
    generation: Int64 = Int64(0)
    """A2A 1.1 draft: the task's generation after this update."""


@attrs.frozen
class StreamResponse:
    """A oneof: exactly one member is set (streams and pushes send the same shapes)."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None
