"""A backfill that means something: ``nbcast backfill daily-sales --from 2026-10-05
--to 2026-10-10`` queues the five weekday slots of that week, the worker runs the
shipped example on the example lake, and the five PDFs show five different trading
days — each the business day before its slot (read back from the PDFs with pypdf)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import nbformat
import pytest
from pypdf import PdfReader

from nbcast.artifacts import LocalArtifactStore
from nbcast.cli import main
from nbcast.delivery.renderers.pdf import PdfRenderer
from tests.delivery import make_report

REPO = Path(__file__).resolve().parents[2]
DAILY_SALES = REPO / "notebooks" / "examples" / "daily_sales.ipynb"
# The headline every daily-sales report opens with: "### Friday, 2 October 2026 · ...".
HEADLINE = re.compile(
    r"(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d{1,2}) (\w+) (\d{4})"
)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.slow
def test_a_week_of_backfill_reports_five_different_trading_days(
    use_db: str,
    nbcast_home: Path,
    example_lake: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("NBCAST_LAKE", str(example_lake))
    monkeypatch.setenv("NBCAST_CLOCK", "fixed:2026-10-12T12:00:00Z")  # published after the week
    _cli(capsys, "publish", str(DAILY_SALES))
    out = _cli(capsys, "backfill", "daily-sales", "--from", "2026-10-05", "--to", "2026-10-10")
    assert "5 slots in range, 5 new backfill rows" in out
    monkeypatch.delenv("NBCAST_CLOCK")
    _cli(capsys, "worker", "--exit-when-idle", "--concurrency", "2")
    runs = json.loads(_cli(capsys, "runs", "list", "--kind", "backfill", "--json"))
    runs.sort(key=lambda r: r["slot_key"])
    assert [(r["slot_key"], r["state"]) for r in runs] == [
        (f"2026-10-{day:02d}T07:00", "SUCCEEDED") for day in (5, 6, 7, 8, 9)
    ]
    expected = ["2026-10-02", "2026-10-05", "2026-10-06", "2026-10-07", "2026-10-08"]
    assert [r["parameters"]["report_date"] for r in runs] == expected
    assert [r["context"]["interval_end"] for r in runs] == [
        f"2026-10-{day:02d}T07:00:00+02:00" for day in (5, 6, 7, 8, 9)
    ]

    store = LocalArtifactStore(nbcast_home / "artifacts")
    shown = []
    for run in runs:
        executed = nbformat.reads(store.get(run["artifact_sha256"]).decode(), as_version=4)
        assert executed.metadata["nbcast_run"]["run_id"] == run["id"]
        pdf = PdfRenderer().render(executed, make_report(definition="daily-sales"))
        text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
        match = HEADLINE.search(text)
        assert match, text[:500]
        shown.append(match.group(0))
    assert shown == [
        "Friday, 2 October 2026",
        "Monday, 5 October 2026",
        "Tuesday, 6 October 2026",
        "Wednesday, 7 October 2026",
        "Thursday, 8 October 2026",
    ]
