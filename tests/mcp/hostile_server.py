"""A hostile MCP server over stdio, written by hand (no SDK) so it can break the protocol.

    python hostile_server.py

`HOSTILE_TOOLS` is a JSON list of tools to list (name and inputSchema), or `HOSTILE_TOOL_COUNT`
a number of plain tools; `HOSTILE_PAGES=forever` lists page after page without end;
`HOSTILE_FOLDER` is where it leaves its pid and the pids of the helpers it starts. Its calls:

- `echo`: `{"text": ...}` back as text;
- `garbage`: three lines that are not JSON-RPC, then the answer;
- `not_utf8`: a byte that is not UTF-8 on a line of its own, then nothing;
- `huge_line`: `HOSTILE_LINE_BYTES` bytes with no newline, then nothing;
- `huge_result`: a text of `HOSTILE_RESULT_BYTES` bytes;
- `helper`: starts a helper process (`sleep 600`) in its own process group and answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FOLDER = Path(os.environ.get("HOSTILE_FOLDER", "."))
out = sys.stdout.buffer


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def tools() -> list[dict[str, Any]]:
    if "HOSTILE_TOOLS" in os.environ:
        listed: list[dict[str, Any]] = json.loads(os.environ["HOSTILE_TOOLS"])
        return listed
    count = int(os.environ.get("HOSTILE_TOOL_COUNT", "0"))
    return [{"name": f"tool_{n}", "inputSchema": {"type": "object"}} for n in range(count)]


def text(request_id: Any, value: str) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": value}]},
        }
    )


def call(request_id: Any, name: str, arguments: dict[str, Any]) -> None:
    if name == "garbage":
        out.write(b"starting up...\n{not json\n[1, 2, 3]\n")
        out.flush()
        text(request_id, "after garbage")
    elif name == "not_utf8":
        out.write(b"\xff\xfe\n")
        out.flush()
    elif name == "huge_line":
        size = int(os.environ.get("HOSTILE_LINE_BYTES", "0"))
        chunk = b"x" * 65536
        for _ in range(size // len(chunk) + 1):
            out.write(chunk)
        out.flush()
    elif name == "huge_result":
        text(request_id, "y" * int(os.environ.get("HOSTILE_RESULT_BYTES", "0")))
    elif name == "helper":
        helper = subprocess.Popen(["sleep", "600"])
        (FOLDER / f"helper-{helper.pid}").write_text(str(helper.pid))
        text(request_id, "started")
    else:
        text(request_id, str(arguments.get("text", "")))


def main() -> None:
    FOLDER.mkdir(parents=True, exist_ok=True)
    (FOLDER / f"pid-{os.getpid()}").write_text(str(os.getpid()))
    if os.environ.get("HOSTILE_HELPER_AT_START"):
        helper = subprocess.Popen(["sleep", "600"])
        (FOLDER / f"helper-{helper.pid}").write_text(str(helper.pid))
    page = 0
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }})  # fmt: skip
        elif method == "tools/list":
            page += 1
            result: dict[str, Any] = {"tools": tools()}
            if os.environ.get("HOSTILE_PAGES") == "forever":
                result["nextCursor"] = f"page-{page}"
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/call":
            params = message["params"]
            call(request_id, params["name"], params.get("arguments") or {})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})


if __name__ == "__main__":
    main()
