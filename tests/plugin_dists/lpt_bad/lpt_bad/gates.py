"""Runtime-hook plugins that misbehave in different ways; each records the calls it got."""

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
