"""contracts/: the JSON Schemas and the golden fixtures hold each other, and the code holds both."""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from looping_core.config import load_config
from looping_core.errors import ConfigError

ROOT = Path(__file__).parents[1]
CONTRACTS = ROOT / "contracts"
VALID_CONFIGS = [
    *sorted((CONTRACTS / "fixtures/config/valid").glob("*.toml")),
    ROOT / "examples/looping.toml",
]
INVALID_CONFIGS = sorted((CONTRACTS / "fixtures/config/invalid").glob("*.toml"))
PLUGINS_LIST_GOLDEN = CONTRACTS / "fixtures/plugins-list/example.json"


def schema(name: str) -> jsonschema.Draft202012Validator:
    document = json.loads((CONTRACTS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


def toml_as_json(path: Path) -> Any:
    """The TOML document as JSON sees it: dates and times become ISO 8601 strings."""
    return json.loads(json.dumps(tomllib.loads(path.read_text()), default=lambda v: v.isoformat()))


def expected_problems(path: Path) -> list[str]:
    prefix = "# expect: "
    return [
        line[len(prefix) :] for line in path.read_text().splitlines() if line.startswith(prefix)
    ]


def test_there_are_fixtures_of_both_kinds() -> None:
    assert len(VALID_CONFIGS) >= 3
    assert len(INVALID_CONFIGS) >= 5


@pytest.mark.parametrize("path", VALID_CONFIGS, ids=lambda p: p.name)
def test_valid_config_fixture_loads_and_matches_the_schema(path: Path) -> None:
    load_config(path)
    schema("config.schema.json").validate(toml_as_json(path))


@pytest.mark.parametrize("path", INVALID_CONFIGS, ids=lambda p: p.name)
def test_invalid_config_fixture_is_refused_with_exactly_its_problems(path: Path) -> None:
    expected = expected_problems(path)
    assert expected, f"{path.name} has no '# expect:' lines"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert list(caught.value.problems) == expected
    assert str(caught.value).startswith(f"{path}: {len(expected)} config problem")


@pytest.mark.parametrize(
    "path", [p for p in INVALID_CONFIGS if p.name != "syntax.toml"], ids=lambda p: p.name
)
def test_invalid_config_fixture_is_refused_by_the_schema_too(path: Path) -> None:
    assert not schema("config.schema.json").is_valid(toml_as_json(path))


def example_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in document["plugins"] if p["distribution"] == "looping-plugins-example"]


def test_plugins_list_golden_matches_the_schema() -> None:
    schema("plugins-list.schema.json").validate(json.loads(PLUGINS_LIST_GOLDEN.read_text()))


def test_plugins_list_json_matches_the_golden_fixture(
    looping_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    result = looping_cli(
        "plugins", "list", "--json", "--config", str(ROOT / "examples/looping.toml")
    )
    assert result.returncode == 0, result.stderr
    actual = json.loads(result.stdout)
    schema("plugins-list.schema.json").validate(actual)
    golden = json.loads(PLUGINS_LIST_GOLDEN.read_text())
    assert example_rows(actual) == example_rows(golden)
    assert len(example_rows(golden)) == 3
