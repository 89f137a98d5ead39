"""The door of `looping_core.a2a` for looping-core's own upper layers (the server, the store,
the runner, the gateway): what an A2A server built on this package needs beyond the names an
app uses. Not part of the app-facing API: it may change with any release, and the API snapshot
leaves it out. Everything here is defined in the private modules beside it.
"""

from looping_core.a2a._card import SignedCard, build_stub_card, build_tenant_card, sign_card
from looping_core.a2a._errors import (
    ContentTypeNotSupported,
    InternalError,
    InvalidParams,
    PayloadTooLarge,
    RequestTimeout,
    TaskNotCancelable,
    TaskNotFound,
    Unauthenticated,
    UnsupportedMediaType,
    UnsupportedOperation,
    VersionNotSupported,
    error_object,
    rest_error,
    spec_of,
)
from looping_core.a2a._gateway_token import GatewayToken, check_gateway_token, origin_of
from looping_core.a2a._grammar import (
    id_problem,
    printable,
    push_target_problems,
    undeliverable_reason,
)
from looping_core.a2a._jose import SIGNING_ALGORITHM, read_unverified, sign_compact
from looping_core.a2a._jsonrpc import (
    EnvelopeError,
    Method,
    RpcCall,
    RpcId,
    method_not_found,
    parse_body,
    parse_envelope,
    parse_params,
    response,
)
from looping_core.a2a._jwks import JwksCache
from looping_core.a2a._keys import jwks_document
from looping_core.a2a._models import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageConfiguration,
    SendMessageRequest,
    SendMessageResponse,
    SubscribeToTaskRequest,
)
from looping_core.a2a._parts import media_type_accepted, media_type_of
from looping_core.a2a._push import CONTENT_TYPE as PUSH_CONTENT_TYPE

__all__ = [
    "PUSH_CONTENT_TYPE",
    "SIGNING_ALGORITHM",
    "CancelTaskRequest",
    "ContentTypeNotSupported",
    "DeleteTaskPushNotificationConfigRequest",
    "EnvelopeError",
    "GatewayToken",
    "GetExtendedAgentCardRequest",
    "GetTaskPushNotificationConfigRequest",
    "GetTaskRequest",
    "InternalError",
    "InvalidParams",
    "JwksCache",
    "ListTaskPushNotificationConfigsRequest",
    "ListTaskPushNotificationConfigsResponse",
    "ListTasksRequest",
    "ListTasksResponse",
    "Method",
    "PayloadTooLarge",
    "RequestTimeout",
    "RpcCall",
    "RpcId",
    "SendMessageConfiguration",
    "SendMessageRequest",
    "SendMessageResponse",
    "SignedCard",
    "SubscribeToTaskRequest",
    "TaskNotCancelable",
    "TaskNotFound",
    "Unauthenticated",
    "UnsupportedMediaType",
    "UnsupportedOperation",
    "VersionNotSupported",
    "build_stub_card",
    "build_tenant_card",
    "check_gateway_token",
    "error_object",
    "id_problem",
    "jwks_document",
    "media_type_accepted",
    "media_type_of",
    "method_not_found",
    "origin_of",
    "parse_body",
    "parse_envelope",
    "parse_params",
    "printable",
    "push_target_problems",
    "read_unverified",
    "response",
    "rest_error",
    "sign_card",
    "sign_compact",
    "spec_of",
    "undeliverable_reason",
]
