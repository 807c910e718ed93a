"""``nbcast retention``: see :mod:`nbcast.governance.retention`."""

from __future__ import annotations

import click

__all__: list[str] = []

COMMANDS: list[click.Command] = []
"""The commands this module adds to ``nbcast``."""
