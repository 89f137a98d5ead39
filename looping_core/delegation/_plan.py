"""A plan: the subtasks the model asks for and their dependencies, checked as a whole.

Every problem of a plan is named at once (terse facts the model can act on): an unknown subtask
type, params that do not structure into the type's `params_type` (unknown keys refused, as for
config), a dependency on an id the plan does not have, a repeated id, a cycle. A plan with any
problem is refused whole; nothing of it is stored or run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.config import structure_plugin_config
from looping_core.contract import SubtaskRecipe, SubtaskType

__all__ = ["PLAN_SCHEMA_ID", "PlannedSubtask", "parse_plan", "plan_schema"]

PLAN_SCHEMA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
"""What a subtask id the model gives may look like."""


@attrs.frozen
class PlannedSubtask:
    """One subtask of a checked plan: its params structured, its recipe made."""

    id: str
    type: SubtaskType
    params: Any
    raw_params: Mapping[str, Any]
    depends_on: tuple[str, ...]
    recipe: SubtaskRecipe


def plan_schema(types: Mapping[str, SubtaskType], params: Mapping[str, Any]) -> dict[str, Any]:
    """The `delegate` tool's input schema: a list of subtasks, each with an id, one of the types
    (its description and params schema given per type), and the ids it depends on."""
    keys = sorted(types)
    return {
        "type": "object",
        "properties": {
            "subtasks": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "pattern": PLAN_SCHEMA_ID.pattern},
                        "type": {
                            "enum": keys,
                            "description": "; ".join(
                                f"{key}: {types[key].description}" for key in keys
                            ),
                        },
                        "params": {"type": "object"},
                        "depends_on": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["id", "type", "params"],
                    "additionalProperties": False,
                    "allOf": [
                        {
                            "if": {"properties": {"type": {"const": key}}},
                            "then": {"properties": {"params": params[key]}},
                        }
                        for key in keys
                    ],
                },
            },
        },
        "required": ["subtasks"],
        "additionalProperties": False,
    }


def parse_plan(
    arguments: Mapping[str, Any], types: Mapping[str, SubtaskType]
) -> tuple[list[PlannedSubtask], list[str]]:
    """The plan's subtasks, or every problem with it (then the subtasks are empty)."""
    raw = arguments.get("subtasks")
    if not isinstance(raw, list) or not raw:
        return [], ["subtasks: a non-empty list is required"]
    problems: list[str] = []
    planned: list[PlannedSubtask] = []
    seen: set[str] = set()
    # Every id the plan names, valid subtask or not: a dependency on a subtask with problems of
    # its own is that subtask's problem, not a missing one.
    declared = {
        item["id"] for item in raw if isinstance(item, Mapping) and isinstance(item.get("id"), str)
    }
    for index, item in enumerate(raw):
        where = f"subtasks[{index}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: must be an object")
            continue
        _missing_dependencies(item, where, declared, problems)
        found = _subtask(item, where, types, problems)
        if found is None:
            continue
        if found.id in seen:
            problems.append(f"{where}.id: {found.id!r} is used twice")
            continue
        seen.add(found.id)
        planned.append(found)
    if not problems:
        cycle = _cycle(planned)
        if cycle:
            problems.append("cycle: " + " -> ".join(cycle))
    return ([] if problems else planned), problems


def _missing_dependencies(
    item: Mapping[str, Any], where: str, declared: set[str], problems: list[str]
) -> None:
    """Dependencies on ids the plan does not have, named with every other problem at once
    (also for a subtask with problems of its own)."""
    depends_on = item.get("depends_on", [])
    if not isinstance(depends_on, list):
        return  # `_subtask` names that
    name = item.get("id") if isinstance(item.get("id"), str) else where
    for dependency in depends_on:
        if isinstance(dependency, str) and dependency not in declared:
            problems.append(f"subtask {name}: depends on {dependency!r}, not in the plan")


def _subtask(
    item: Mapping[str, Any], where: str, types: Mapping[str, SubtaskType], problems: list[str]
) -> PlannedSubtask | None:
    before = len(problems)
    subtask_id = item.get("id")
    if not isinstance(subtask_id, str) or not PLAN_SCHEMA_ID.match(subtask_id):
        problems.append(f"{where}.id: 1-63 letters, digits, '_', '.' or '-' are required")
    extra = sorted(set(item) - {"id", "type", "params", "depends_on"})
    if extra:
        problems.append(f"{where}: unknown keys {', '.join(extra)}")
    depends_on = item.get("depends_on", [])
    if not (isinstance(depends_on, list) and all(isinstance(d, str) for d in depends_on)):
        problems.append(f"{where}.depends_on: a list of subtask ids is required")
        depends_on = []
    key = item.get("type")
    subtask_type = types.get(key) if isinstance(key, str) else None
    if subtask_type is None:
        known = ", ".join(sorted(types)) or "none"
        problems.append(f"{where}.type: unknown subtask type {key!r} (known: {known})")
        return None
    raw_params = item.get("params", {})
    if not isinstance(raw_params, Mapping):
        problems.append(f"{where}.params: must be an object")
        return None
    params, params_problems = structure_plugin_config(
        raw_params, subtask_type.params_type, f"{where}.params"
    )
    problems.extend(p.replace(" @ ", " at ", 1) for p in params_problems)
    if len(problems) > before:
        return None
    try:
        recipe = subtask_type.recipe(params)
    except Exception as exc:
        problems.append(f"{where}.params: refused by the {key} recipe ({type(exc).__name__})")
        return None
    assert isinstance(subtask_id, str)
    return PlannedSubtask(
        subtask_id, subtask_type, params, dict(raw_params), tuple(depends_on), recipe
    )


def _cycle(planned: Sequence[PlannedSubtask]) -> list[str]:
    """One cycle among the dependencies, as ids (first repeated at the end), or none."""
    depends = {s.id: s.depends_on for s in planned}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in depends[node]:
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for subtask in planned:
        if subtask.id not in state:
            found = visit(subtask.id)
            if found:
                return found
    return []
