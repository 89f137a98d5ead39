"""The validators plugin authors run in their own CI give the host's own verdict."""

from __future__ import annotations

import pytest

from looping_core.errors import PluginProblems
from looping_core.testing import PluginValidator, assert_plugin_valid, plugin_problems


def test_a_valid_plugin_has_no_problems() -> None:
    assert plugin_problems("example-notes") == []
    registry = assert_plugin_valid("example-notes", {"max_notes": 5})
    assert registry.plugin("example-notes").config.max_notes == 5


def test_bad_settings_are_the_hosts_problems() -> None:
    [problem] = plugin_problems("example-notes", {"max_note": 5})
    assert problem.code == "config-invalid"
    assert problem.message == (
        "plugin 'example-notes' (looping-plugins-example 0.1.0): invalid settings in "
        "<settings for example-notes>: extra fields found (max_note: did you mean max_notes?) "
        "@ $.plugins.example-notes"
    )


def test_assert_plugin_valid_raises_the_same_error_the_host_raises() -> None:
    with pytest.raises(PluginProblems) as caught:
        assert_plugin_valid("example-notez")
    assert caught.value.codes == ["not-installed"]
    assert "Did you mean 'example-notes'?" in str(caught.value)


@pytest.mark.usefixtures("installed_test_plugins")
def test_together_with_finds_clashes_between_plugins() -> None:
    assert plugin_problems("good") == []
    codes = [p.code for p in plugin_problems("good", together_with=["dup-family"])]
    assert codes == ["duplicate-tool-family"] * 2 + ["duplicate-model-provider"] * 2


@pytest.mark.usefixtures("installed_test_plugins")
def test_secrets_come_from_the_given_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LPT_API_KEY", "from-the-real-environment")
    settings = {"api_key": "env:LPT_API_KEY"}
    assert [p.code for p in plugin_problems("needs-secret", settings)] == ["missing-secret"]
    assert plugin_problems("needs-secret", settings, environ={"LPT_API_KEY": "x"}) == []
    validator = PluginValidator(environ={"LPT_API_KEY": "x"})
    assert validator.problems("needs-secret", settings) == []


def test_the_pytest_fixture_validates(plugin_validator: PluginValidator) -> None:
    assert plugin_validator.problems("example-gates") == []
    assert plugin_validator.assert_valid("example-gates").keys == ("example-gates",)
