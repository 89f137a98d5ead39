"""What the fuzz tests share: the agent and a gateway on an event loop in a thread of their own
(a synchronous hypothesis test drives them), and a handler that collects ERROR records."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from looping_core.testing import FakeGateway

from support.serving import start_agent

_T = TypeVar("_T")


class ErrorLog(logging.Handler):
    """Collects ERROR records from any thread (the server runs on its own)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Served:
    """The edge tests' agent (`start_agent(**options)`) and a gateway, on their own loop."""

    def __init__(self, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.gateway = FakeGateway()
        self.run(self.gateway.start())
        self.agent, self._listener = self.run(start_agent([self.gateway.origin], **options))
        self.gateway.agent_jwks_url = self.agent.base_url + "/.well-known/jwks.json"
        self.codes: collections.Counter[str] = collections.Counter()
        """What each call was answered with, for the report."""

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout: float = 60) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _closing(self) -> None:
        """What a subclass closes first, on the loop."""

    def close(self) -> None:
        async def stop() -> None:
            await self._closing()
            await self.agent.session.close()
            await self._listener.cleanup()
            await self.gateway.stop()

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
