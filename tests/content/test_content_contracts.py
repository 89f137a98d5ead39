"""contracts/content: a schema and golden fixtures per record, held both ways by the codec."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource

from looping_core.content import ContentDecodeError
from looping_core.content._codec import RECORDS, decode, encode

CONTRACTS = Path(__file__).parents[2] / "contracts"
SCHEMAS = CONTRACTS / "content"
FIXTURES = CONTRACTS / "fixtures" / "content"


def schema_names() -> set[str]:
    return {path.name.removesuffix(".schema.json") for path in SCHEMAS.glob("*.schema.json")}


def registry() -> Registry:
    resources = [
        Resource.from_contents(json.loads(path.read_text()))
        for path in SCHEMAS.glob("*.schema.json")
    ]
    return Registry().with_resources((resource.id(), resource) for resource in resources)  # type: ignore[misc]


def validator(record: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{record}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry())


FIXTURE_FILES = sorted(FIXTURES.glob("*/*.json"))


def test_every_record_has_a_schema_and_fixtures_and_nothing_else_does() -> None:
    assert schema_names() == set(RECORDS)
    fixture_records = {path.name for path in FIXTURES.iterdir() if path.is_dir()}
    assert fixture_records == set(RECORDS), (
        "a record without fixtures, or fixtures without a decoder"
    )
    for record in RECORDS:
        assert list((FIXTURES / record).glob("*.json")), f"{record} has no fixture"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_decodes_and_reencodes_to_identical_bytes(path: Path) -> None:
    data = path.read_bytes()
    assert encode(decode(data, RECORDS[path.parent.name])) == data


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_matches_its_schema(path: Path) -> None:
    validator(path.parent.name).validate(json.loads(path.read_bytes()))


@pytest.mark.parametrize(
    ("record", "document"),
    [
        ("text", {"type": "text", "text": "a", "extra": 1}),
        ("image", {"type": "image", "media_type": "image/png", "url": "u", "data": "AA=="}),
        ("document", {"type": "document", "media_type": "text/plain", "name": "n"}),
        (
            "document",
            {"type": "document", "media_type": "a/b", "name": "n", "url": "u", "data": "AA=="},
        ),
        ("data", {"type": "data", "value": None}),
        ("data", {"type": "data"}),
        ("data", {"type": "data", "value": 1, "media_type": ""}),
        ("refusal", {"type": "text"}),
        ("usage", {"reasoning_tokens": 3}),
        ("user", {"role": "user", "content": []}),
        ("tool", {"role": "tool", "content": [{"type": "text", "text": "a"}]}),
    ],
)
def test_schemas_refuse_what_the_codec_refuses(record: str, document: dict) -> None:  # type: ignore[type-arg]
    assert not validator(record).is_valid(document)
    with pytest.raises(ContentDecodeError):
        decode(json.dumps(document), RECORDS[record])
