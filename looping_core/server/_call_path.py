"""The call path every binding shares, free of any transport: a binding hands it what it read
off the wire (the `Authorization` value, the `A2A-Version`, the peer, the method and its
params) and gets back the handler's answer.

authenticate (the four token checks in order, then audience and tenant) → version → the
caller's rate → the method's params → the handler, given a `CallContext` that carries the
verified caller and the store and runner chosen for its tenant, once, here. No handler reaches
past its context for either, so a later change can give each tenant (or group of tenants) its
own store in this one place.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs

from looping_core import _metrics, _tracing
from looping_core._logs import bind
from looping_core.a2a import TokenPolicy, TokenRejected
from looping_core.a2a.internal import (
    InvalidParams,
    Method,
    RpcCall,
    Unauthenticated,
    VersionNotSupported,
    check_gateway_token,
    id_problem,
    parse_params,
)
from looping_core.contract import Identity

if TYPE_CHECKING:
    from looping_core.runner.internal import Runner
    from looping_core.server._services import Services
    from looping_core.store.internal import TaskStore

__all__ = [
    "DRAFT_VERSION",
    "SUPPORTED_MAJOR",
    "CallContext",
    "Caller",
    "authenticate",
    "call_method",
    "check_served",
    "check_version",
    "no_tenant",
]

_log = logging.getLogger("looping_core.server")

SUPPORTED_MAJOR = "1"


@attrs.frozen
class Caller:
    """A verified caller, and when its token stops counting (its `exp` plus the leeway, in
    seconds since the epoch): a stream it opened ends then."""

    identity: Identity
    expires: float


@attrs.frozen
class CallContext:
    """What a method handler gets besides its params: the verified caller, the store and the
    runner of its tenant (chosen once, by the call path), and the services for the rest."""

    services: Services
    identity: Identity
    store: TaskStore
    runner: Runner
    last_event_id: str | None = None
    """Where a client resuming a stream left off (`Last-Event-ID`)."""
    version: str = "1.0"
    """The A2A version the call is answered in (`check_version`)."""

    @property
    def generations(self) -> bool:
        """Whether tasks and events carry their generation (the A2A 1.1 draft)."""
        return self.version == DRAFT_VERSION


async def authenticate(
    authorization: str | None,
    *,
    peer: str | None,
    services: Services,
    tenant: str | None,
    policy: TokenPolicy,
) -> Caller:
    """The verified caller, from the `Authorization` value the binding read (`policy`: the
    binding's, whose URL is the token's audience). Without a `tenant` in the request, every
    check but the tenant's is made (against the tenant the token names), so the request is
    still refused or authenticated before anything else is answered."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        _log.warning("gateway token rejected: check=token-missing remote=%s", peer)
        _metrics.TOKEN_REFUSALS.inc(check="token-missing")
        raise Unauthenticated(
            "A gateway token is required (Authorization: Bearer <token>)",
            metadata={"check": "token-missing"},
        )
    try:
        # A refusal leaves the span as its exception: the check's name and reason, no token.
        with _tracing.span("verify gateway token"):
            verified = await check_gateway_token(
                token.strip(), tenant=tenant, policy=policy, jwks=services.jwks
            )
    except TokenRejected as exc:
        _metrics.TOKEN_REFUSALS.inc(check=exc.check)
        # Nothing of the request is trusted yet: the line says which check failed and who
        # asked, never a value the caller chose (a tenant, a key URL: they could forge lines
        # or fill the log). The reason is in the trace (the span's exception).
        _log.warning("gateway token rejected: check=%s remote=%s", exc.check, peer)
        raise Unauthenticated(
            f"Gateway token rejected: {exc.check}", metadata={"check": exc.check}
        ) from None
    identity = verified.identity
    bind(tenant=identity.tenant, subject=identity.subject)  # this request's log lines say so
    return Caller(identity, verified.expires + policy.leeway_seconds)


DRAFT_VERSION = "1.1"
"""The A2A version whose draft (branch dev-1.1) `[server] a2a_1_1_draft` answers."""


def check_version(version: str | None, *, draft_1_1: bool = False) -> str:
    """The `A2A-Version` the client sent (none: 0.3, as the spec says) must be a 1.x. Returns
    the version the call is answered in: `1.1` (the draft's task generations) when the client
    asks for it and `draft_1_1` (`[server] a2a_1_1_draft`) is on, else `1.0`."""
    version = version or "0.3"
    major, _, _ = version.strip().partition(".")
    if major != SUPPORTED_MAJOR:
        raise VersionNotSupported(
            f"A2A version '{version}' is not supported; this endpoint speaks 1.0 "
            "(send the header A2A-Version: 1.0)",
            metadata={"requestedVersion": version, "supportedVersions": "1.0"},
        )
    return DRAFT_VERSION if draft_1_1 and version.strip() == DRAFT_VERSION else "1.0"


def no_tenant(field: str) -> InvalidParams:
    """The refusal of a request that names no tenant (`field`: where a binding carries it)."""
    return InvalidParams(
        f"{field} is required: this endpoint serves several agents and has no default",
        violations=[(field, "required field missing")],
    )


def check_served(services: Services, tenant: str, field: str) -> None:
    """The tenant a request names (in `field`) must be an agent served here."""
    if tenant not in services.edge.tenant_cards:
        raise InvalidParams(
            f"{field}: no such agent here", violations=[(field, "not an agent served here")]
        )


async def call_method(
    services: Services,
    identity: Identity,
    call: RpcCall,
    method: Method,
    *,
    last_event_id: str | None = None,
    version: str = "1.0",
) -> Any:
    """Count the call against the caller's rates, parse its params into the method's type and
    run its handler (every binding), in A2A `version` (`check_version`)."""
    services.limits.check_rate(identity)
    params = parse_params(call, method)
    task_id = _task_named(params)
    if task_id:
        bind(task_id=task_id)
    context = CallContext(
        services=services,
        identity=identity,
        store=services.store,
        runner=services.runner,
        last_event_id=last_event_id,
        version=version,
    )
    return await method.handler(context, params)


def _task_named(params: Any) -> str | None:
    """The task a call is about, when its params name one (`id` is a task's only where there
    is no `taskId`: a push config's `id` is the config's)."""
    for name in ("task_id", "id"):
        value = getattr(params, name, None)
        if isinstance(value, str):
            return value if id_problem(value, required=True) is None else None
    return None
