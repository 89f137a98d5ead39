"""What the local gateway and the harness's fake servers share: an aiohttp application on a
loopback port (a free one unless given), started and stopped by hand or as an async context
manager."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self

from aiohttp import web

__all__ = ["LocalServer", "Startable"]


class Startable(abc.ABC):
    """Something started and stopped by hand, or as an async context manager."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


class LocalServer(Startable):
    """A real HTTP server on `host` (127.0.0.1 by default) with the routes `_routes` adds."""

    host = "127.0.0.1"
    max_body_bytes = 1024**2
    """Larger request bodies are refused (413) before a handler reads them (aiohttp's default)."""

    def __init__(self, port: int = 0) -> None:
        self._runner: web.AppRunner | None = None
        self._port = port

    @abc.abstractmethod
    def _routes(self, app: web.Application) -> None:
        """Add the server's routes to `app`."""

    @property
    def _origin(self) -> str:
        if self._runner is None:
            raise RuntimeError(f"the {type(self).__name__} is not started")
        return f"http://{self.host}:{self._port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_body_bytes)
        self._routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self._port).start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
