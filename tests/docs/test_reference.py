"""The reference pages are complete: every key of the config schema has a row in docs/config.md
(and no row names a key the schema lacks), docs/cli.md is the `looping` command as click
describes it, docs/errors.md the error table, and every file or test a page points at exists. A
key or an option added without its documentation, or a test renamed under its page, fails
here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cli_reference import render
from errors_reference import FAILURE_REASONS, reasons_in_code
from errors_reference import render as render_errors

ROOT = Path(__file__).parents[2]
SCHEMA = json.loads((ROOT / "contracts" / "config.schema.json").read_text())
CONFIG_PAGE = ROOT / "docs" / "config.md"
CLI_PAGE = ROOT / "docs" / "cli.md"
ERRORS_PAGE = ROOT / "docs" / "errors.md"

# How the reference writes a table whose names are the user's own.
PLACEHOLDERS = {"tenants": "<id>", "plugins": "<key>", "prices": '"<model>"'}


def _resolved(node: dict[str, Any]) -> dict[str, Any]:
    """The schema a node stands for: its `$ref` followed, its `allOf` merged, the non-null
    choice of an `anyOf`."""
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if "allOf" in node:
        properties: dict[str, Any] = {}
        for part in node["allOf"]:
            properties.update(_resolved(part).get("properties", {}))
        properties.update(node.get("properties", {}))
        return {"type": "object", "properties": properties}
    for choice in node.get("anyOf", node.get("oneOf", ())):
        if choice.get("type") != "null":
            return _resolved(choice)
    return node


def _keys(node: dict[str, Any], table: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    """(table, key) for every key of the schema, the table written as in a TOML header."""
    node = _resolved(node)
    for key, declared in node.get("properties", {}).items():
        value = _resolved(declared)
        if not table and key in PLACEHOLDERS:  # a table of tables named by the user
            if "properties" in value:
                yield from _keys(value, (key,))
            extra = _resolved(value.get("additionalProperties") or {})
            inner = (key, PLACEHOLDERS[key])
            if "properties" in extra:
                yield from _keys(extra, inner)
            else:  # a plugin's settings: its own type, documented by the plugin
                yield ".".join(inner), ""
            continue
        if "properties" in value:
            yield from _keys(value, (*table, key))
            continue
        items = _resolved(value.get("items", {})) if value.get("type") == "array" else {}
        if "properties" in items:
            yield from _keys(items, (*table, f"[{key}]"))
        else:
            yield ".".join(table), key


def _header(table: str) -> str:
    parts = table.split(".")
    if parts and parts[-1].startswith("["):
        return "[[" + ".".join(part.strip("[]") for part in parts) + "]]"
    return "[" + ".".join(part.strip("[]") for part in parts) + "]"


def _rows() -> list[str]:
    return [line for line in CONFIG_PAGE.read_text().splitlines() if line.startswith("| `[")]


def test_every_config_key_has_a_row_in_the_reference() -> None:
    rows = _rows()
    missing = []
    for table, key in _keys(SCHEMA, ()):
        header = _header(table)
        named = [row for row in rows if row.split(" | ", 1)[0].startswith(f"| `{header}")]
        if not any(not key or f"`{key}`" in row or f"{header} {key}`" in row for row in named):
            missing.append(f"{header} {key}".strip())
    assert missing == [], f"undocumented in docs/config.md: {missing}"


def test_the_reference_names_no_key_the_schema_lacks() -> None:
    known = {(_header(table), key) for table, key in _keys(SCHEMA, ())}
    tables = {header for header, _ in known}
    for row in _rows():
        first = row.split(" | ", 1)[0]
        header = re.match(r"\| `(\[\[?[^\]]+\]\]?)", first)
        assert header is not None, row
        assert header[1] in tables, f"docs/config.md names a table the schema lacks: {header[1]}"
        for key in re.findall(r"`(?:\[\[?[^\]]+\]\]? )?([a-z_]+)`", first):
            assert (header[1], key) in known, f"docs/config.md names {header[1]} {key}"


def test_the_cli_reference_is_what_the_commands_say() -> None:
    """docs/cli.md is rendered from click (every command, argument and option, with its help);
    a command changed without regenerating it fails here."""
    assert CLI_PAGE.read_text() == render(), (
        "docs/cli.md is out of date: regenerate it with"
        " `python tests/docs/cli_reference.py > docs/cli.md` and review the diff"
    )


def test_the_error_reference_is_the_error_table() -> None:
    """docs/errors.md is rendered from the edge's one error table."""
    assert ERRORS_PAGE.read_text() == render_errors(), (
        "docs/errors.md is out of date: regenerate it with"
        " `python tests/docs/errors_reference.py > docs/errors.md` and review the diff"
    )


def test_every_failure_reason_core_writes_is_in_the_error_reference() -> None:
    """The reason codes in docs/errors.md are the ones core's code writes, no more, no fewer."""
    written = reasons_in_code()
    assert "AGENT_ERROR" in written, "the reasons in the code were not found"
    assert set(FAILURE_REASONS) == written


def test_every_token_check_has_its_name_in_the_edge_page() -> None:
    """The names a refused token's 401 carries (`metadata.check`) are the names the check table
    of docs/a2a-edge.md gives, no more and no fewer."""
    raised = set()
    for module in ("a2a/_gateway_token.py", "a2a/_jwks.py", "server/_call_path.py"):
        source = (ROOT / "looping_core" / module).read_text()
        raised |= set(re.findall(r'(?:TokenRejected|JwksError)\(\s*"([a-z-]+)"', source))
        raised |= set(re.findall(r'check="([a-z-]+)"', source))
    page = (ROOT / "docs" / "a2a-edge.md").read_text()
    table = page.split("| # | check | refused as |", 1)[1].split("\n\n", 1)[0]
    rows = [row for row in table.splitlines() if row.startswith("| ")]
    documented = {name for row in rows for name in re.findall(r"`([a-z-]+)`", row.split(" | ")[-1])}
    assert raised, "no check names found in the code"
    assert documented == raised


def test_every_file_and_test_a_page_names_exists() -> None:
    """A page that points into the repository (`bench/jobs.py`, or the test that pins a promise:
    `tests/x.py::test_y`) points at something that is there: a file moved or a test renamed
    without its page fails here."""
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    named = {
        (page.name, reference)
        for page in pages
        for reference in re.findall(
            r"(?:tests|bench|looping_core|looping_plugins_example|examples|contracts|\.ci)/"
            r"[\w./-]*\w(?:::test_\w+)?",
            page.read_text(),
        )
    }
    assert any("::test_" in reference for _, reference in named), "no page names a test"
    missing = []
    for page, reference in sorted(named):
        path, _, test = reference.partition("::")
        if not (ROOT / path).exists():
            missing.append(f"{page}: {path}")
        elif test and f"def {test}(" not in (ROOT / path).read_text():
            missing.append(f"{page}: {reference}")
    assert missing == []
