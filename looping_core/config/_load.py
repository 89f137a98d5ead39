"""Reading `looping.toml`: TOML to the record types through a strict converter, then the checks;
every problem in the file at once, in one `ConfigError` that names the file."""

from __future__ import annotations

import datetime
import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs

from looping_core._strict import describe, error_leaves, register_strict_primitives
from looping_core.config._checks import (
    PLUGIN_KEY,
    TENANT_ID,
    check_card,
    check_cross_references,
    check_grpc,
    check_limits,
    check_loop,
    check_model,
    check_observability,
    check_retention,
    check_runner,
    check_security,
    check_server,
    check_store,
    check_streaming,
)
from looping_core.config._model import (
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_FILE,
    DEFAULT_STUB_CARD,
    Config,
    LimitsConfig,
    ModelPrice,
    ObservabilityConfig,
    PluginsConfig,
    PushConfig,
    RetentionConfig,
    RunnerConfig,
    SecurityConfig,
    ServerConfig,
    StoreConfig,
    StreamingConfig,
    StubCardConfig,
    TenantConfig,
)
from looping_core.config._prices import check_priced, check_prices
from looping_core.contract import ConfigPath, SecretRef
from looping_core.errors import ConfigError

__all__ = ["load_config", "parse_config", "resolve_config_path", "structure_plugin_config"]


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)

    def structure_secret(value: object, _: type) -> SecretRef:
        if not isinstance(value, str):
            raise ValueError('expected a string of the form "env:NAME"')
        return SecretRef.parse(value)

    converter.register_structure_hook(SecretRef, structure_secret)

    def structure_path(value: object, _: type) -> ConfigPath:
        if not isinstance(value, str) or not value or "\x00" in value:
            raise ValueError("expected a path (a non-empty string)")
        return ConfigPath(value)

    converter.register_structure_hook(ConfigPath, structure_path)

    def structure_date(value: object, _: type) -> datetime.date:
        if isinstance(value, datetime.datetime) or not isinstance(value, datetime.date):
            raise ValueError("expected a TOML date such as 2026-12-31")
        return value

    converter.register_structure_hook(datetime.date, structure_date)
    register_strict_primitives(converter)
    return converter


_converter = _make_converter()


def _structure(data: Any, type_: type[Any], path: str) -> tuple[Any, list[str]]:
    try:
        return _converter.structure(data, type_), []
    except Exception as exc:  # cattrs raises ExceptionGroups of arbitrary leaf errors
        return None, [f"{describe(leaf)} @ {where}" for leaf, where in error_leaves(exc, path)]


def structure_plugin_config(
    raw: Mapping[str, Any], config_type: type[Any] | None, path: str, folder: Path | None = None
) -> tuple[Any, list[str]]:
    """Structure one `[plugins.<key>]` table into the plugin's config type.

    Returns `(config, problems)`; problems are `problem @ $.plugins.<key>...` lines. A plugin
    without a config type accepts only an absent or empty table. `folder`: the config file's,
    against which relative `ConfigPath` values (defaults included) are made absolute.
    """
    if config_type is None:
        if raw:
            keys = ", ".join(sorted(raw))
            return None, [f"this plugin takes no settings, found ({keys}) @ {path}"]
        return None, []
    value, problems = _structure(dict(raw), config_type, path)
    if value is not None and folder is not None:
        value = _resolved(value, folder)
    return value, problems


def _resolved(value: Any, folder: Path) -> Any:
    """`value` with every relative `ConfigPath` in it (through attrs instances, mappings and
    tuples) made absolute against `folder`."""
    if isinstance(value, ConfigPath):
        return value if Path(value).is_absolute() else ConfigPath(folder / value)
    if attrs.has(type(value)):
        changes = {}
        for field in attrs.fields(type(value)):
            if not field.init:
                continue
            current = getattr(value, field.name)
            resolved = _resolved(current, folder)
            if resolved is not current:
                changes[field.alias or field.name] = resolved
        return attrs.evolve(value, **changes) if changes else value
    if isinstance(value, Mapping):
        items = {key: _resolved(item, folder) for key, item in value.items()}
        return items if any(items[key] is not item for key, item in value.items()) else value
    if isinstance(value, tuple):
        resolved_items = tuple(_resolved(item, folder) for item in value)
        changed = any(a is not b for a, b in zip(resolved_items, value, strict=True))
        return resolved_items if changed else value
    return value


def resolve_config_path(
    explicit: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The config file to read: `--config`, else `$LOOPING_CONFIG`, else `./looping.toml`."""
    env = os.environ if environ is None else environ
    if explicit is not None:
        return Path(explicit)
    if env.get(CONFIG_ENV_VAR):
        return Path(env[CONFIG_ENV_VAR])
    return Path(DEFAULT_CONFIG_FILE)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file; raise `ConfigError` listing every problem in it."""
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            source,
            [f"file not found; pass --config PATH or set {CONFIG_ENV_VAR} @ $"],
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [f"cannot read the file: {exc} @ $"]) from None
    folder = Path(path).resolve().parent
    try:
        config = parse_config(text, source=source)
    except ConfigError as exc:
        if exc.partial is not None:
            exc.partial = attrs.evolve(exc.partial, store=_beside(exc.partial.store, folder))
        raise
    return attrs.evolve(config, store=_beside(config.store, folder))


