"""Config loading beyond the golden fixtures: paths, file errors, secrets, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from looping_core.config import load_config, parse_config, resolve_config_path
from looping_core.contract import SecretRef
from looping_core.errors import ConfigError


def test_defaults_need_no_file_content() -> None:
    config = parse_config("", source="empty.toml")
    assert config.source == "empty.toml"
    assert config.server.base_url == "http://127.0.0.1:8080"
    assert config.store.url == "sqlite:///looping.db"
    assert config.security.signing_key == SecretRef("A2A_SIGNING_KEY")
    assert config.plugins.enabled == ()
    assert config.tenants == {}


def test_public_url_wins_over_host_and_port() -> None:
    config = parse_config('[server]\npublic_url = "https://agents.example.com/"\n')
    assert config.server.base_url == "https://agents.example.com"


def test_config_path_precedence() -> None:
    environ = {"LOOPING_CONFIG": "/etc/looping/prod.toml"}
    assert resolve_config_path("given.toml", environ) == Path("given.toml")
    assert resolve_config_path(None, environ) == Path("/etc/looping/prod.toml")
    assert resolve_config_path(None, {}) == Path("looping.toml")


def test_missing_file_says_how_to_point_at_one(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: 1 config problem:\n"
        "  - file not found; pass --config PATH or set LOOPING_CONFIG @ $"
    )


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[server]\nhost = "caf\xe9"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems[0].startswith("cannot read the file: 'utf-8' codec")


def test_every_problem_of_every_section_is_reported_at_once() -> None:
    text = """
[server]
port = 70000
rpc_path = "a2a"
public_url = "ftp://x"
[security]
gateway_origins = ["gw.example"]
[store]
url = 5
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="many.toml")
    assert list(caught.value.problems) == [
        "expected a string, got integer @ $.store.url",
        "port must be between 0 and 65535, got 70000 @ $.server.port",
        "rpc_path must start with '/' @ $.server.rpc_path",
        "public_url must be an absolute http(s) URL without query or fragment "
        "@ $.server.public_url",
        "'gw.example' is not an origin: write scheme://host[:port] with no path, userinfo, query "
        "or fragment @ $.security.gateway_origins[0]",
    ]


def test_booleans_are_not_integers() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("[server]\nport = true\n")
    assert caught.value.problems == ("expected an integer, got boolean @ $.server.port",)


def test_secret_ref_never_shows_a_value() -> None:
    ref = SecretRef.parse("env:API_TOKEN")
    environ = {"API_TOKEN": "hunter2"}
    assert ref.value(environ) == "hunter2"
    assert "hunter2" not in repr(ref)
    assert "hunter2" not in str(ref)
    assert ref.is_set(environ)
    assert not ref.is_set({"API_TOKEN": ""})
    with pytest.raises(KeyError, match="environment variable API_TOKEN is not set"):
        ref.value({})


@pytest.mark.parametrize("text", ["API_TOKEN", "env:", "file:/run/secret", "env:1BAD"])
def test_secret_ref_refuses_anything_but_env_indirection(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - both messages are checked elsewhere
        SecretRef.parse(text)


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    return list(raised.value.problems)


def test_a_tenant_without_a_card_is_told_every_field_at_once_with_an_example() -> None:
    [problem] = problems_of('[tenants.counter]\nagent = "my_agents:Counter"\n')
    assert problem.endswith("@ $.tenants.counter.card")
    for field in ("name", "description", "at least one skill", "card = {", 'tags = ["text"]'):
        assert field in problem


def test_a_card_missing_some_fields_is_told_them_all_with_the_other_problems() -> None:
    problems = problems_of(
        '[tenants.counter]\nagent = "my_agents:Counter"\nmax_wait = 3\n'
        '[tenants.counter.card]\nname = "Counter"\n'
    )
    assert len(problems) == 2
    assert "missing: description, skills" in problems[0]
    assert problems[0].endswith("@ $.tenants.counter.card")
    assert "max_wait" in problems[1]  # not hidden by the card's


def test_a_skill_missing_fields_is_told_them_all() -> None:
    [problem] = problems_of(
        '[tenants.counter]\nagent = "my_agents:Counter"\n[tenants.counter.card]\n'
        'name = "C"\ndescription = "D"\nskills = [{ id = "count" }]\n'
    )
    assert "missing: name, description, tags" in problem
    assert problem.endswith("@ $.tenants.counter.card.skills[0]")


def test_store_connections_are_checked_and_default_to_the_stores_own() -> None:
    assert parse_config("").store.connections is None  # the store's default
    assert parse_config("[store]\nconnections = 3\n").store.connections == 3
    for wrong in ("0", "65", "-1"):
        with pytest.raises(ConfigError) as caught:
            parse_config(f"[store]\nconnections = {wrong}\n", source="looping.toml")
        assert str(caught.value) == (
            "looping.toml: 1 config problem:\n"
            "  - must be from 1 to 64 (connections of one process) @ $.store.connections"
        )
