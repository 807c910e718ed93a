"""The bundled example reports and their lake."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from nbcast.definitions.versions import prepare

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