def _beside(store: StoreConfig, folder: Path) -> StoreConfig:
    """A relative SQLite path is the config file's folder's, wherever the command runs."""
    path = store.url.removeprefix("sqlite:///")
    if not store.url.startswith("sqlite:///") or path == ":memory:" or Path(path).is_absolute():
        return store
    return attrs.evolve(store, url=f"sqlite:///{folder / path}")


def parse_config(text: str, source: str = "<string>") -> Config:
    """Validate TOML text as a config; raise `ConfigError` listing every problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [f"invalid TOML: {exc} @ $"]) from None

    problems: list[str] = []
    plugins = _parse_plugins(raw.pop("plugins", {}), problems)
    tenants = _parse_tenants(raw.pop("tenants", {}), problems)
    server = _parse_section(raw, "server", ServerConfig, problems)
    security = _parse_section(raw, "security", SecurityConfig, problems)
    store = _parse_section(raw, "store", StoreConfig, problems)
    runner = _parse_section(raw, "runner", RunnerConfig, problems)
    push = _parse_section(raw, "push", PushConfig, problems)
    streaming = _parse_section(raw, "streaming", StreamingConfig, problems)
    observability = _parse_section(raw, "observability", ObservabilityConfig, problems)
    retention = _parse_section(raw, "retention", RetentionConfig, problems)
    limits = _parse_section(raw, "limits", LimitsConfig, problems)
    prices = _parse_prices(raw.pop("prices", {}), problems)
    card = DEFAULT_STUB_CARD
    if "card" in raw:
        card, card_problems = _structure(raw.pop("card"), StubCardConfig, "$.card")
        problems.extend(card_problems)
    sections = [
        "server", "security", "store", "card", "runner", "push", "streaming", "observability",
        "retention", "limits", "prices", "plugins",
    ]  # fmt: skip
    for unknown in raw:
        close = difflib.get_close_matches(unknown, [*sections, "tenants"], n=1)
        guess = f" (did you mean {close[0]}?)" if close else ""
        problems.append(
            f"unknown section {unknown!r}{guess}; the sections are {', '.join(sections)} and "
            f"tenants @ $.{unknown}"
        )
    problems.extend(check_server(server))
    problems.extend(check_grpc(server))
    problems.extend(check_security(security))
    problems.extend(check_runner(runner, push))
    problems.extend(check_streaming(streaming))
    problems.extend(check_store(store))
    problems.extend(check_observability(observability, server))
    problems.extend(check_retention(retention))
    problems.extend(check_limits(limits, "$.limits"))
    for tenant_id, tenant in tenants.items():
        problems.extend(check_card(tenant.card, f"$.tenants.{tenant_id}.card", need_skills=True))
        if not 0 <= tenant.max_wait_seconds <= 600:
            problems.append(
                "max_wait_seconds must be between 0 and 600 "
                f"@ $.tenants.{tenant_id}.max_wait_seconds"
            )
        if tenant.model is not None:
            problems.extend(check_model(tenant.model, f"$.tenants.{tenant_id}.model"))
        problems.extend(check_loop(tenant.loop, f"$.tenants.{tenant_id}.loop"))
        problems.extend(check_limits(tenant.limits, f"$.tenants.{tenant_id}.limits"))
    if card is not None:
        problems.extend(check_card(card, "$.card", need_skills=False))
    problems.extend(check_cross_references(plugins, tenants))
    problems.extend(check_prices(prices))
    problems.extend(check_priced(tenants, limits, prices))
    config = Config(
        source=source,
        server=server,
        security=security,
        store=store,
        card=card if card is not None else DEFAULT_STUB_CARD,
        runner=runner,
        push=push,
        streaming=streaming,
        observability=observability,
        retention=retention,
        limits=limits,
        plugins=plugins,
        prices=prices,
        tenants=tenants,
    )
    if problems:
        raise ConfigError(source, problems, partial=config)
    return config


_Section = TypeVar("_Section", bound=attrs.AttrsInstance)


def _parse_section(
    raw: dict[str, Any], name: str, type_: type[_Section], problems: list[str]
) -> _Section:
    """Structure one plain section; on error record the problems and keep every value that
    could be read (a wrong one falls back to its default), so the range checks still see the
    others: one wrong type never hides the section's other mistakes."""
    table = raw.pop(name, {})
    value, section_problems = _structure(table, type_, f"$.{name}")
    if isinstance(value, type_):
        return value
    problems.extend(section_problems)
    return _salvage(table, type_)


def _salvage(table: object, type_: type[_Section]) -> _Section:
    """`type_` from the fields of `table` that structure on their own (defaults for the rest)."""
    if not isinstance(table, dict):
        return type_()
    readable: dict[str, Any] = {}
    for field in attrs.fields(attrs.resolve_types(type_)):
        if field.name in table:
            try:
                readable[field.name] = _converter.structure(table[field.name], field.type)
            except Exception:  # reported already, by the whole section's structuring
                continue
    try:
        return type_(**readable)
    except Exception:  # values valid alone that a validator refuses together
        return type_()


