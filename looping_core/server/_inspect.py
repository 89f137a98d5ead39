"""The inspection endpoint (`[server] inspection`): everything stored about one task, for the
development console beside a local gateway (`looping gateway --console`).

    GET {INSPECTION_PATH}/{tenant}/tasks/{task_id}

Off by default, and no route at all then. When on, the config has already refused any but a
loopback `[server] host`; on top of that the path of one request is: a loopback client (else
403, before anything is read) → a gateway token verified as every call's is, for the tenant in
the path, with this endpoint's URL as its audience → a tenant served here → a task the token's
caller owns (another caller's is not found, as with GetTask). The answer is JSON; errors are
`google.rpc.Status` bodies, as the HTTP+JSON binding's.
"""

from __future__ import annotations

import ipaddress
import logging

from aiohttp import web

from looping_core.a2a import RpcError
from looping_core.a2a.internal import InvalidParams, TaskNotFound, id_problem, rest_error
from looping_core.config import INSPECTION_PATH
from looping_core.server._calls import authenticate_request
from looping_core.server._refusals import answer_or_refuse, error_headers, outcome_of
from looping_core.server._requests import observed
from looping_core.server._services import SERVICES

__all__ = ["add_inspection_route", "is_loopback_client"]

_log = logging.getLogger("looping_core.server")


def add_inspection_route(app: web.Application) -> None:
    app.router.add_get(INSPECTION_PATH + "/{tenant}/tasks/{task_id}", handle_inspect)


def is_loopback_client(remote: str | None) -> bool:
    """Whether a peer address is this machine's (an IPv4-mapped IPv6 loopback included)."""
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


async def handle_inspect(request: web.Request) -> web.StreamResponse:
    record = observed("inspection")

    def refuse(error: RpcError) -> web.Response:
        record.outcome = outcome_of(error)
        status, body = rest_error(error)
        return web.json_response(body, status=status, headers=error_headers(error) or None)

    async def work() -> web.StreamResponse:
        if not is_loopback_client(request.remote):
            _log.warning("inspection refused: remote=%s is not loopback", request.remote)
            record.outcome = "PERMISSION_DENIED"
            body = {
                "error": {
                    "code": 403,
                    "status": "PERMISSION_DENIED",
                    "message": "The inspection endpoint answers clients on this machine only",
                }
            }
            return web.json_response(body, status=403)
        services = request.app[SERVICES]
        tenant = request.match_info["tenant"]
        policy = services.edge.policies["inspection"]
        identity = await authenticate_request(request, services, tenant, policy)
        if tenant not in services.edge.tenant_cards or services.inspection is None:
            raise TaskNotFound("No such agent here")
        task_id = request.match_info["task_id"]
        problem = id_problem(task_id, required=True)
        if problem is not None:
            raise InvalidParams(f"task id: {problem}", violations=[("taskId", problem)])
        return web.json_response(await services.inspection.inspect(identity, task_id))

    return await answer_or_refuse(request, record, work, refuse)
