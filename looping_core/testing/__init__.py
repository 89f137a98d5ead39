"""The public test harness. Never imported by runtime code.

For plugin authors: run the host's own startup validation on your plugin in your test suite.

    from looping_core.testing import assert_plugin_valid, plugin_problems

    def test_my_plugin_is_valid():
        assert_plugin_valid("my-plugin", {"api_key": "env:MY_KEY"}, environ={"MY_KEY": "x"})

The pytest plugin (loaded automatically through the `pytest11` entry point; no autouse
fixtures) also offers the `plugin_validator` fixture.
"""

from looping_core.testing._validation import PluginValidator, assert_plugin_valid, plugin_problems

__all__ = ["PluginValidator", "assert_plugin_valid", "plugin_problems"]
