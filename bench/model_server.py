"""A stateless OpenAI-compatible Chat Completions server for bench/agent_loop.py.

    python bench/model_server.py PORT [--latency-ms 5] [--rounds 3]

Each request is answered from its own messages: while the conversation since the last user
message holds fewer than `--rounds` tool results, the answer calls the `lookup` tool once more;
then it answers with text. It waits `--latency-ms` before answering (a model's time to first
token), streams when asked to (`"stream": true`, as looping-core's provider does) and answers with
one JSON body otherwise (as pydantic-ai's `Agent.run` asks), with usage either way. It runs in its
own process so that its CPU time is not counted as the agents'.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
from typing import Any

from aiohttp import web

_ids = itertools.count()


def _tool_results_since_user(messages: list[dict[str, Any]]) -> int:
    count = 0
    for message in reversed(messages):
        if message["role"] == "user":
            break
        count += message["role"] == "tool"
    return count


def _answer(messages: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    """The assistant message (OpenAI shape) this conversation gets next."""
    done = _tool_results_since_user(messages)
    if done < rounds:
        call = {
            "id": f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"key": f"k{done}"})},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": f"Looked up {done} keys."}


def _usage(messages: list[dict[str, Any]]) -> dict[str, int]:
    prompt = sum(len(json.dumps(m)) for m in messages) // 4
    return {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12}


def make_app(latency: float, rounds: int) -> web.Application:
    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(latency)
        message = _answer(body["messages"], rounds)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        base = {"id": "chatcmpl-bench", "created": 0, "model": body["model"]}
        if not body.get("stream"):
            return web.json_response(
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": _usage(body["messages"]),
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        delta: dict[str, Any] = {"role": "assistant"}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": 0, **message["tool_calls"][0]}]
        else:
            delta["content"] = message["content"]
        chunks = [
            {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {"choices": [], "usage": _usage(body["messages"])},
        ]
        for chunk in chunks:
            line = json.dumps({**base, "object": "chat.completion.chunk", **chunk})
            await response.write(f"data: {line}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    app = make_app(options.latency_ms / 1000, options.rounds)
    web.run_app(app, host="127.0.0.1", port=options.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
