"""Runtime-hook plugins that misbehave in different ways; each records the calls it got."""

import asyncio
import threading

from looping_core.contract import PluginInfo
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl


class _Gate:
    def __init__(self, verdict):
        self.verdict = verdict
        self.turns = []
        self.displaced = []

    @hookimpl
    def contract_version(self):
        return CONTRACT_VERSION

    @hookimpl
    def plugin_info(self):
        return PluginInfo(capability="A gate for the host's tests.")

    @hookimpl
    async def should_handle_turn(self, turn):
        self.turns.append(turn)
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return self.verdict

    @hookimpl
    def messages_displaced(self, messages, session):
        self.displaced.append((list(messages), session))
        if isinstance(self.verdict, Exception):
            raise self.verdict


raising = _Gate(RuntimeError("gate exploded"))
refusing = _Gate(False)
not_bool = _Gate("yes")


class _Hanging:
    """A listener that never returns on its own: `async def` (awaits forever) or blocking (sleeps
    on a thread until released)."""

    def __init__(self):
        self.calls = 0
        self.release = threading.Event()

    @hookimpl
    def contract_version(self):
        return CONTRACT_VERSION

    @hookimpl
    def plugin_info(self):
        return PluginInfo(capability="A listener that hangs, for the host's tests.")


class _HangingAsync(_Hanging):
    @hookimpl
    async def messages_displaced(self, messages):
        self.calls += 1
        await asyncio.Event().wait()


class _HangingSync(_Hanging):
    @hookimpl
    def messages_displaced(self, messages):
        self.calls += 1
        self.release.wait(30)


hangs_async = _HangingAsync()
hangs_sync = _HangingSync()
