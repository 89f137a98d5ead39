"""Renders the `looping` command's reference from click itself: `docs/cli.md` is its output.

Regenerate after changing a command, an option or a help text:

    python tests/docs/cli_reference.py > docs/cli.md

`tests/test_docs_reference.py` fails while the page and the commands differ, so the reference
cannot drift from the CLI.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import click

from looping_core.cli import main

HEADER = """# The `looping` command

Every command and option, with the help text the command itself prints (`looping COMMAND
--help`). Generated from the code by `python tests/docs/cli_reference.py > docs/cli.md`; a test
fails when this page and the commands differ.
"""


def _commands(
    command: click.Command, path: str, parent: click.Context | None = None
) -> Iterator[tuple[str, click.Context]]:
    """Each command with its context, made under its parent's as when it runs (so settings a
    group gives its commands, such as `-h` for help, are theirs here too)."""
    name = path.rsplit(" ", 1)[-1]
    context = click.Context(command, info_name=name, parent=parent, **command.context_settings)
    yield path, context
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not sub.hidden:
                yield from _commands(sub, f"{path} {name}", context)


def _section(path: str, context: click.Context) -> str:
    command = context.command
    usage = " ".join(command.collect_usage_pieces(context))
    lines = [f"## `{path}`", "", "```", f"{path} {usage}".rstrip(), "```", ""]
    if command.help:
        lines += [inspect.cleandoc(command.help).replace("\b\n", ""), ""]
    arguments = [param for param in command.params if isinstance(param, click.Argument)]
    options = [
        param
        for param in command.get_params(context)
        if isinstance(param, click.Option) and not param.hidden
    ]
    if arguments:
        lines += ["| argument | |", "|---|---|"]
        for argument in arguments:
            required = "required" if argument.required else "optional"
            many = ", one or more" if argument.nargs == -1 else ""
            lines.append(f"| `{argument.human_readable_name}` | {required}{many} |")
        lines.append("")
    if isinstance(command, click.Group):
        lines += ["| command | |", "|---|---|"]
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not sub.hidden:
                short = sub.get_short_help_str(limit=300)
                lines.append(f"| [`{path} {name}`](#{_anchor(f'{path} {name}')}) | {short} |")
        lines.append("")
    if options:
        lines += ["| option | |", "|---|---|"]
        for option in options:
            names = ", ".join(f"`{name}`" for name in (*option.opts, *option.secondary_opts))
            record = option.get_help_record(context)
            text = record[1] if record else ""
            lines.append(f"| {names} | {_cell(text)} |")
        lines.append("")
    return "\n".join(lines)


def _anchor(path: str) -> str:
    return path.replace(" ", "-")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    sections = [_section(path, context) for path, context in _commands(main, "looping")]
    return HEADER + "\n" + "\n".join(sections)


if __name__ == "__main__":
    print(render(), end="")