def _parse_plugins(raw: object, problems: list[str]) -> PluginsConfig:
    if not isinstance(raw, dict):
        problems.append("expected a table @ $.plugins")
        return PluginsConfig()
    enabled: list[str] = []
    raw_enabled = raw.get("enabled", [])
    if not isinstance(raw_enabled, list):
        problems.append("expected a list of plugin keys @ $.plugins.enabled")
        raw_enabled = []
    for index, key in enumerate(raw_enabled):
        where = f"$.plugins.enabled[{index}]"
        if not isinstance(key, str) or not PLUGIN_KEY.match(key):
            problems.append(f"expected a plugin key (an entry-point name) @ {where}")
        elif key in enabled:
            problems.append(f"plugin {key!r} is listed twice @ {where}")
        else:
            enabled.append(key)
    settings: dict[str, Mapping[str, Any]] = {}
    for key, value in raw.items():
        if key == "enabled":
            continue
        if not isinstance(value, dict):
            problems.append(
                f"unknown key {key!r}: [plugins] holds `enabled` and one [plugins.<key>] "
                f"table per plugin @ $.plugins.{key}"
            )
        elif key not in enabled:
            problems.append(
                f"settings for plugin {key!r}, which is not in plugins.enabled; enable it or "
                f"remove the table @ $.plugins.{key}"
            )
        else:
            settings[key] = value
    return PluginsConfig(enabled=tuple(enabled), settings=settings)


def _parse_prices(raw: object, problems: list[str]) -> dict[str, ModelPrice]:
    """`[prices]`: a table of `[prices."<model>"]` tables; the ones that read are kept."""
    if not isinstance(raw, dict):
        problems.append('expected a table of [prices."<model>"] tables @ $.prices')
        return {}
    prices: dict[str, ModelPrice] = {}
    for key, table in raw.items():
        price, price_problems = _structure(table, ModelPrice, f'$.prices."{key}"')
        problems.extend(price_problems)
        if price is not None:
            prices[key] = price
    return prices


def _parse_tenants(raw: object, problems: list[str]) -> dict[str, TenantConfig]:
    if not isinstance(raw, dict):
        problems.append("expected a table of [tenants.<id>] tables @ $.tenants")
        return {}
    tenants: dict[str, TenantConfig] = {}
    for tenant_id, table in raw.items():
        path = f"$.tenants.{tenant_id}"
        if not TENANT_ID.match(tenant_id):
            problems.append(
                "a tenant id is 1-63 characters of lowercase letters, digits, '-' or '_', "
                f"starting with a letter or digit @ {path}"
            )
            continue
        # The card's missing keys all at once, in place of cattrs' first one in each table.
        missing = _missing_card_fields(table, f"{path}.card")
        tenant, tenant_problems = _structure(table, TenantConfig, path)
        if missing:
            said = f"required field missing @ {path}.card"
            tenant_problems = [p for p in tenant_problems if not p.startswith(said)]
        problems.extend(missing + tenant_problems)
        if tenant is not None:
            tenants[tenant_id] = tenant
    return tenants


CARD_EXAMPLE = (
    'name = "Counter", description = "Counts the words of what you send.", skills = [{ id = '
    '"count", name = "Count words", description = "Counts the words in a text.", tags = ["text"] }]'
)
"""A whole tenant card, as an inline TOML table's keys: what a problem about one shows."""


def _missing_card_fields(table: object, path: str) -> list[str]:
    """Every required key a tenant's card lacks, in one problem per table, with an example:
    a card written from scratch is then fixed in one round, not one key at a time."""
    if not isinstance(table, dict):
        return []
    card = table.get("card")
    if card is None:
        return [
            "a tenant needs a card (what callers are shown): a [...card] table with name, "
            f"description and at least one skill, such as card = {{ {CARD_EXAMPLE} }} @ {path}"
        ]
    if not isinstance(card, dict):
        return []  # the wrong type: said by the structuring
    problems = []
    lacking = [key for key in ("name", "description") if key not in card]
    if lacking and not card.get("skills"):
        lacking.append("skills")  # (alone, it is the card checks' to say)
    if lacking:
        problems.append(
            f"a card needs name, description and at least one skill; missing: "
            f"{', '.join(lacking)} (a whole card: {CARD_EXAMPLE}) @ {path}"
        )
    skills = card.get("skills")
    for index, skill in enumerate(skills if isinstance(skills, list) else []):
        if not isinstance(skill, dict):
            continue
        absent = [key for key in ("id", "name", "description", "tags") if key not in skill]
        if absent and absent != ["tags"]:  # (tags alone: the card checks')
            problems.append(
                f"a skill needs id, name, description and tags; missing: {', '.join(absent)} "
                '(such as { id = "count", name = "Count words", description = "Counts the '
                f'words in a text.", tags = ["text"] }}) @ {path}.skills[{index}]'
            )
    return problems
