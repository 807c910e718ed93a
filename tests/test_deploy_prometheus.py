"""What ``deploy/`` gives an operator for Prometheus and Grafana, checked the way they
would be: ``promtool check rules`` and ``promtool test rules`` on the alert rules (the
rule tests fire each alert from synthetic series), ``promtool check metrics`` on what
``/nbcast/metrics`` serves, and every metric the rules and the dashboard name is one
it serves. promtool is Debian's ``prometheus`` package (``make promtool``); in CI these
tests never skip."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.server_extension.metrics import metrics_registry

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "nbcast-dashboard.json"
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool is not installed (make promtool, or apt-get install -y prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"promtool checks must run in CI: {reason}")
        pytest.skip(reason)
    return found


def exposition(db: Database) -> str:
    registry = metrics_registry(db, FixedClock(T0), per_tenant=True)
    return generate_latest(registry).decode()


def served(text: str) -> set[str]:
    """The series names an exposition serves, from its ``# TYPE`` lines."""
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        if kind == "counter":  # the text format names the family with its _total
            names.add(name if name.endswith("_total") else f"{name}_total")
        elif kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def named(text: str) -> set[str]:
    return set(re.findall(r"\bnbcast_[a-z_]+", text))


def test_the_alert_rules_check_and_their_unit_tests_pass() -> None:
    tool = promtool()
    for argv in (
        ["check", "rules", "nbcast-alerts.yml"],
        ["test", "rules", "nbcast-alerts.test.yml"],
    ):
        done = subprocess.run([tool, *argv], cwd=RULES, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_exposition_passes_promtool_check_metrics(db: Database) -> None:
    tool = promtool()
    text = exposition(db)
    done = subprocess.run(
        [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_metric_the_rules_and_the_dashboard_name_is_served(db: Database) -> None:
    serves = served(exposition(db))
    rules = named((RULES / "nbcast-alerts.yml").read_text())
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert rules
    assert rules - serves == set()
    assert named(" ".join(exprs)) - serves == set()
