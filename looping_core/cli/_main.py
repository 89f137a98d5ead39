"""The `looping` command group; the commands attach themselves to it (`looping_core.cli`)."""

from __future__ import annotations

import click

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="looping-core")
def main() -> None:
    """looping: the zero-trust A2A agent foundation."""
