"""HTTP cassettes: a model's or a tool's HTTP recorded once, then replayed with nothing running.

Built on vcrpy (the `test` extra), which patches httpx and httpx2 (the `openai` client) and
aiohttp clients. Requests are matched on method, URL and body, never on headers; credentials
(`authorization`, `x-api-key`, `api-key`, cookies) are never written. Without recording, a
request that has no recording is blocked with an error naming it, never sent. `LOOPING_RECORD=1`
records (replacing what the cassette held).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["RECORD_ENV_VAR", "cassette"]

RECORD_ENV_VAR = "LOOPING_RECORD"
SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "cookie", "proxy-authorization")
MATCH_ON = ("method", "scheme", "host", "port", "path", "query", "body")


def _drop_response_cookies(response: Mapping[str, Any]) -> Mapping[str, Any]:
    headers = {
        name: value
        for name, value in response.get("headers", {}).items()
        if name.lower() not in ("set-cookie", "set-cookie2")
    }
    return {**response, "headers": headers}


@contextlib.contextmanager
def cassette(path: str | os.PathLike[str], *, record: bool | None = None) -> Iterator[Any]:
    """Replay (or, with `record` or `LOOPING_RECORD=1`, record) the HTTP made inside the block
    from the YAML cassette at `path`; yields vcrpy's cassette (`.play_count`, `.requests`)."""
    import vcr  # noqa: PLC0415 - the test extra's; runtime code never comes here

    if record is None:
        record = os.environ.get(RECORD_ENV_VAR) == "1"
    recorder = vcr.VCR(
        record_mode="all" if record else "none",
        match_on=MATCH_ON,
        filter_headers=list(SECRET_HEADERS),
        before_record_response=_drop_response_cookies,
        decode_compressed_response=True,
    )
    target = Path(path)
    if record:
        target.parent.mkdir(parents=True, exist_ok=True)
    with recorder.use_cassette(str(target)) as tape:
        yield tape
