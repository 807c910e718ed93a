"""The bundled example reports and their lake."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbcast.definitions.spec import OutputFormat
from nbcast.definitions.versions import prepare
from nbcast.output import check_table_name

EXAMPLES = Path(__file__).resolve().parents[1] / "notebooks" / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def test_there_are_at_least_three_examples() -> None:
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_example_is_a_valid_definition_with_a_schedule(path: Path) -> None:
    prepared = prepare(path)
    assert prepared.spec.schedule is not None
    assert prepared.spec.subscriptions
    assert prepared.schema, "an example report should be parameterized"
    assert {p.name for p in prepared.schema} >= set(prepared.spec.parameters)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_example_renders_and_delivers_what_the_demo_shows(path: Path) -> None:
    spec = prepare(path).spec
    assert {OutputFormat.html, OutputFormat.pdf, OutputFormat.xlsx} <= set(spec.outputs)
    channels = {s.channel for s in spec.subscriptions}
    # `make demo` configures email (a local SMTP mailbox) and links; another channel
    # would make its deliveries FAILED no_channel there.
    assert channels <= {"email", "link"}
    assert "email" in channels
    for subscription in spec.subscriptions:
        assert subscription.formats
        assert set(subscription.formats) <= set(spec.outputs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_example_publishes_its_tables_with_valid_names(path: Path) -> None:
    """``output.table(df, "name")`` calls, found in the code cells without running them:
    the spreadsheet and CSV renditions need at least one."""
    names = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "table"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "output"
            ):
                assert len(node.args) == 2
                assert isinstance(node.args[1], ast.Constant)
                names.append(check_table_name(node.args[1].value))
    assert names, "the report publishes no table (nbcast.output.table)"
    assert len({n.casefold() for n in names}) == len(names)


def test_the_data_quality_report_mails_only_when_it_finds_something() -> None:
    spec = prepare(EXAMPLES / "data_quality.ipynb").spec
    assert [s.only_if for s in spec.subscriptions if s.channel == "email"] == ["results"]


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.parquet"))
    }


def test_the_lake_is_generated_deterministically(tmp_path: Path) -> None:
    script = EXAMPLES / "lake" / "generate.py"
    for out in ("a", "b"):
        subprocess.run(
            [sys.executable, str(script), "--out", str(tmp_path / out), "-q"], check=True
        )
    first, second = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    assert first == second
    assert {"orders.parquet", "products.parquet", "regions.parquet", "stores.parquet"} <= set(first)
    size = sum((tmp_path / "a" / name).stat().st_size for name in first)
    assert size < 5 * 1024 * 1024
