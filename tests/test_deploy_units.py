"""The systemd units in ``deploy/systemd`` start commands this ``nbcast`` accepts: every
``ExecStart`` (with systemd's ``%i``, ``%H`` and ``%d`` filled in) parses, and the units
the README's layout names exist."""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[1] / "deploy" / "systemd"
BIN = Path(sys.executable).parent


def exec_starts() -> list[tuple[str, list[str]]]:
    found = []
    for unit in sorted(UNITS.glob("*.service")):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.read_string(unit.read_text())
        line = parser["Service"]["ExecStart"]
        line = line.replace("%i", "acme").replace("%H", "host").replace("%d", "/run/creds")
        found.append((unit.name, shlex.split(line)))
    return found


@pytest.mark.parametrize(("unit", "argv"), exec_starts(), ids=[u for u, _ in exec_starts()])
def test_each_unit_starts_a_command_nbcast_accepts(unit: str, argv: list[str]) -> None:
    assert argv[0] == "/opt/nbcast/venv/bin/nbcast"
    done = subprocess.run(
        [str(BIN / "nbcast"), *argv[1:], "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (unit, done.stderr)


def test_the_layout_has_a_worker_for_every_tenant_and_one_per_tenant() -> None:
    names = {p.name for p in UNITS.glob("*.service")}
    assert {"nbcast-worker.service", "nbcast-worker@.service", "nbcast-migrate.service"} <= names
    dedicated = dict(exec_starts())["nbcast-worker@.service"]
    assert dedicated[dedicated.index("--tenant") + 1] == "acme"
    target = (UNITS / "nbcast.target").read_text()
    assert "nbcast-migrate.service" in target
    assert "nbcast-worker@" not in target  # dedicated workers are enabled one by one
