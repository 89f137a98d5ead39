"""The docs match the code: docs/plugin-hooks.md documents every hook with its exact signature
and nothing else; docs/operating.md lists every metric."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from looping_core import hookspecs

DOC = Path(__file__).parents[2] / "docs" / "plugin-hooks.md"
HEADING = re.compile(r"^## `(\w+)`\n\n```python\n(.+?)\n```", re.MULTILINE)


def hook_specs() -> dict[str, Callable[..., Any]]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {
        name: getattr(hookspecs, name)
        for name in hookspecs.__all__
        if hasattr(getattr(hookspecs, name), marker)
    }


def rendered(function: Callable[..., Any]) -> str:
    """`def name(param: Annotation, ...) -> Return: ...` from the source annotations."""
    parameters = ", ".join(
        f"{p.name}: {p.annotation}" for p in inspect.signature(function).parameters.values()
    )
    returns = inspect.signature(function).return_annotation
    return f"def {function.__name__}({parameters}) -> {returns}: ..."


def documented() -> dict[str, str]:
    return {name: signature for name, signature in HEADING.findall(DOC.read_text())}


def test_every_hook_is_documented_with_its_exact_signature() -> None:
    docs = documented()
    for name, function in hook_specs().items():
        assert name in docs, f"hook {name!r} has no '## `{name}`' section in {DOC.name}"
        assert docs[name] == rendered(function), f"signature of {name!r} differs in {DOC.name}"


def test_no_section_documents_a_hook_that_does_not_exist() -> None:
    assert set(documented()) == set(hook_specs())


def test_the_specs_are_found() -> None:
    # Guards the two tests above against passing vacuously.
    assert len(hook_specs()) == 9
    assert rendered(hookspecs.tool_families) == (
        "def tool_families(config: Any) -> Sequence[ToolFamily]: ..."
    )


OPERATING = Path(__file__).parents[2] / "docs" / "operating.md"
METRIC_ROW = re.compile(
    r"^\| `((?:looping|gen_ai)_\w+)` \| (\w+) \|\s*([\w, ]*?)\s*\|", re.MULTILINE
)


def test_the_docs_list_every_metric_with_its_type_and_labels() -> None:
    """The metrics table of docs/operating.md is the catalog in `looping_core/_metrics.py`, row
    for row."""
    from looping_core import _metrics  # noqa: PLC0415

    listed = [
        (name, kind, tuple(label for label in labels.split(", ") if label))
        for name, kind, labels in METRIC_ROW.findall(OPERATING.read_text())
    ]
    catalog = [
        (m.name + ("_total" if m.kind == "counter" else ""), m.kind, m.labels)
        for m in _metrics.CATALOG
    ]
    assert listed == catalog
