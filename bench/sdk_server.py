"""The official A2A SDK's in-memory, unauthenticated JSON-RPC server (or, with `grpc`, its gRPC
server), for comparison.

Same work as our example agent (count the words, return the count as an artifact), nothing
verified, nothing persisted. Run by bench/send_message.py: `python bench/sdk_server.py PORT
[grpc]`.
"""

from __future__ import annotations

import sys

import uvicorn
from a2a.client import minimal_agent_card
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import Part
from starlette.applications import Starlette


class WordCountExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        count = len(context.get_user_input().split())
        await updater.add_artifact([Part(text=str(count))], name="word-count")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("the benchmark never cancels")


async def serve_grpc(handler: DefaultRequestHandler, port: int) -> None:
    import grpc  # noqa: PLC0415 - the SDK's grpc extra
    from a2a.server.request_handlers.grpc_handler import GrpcHandler  # noqa: PLC0415
    from a2a.types import a2a_pb2_grpc  # noqa: PLC0415

    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    port = int(sys.argv[1])
    card = minimal_agent_card(f"http://127.0.0.1:{port}/")
    handler = DefaultRequestHandler(WordCountExecutor(), InMemoryTaskStore(), card)
    if sys.argv[2:] == ["grpc"]:
        import uvloop  # noqa: PLC0415 - as uvicorn uses it for the JSON-RPC server

        uvloop.run(serve_grpc(handler, port))
        return
    app = Starlette(routes=create_jsonrpc_routes(handler, "/"))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
