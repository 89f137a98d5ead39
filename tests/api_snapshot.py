"""Renders looping-core's public API as text: `contracts/exported_api.txt` is its snapshot.

Regenerate after an intended change to the public API:

    python tests/api_snapshot.py > contracts/exported_api.txt

Public means: a module whose dotted path has no `_`-prefixed part, and the names in its
`__all__`. For classes, their public methods and properties are listed too. A package's
`internal` module is its door for looping-core's own upper layers, not for apps: left out.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

import click

import looping_core


def public_modules() -> list[str]:
    names = ["looping_core"]
    for info in pkgutil.walk_packages(looping_core.__path__, "looping_core."):
        parts = info.name.split(".")
        if not any(part.startswith("_") for part in parts) and parts[-1] != "internal":
            names.append(info.name)
    return sorted(names)


def signature(function: Callable[..., Any]) -> str:
    try:
        sig = inspect.signature(function)
    except (TypeError, ValueError):
        return "(...)"
    parts = []
    keyword_only_marked = False
    for parameter in sig.parameters.values():
        text = parameter.name
        if parameter.kind is parameter.KEYWORD_ONLY and not keyword_only_marked:
            parts.append("*")
            keyword_only_marked = True
        if parameter.kind is parameter.VAR_POSITIONAL:
            keyword_only_marked = True
            text = "*" + text
        elif parameter.kind is parameter.VAR_KEYWORD:
            text = "**" + text
        if parameter.annotation is not parameter.empty:
            text += f": {_annotation(parameter.annotation)}"
        if parameter.default is not parameter.empty:
            text += f" = {_default(parameter.default)}"
        parts.append(text)
    returns = ""
    if sig.return_annotation is not sig.empty:
        returns = f" -> {_annotation(sig.return_annotation)}"
    return f"({', '.join(parts)}){returns}"


def _annotation(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _default(value: Any) -> str:
    text = repr(value)
    return "<factory>" if " at 0x" in text else text


def _members(cls: type) -> Iterator[str]:
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            yield f"    property {name}"
        elif isinstance(member, classmethod | staticmethod):
            yield f"    {type(member).__name__} {name}{signature(member.__func__)}"
        elif inspect.isfunction(member):
            yield f"    {_def(member)} {name}{signature(member)}"


def _def(function: Callable[..., Any]) -> str:
    return "async def" if inspect.iscoroutinefunction(function) else "def"


def _key_name(key: Any) -> str:
    return key.__name__ if isinstance(key, type) else str(key)


def render() -> str:
    lines: list[str] = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        exported = sorted(getattr(module, "__all__", []))
        lines.append(f"module {module_name}")
        for name in exported:
            value = getattr(module, name)
            where = f"{module_name}.{name}"
            if inspect.isclass(value):
                bases = ", ".join(b.__name__ for b in value.__bases__ if b is not object)
                head = f"  class {where}" + (f"({bases})" if bases else "")
                if not issubclass(value, enum.Enum | BaseException) and not getattr(
                    value, "_is_protocol", False
                ):
                    head += signature(value)
                lines.append(head)
                lines.extend(_members(value))
            elif isinstance(value, click.Command):  # its signature is click's, not ours
                kind = "group" if isinstance(value, click.Group) else "command"
                lines.append(f"  {where}: click {kind} {value.name!r}")
            elif callable(value):
                lines.append(f"  {_def(value)} {where}{signature(value)}")
            elif isinstance(value, frozenset):
                items = ", ".join(sorted(map(repr, value)))
                lines.append(f"  {where}: frozenset = {{{items}}}")
            elif isinstance(value, str | int | float | bool | tuple):
                lines.append(f"  {where}: {type(value).__name__} = {value!r}")
            else:
                keys = (
                    f" with keys {sorted(map(_key_name, value))}" if isinstance(value, dict) else ""
                )
                lines.append(f"  {where}: {type(value).__name__}{keys}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
