"""One startup assembly for `serve`, `worker`, `check` and the harness: the same problems found
by the same code, all at once; one problem raised as itself; the environment read once."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from looping_core.a2a import SigningKeyError
from looping_core.agent import AgentLoadError, LoopingAgent, LoopingConfig
from looping_core.config import TenantModelConfig, parse_config
from looping_core.contract import SecretRef
from looping_core.server import StartupProblems, create_app
from looping_core.server.internal import check_startup
from looping_core.store import StoreError
from looping_core.testing import config_toml, ed25519_private_jwk, tenant_toml

KEY_VARIABLE = "LPT_STARTUP_KEY"
KEY = json.dumps(ed25519_private_jwk("startup-key"))


def config_with(tmp_path: Path, *, store_url: str = "", agent: str = "") -> str:
    return config_toml(
        port=8080,
        gateway_origins=["https://gateway.example"],
        signing_key_env=KEY_VARIABLE,
        store_url=store_url or f"sqlite:///{tmp_path / 'store.db'}",
        extra=tenant_toml("t", agent or "looping_plugins_example.agent:WordCountAgent"),
    )


def test_a_sound_config_assembles_with_its_key_agents_and_store_url(tmp_path: Path) -> None:
    config = parse_config(config_with(tmp_path), source="<test>")
    startup, failures = check_startup(config, environ={KEY_VARIABLE: KEY})
    assert failures == []
    assert startup is not None
    assert startup.signing_key.kid == "startup-key"
    assert set(startup.agents) == {"t"}
    assert startup.store_url == f"sqlite:///{tmp_path / 'store.db'}"
    assert startup.signer.issuer == config.server.base_url


def test_every_problem_is_found_in_one_pass_and_create_app_says_them_all(tmp_path: Path) -> None:
    """What `looping check` lists is what `create_app` refuses, line for line."""
    text = config_with(
        tmp_path,
        store_url="mysql://db.example/agents",
        agent="looping_plugins_example.agent:WordCounter",
    )
    config = parse_config(text, source="<test>")
    startup, failures = check_startup(config, environ={})  # no key either
    assert startup is None
    lines = [line for _, found in failures for line in found]
    assert lines == [
        "the signing key is read from the environment variable LPT_STARTUP_KEY, which is not "
        "set; generate one with `looping keys` and export it @ $.security.signing_key",
        "[store] url must start with sqlite:/// or postgresql://, got mysql: @ $.store.url",
        "tenants.t.agent: 'looping_plugins_example.agent' has no attribute 'WordCounter' (did "
        "you mean 'WordCountAgent'?); point it at your agent class",
    ]
    with pytest.raises(StartupProblems) as raised:
        create_app(config, environ={})
    assert list(raised.value.problems) == lines
    assert str(raised.value).startswith("3 startup problems:\n  - the signing key")


def test_an_sqlite_older_than_the_store_needs_is_a_startup_problem_naming_both_fixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's writes read back their rows with `RETURNING` (SQLite 3.35): a Python linked
    against an older SQLite is told so before anything listens, not at its first turn."""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    config = parse_config(config_with(tmp_path), source="<test>")
    startup, failures = check_startup(config, environ={KEY_VARIABLE: KEY})
    assert startup is None
    assert [line for _, found in failures for line in found] == [
        "the embedded store needs SQLite 3.35.0 or later, and this Python's sqlite3 module uses"
        " SQLite 3.31.1; run looping-core on a Python built with a newer SQLite, or set [store]"
        " url to a PostgreSQL database @ $.store.url"
    ]
    with pytest.raises(StoreError, match=r"needs SQLite 3\.35\.0"):
        create_app(config, environ={KEY_VARIABLE: KEY})
    assert not (tmp_path / "store.db").exists()


@pytest.mark.parametrize(
    ("store_url", "agent", "environ", "error"),
    [
        ("", "", {}, SigningKeyError),
        ("mysql://db.example/agents", "", {KEY_VARIABLE: KEY}, StoreError),
        ("", "no_such_module:Agent", {KEY_VARIABLE: KEY}, AgentLoadError),
    ],
)
def test_one_problem_is_raised_as_itself(
    tmp_path: Path,
    store_url: str,
    agent: str,
    environ: dict[str, str],
    error: type[Exception],
) -> None:
    config = parse_config(config_with(tmp_path, store_url=store_url, agent=agent), source="<t>")
    with pytest.raises(error):
        create_app(config, environ=environ)


def test_secrets_are_read_from_the_one_environment_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process environment is not read behind the assembly's back: not for the key, not
    for the store URL, not for an agent's own model (`AgentContext.environ`)."""
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    monkeypatch.setenv("LPT_STORE_URL", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    text = config_with(tmp_path).replace(
        f'url = "sqlite:///{tmp_path / "store.db"}"', 'url = "env:LPT_STORE_URL"'
    )
    config = parse_config(text, source="<test>")
    startup, failures = check_startup(config, environ={})
    assert startup is None
    assert [type(error) for error, _ in failures] == [SigningKeyError, StoreError]
    given = {KEY_VARIABLE: KEY, "LPT_STORE_URL": f"sqlite:///{tmp_path / 'given.db'}"}
    startup, failures = check_startup(config, environ=given)
    assert failures == []
    assert startup is not None
    assert startup.store_url.endswith("given.db")
    assert startup.agents["t"].context.environ is given


class OwnKeyAgent(LoopingAgent):
    """Names its own model, whose API key is a secret (`env:LPT_OWN_MODEL_KEY`)."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "The test's words."

    def agent_config(self) -> LoopingConfig:
        model = TenantModelConfig(
            model="own",
            base_url="http://127.0.0.1:9/v1",
            api_key=SecretRef.parse("env:LPT_OWN_MODEL_KEY"),
        )
        return LoopingConfig(model=model)


def test_an_agent_s_own_model_reads_its_key_from_the_assembly_s_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LPT_OWN_MODEL_KEY", "sk-in-the-process-environment")
    config = parse_config(config_with(tmp_path, agent="test_startup:OwnKeyAgent"), source="<t>")
    startup, failures = check_startup(config, environ={KEY_VARIABLE: KEY})
    assert startup is None
    assert failures[0][1] == [
        "tenants.t: OwnKeyAgent.agent_config().model.api_key: the environment variable "
        "LPT_OWN_MODEL_KEY is not set; export it before starting"
    ]
    environ = {KEY_VARIABLE: KEY, "LPT_OWN_MODEL_KEY": "sk-given"}
    startup, failures = check_startup(config, environ=environ)
    assert failures == []
