"""The demo's "try before sending" act (``scripts/demo.py`` calls both halves).

:func:`queue_trials`, while the report worker runs:

- ``nbcast run daily-sales --test -p region=MARS`` is refused (exit 2): the example's
  ``region`` is a ``Literal`` of five regions;
- ``nbcast run daily-sales --test --to author@…``: a test run, rendered and mailed to
  the author only, ``[TEST]`` in its subject;
- ``nbcast run daily-sales --test --nobody --slot 2026-11-02T07:00``: a dry run of
  Monday's slot, rendered, sent to no one.

:func:`check_trials`, once everything is delivered, fails the demo unless:

- the mailbox holds exactly one ``[TEST]`` message, to the author, and the dry run
  has no ledger row at all (no subscriber got either);
- the dry run's renditions are byte for byte the scheduled run's of the same slot
  (the same SHA-256 for every format);
- ``nbcast runs diff`` of two daily-sales runs of consecutive business days lists
  changed figures of the recorded tables and none of what changes on every run
  (execution counts, timings, ids);
- the top list of a version-2 run has as many products as the version-2 diff says
  it runs with (5), as the CFO's email shows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from email import message_from_bytes
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

__all__ = ["AUTHOR", "DRY_SLOT", "check_spreadsheet", "check_trials", "queue_trials"]

AUTHOR = "author@nbcast-demo.example"
DRY_SLOT = "2026-11-02T07:00"
"""Monday's slot: scheduled by the demo's ticks, and dry-run too."""

Runner = Callable[..., str]


def _banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def queue_trials(nbcast: Runner, env: dict[str, str]) -> dict[str, int]:
    """Refuse a region daily-sales does not have; queue the test run and the dry run;
    return their run ids."""
    from scripts.demo_governance import _attempt

    _banner("a parameter's allowed values: region is one of five")
    refused = _attempt("run", "daily-sales", "--test", "-p", "region=MARS", env=env)
    if (
        refused.returncode != 2
        or "is not one of EMEA, AMER, APAC, LATAM, ALL" not in refused.stderr
    ):
        raise SystemExit("demo failed: region=MARS was not refused")
    _banner("try before sending: a test run to the author, a dry run of Monday's slot")
    test = json.loads(
        nbcast("run", "daily-sales", "--test", "--to", AUTHOR, "--json", env=env, echo=False)
    )
    print(f"$ nbcast run daily-sales --test --to {AUTHOR}\nqueued test run {test['id']}")
    dry = json.loads(
        nbcast(
            "run", "daily-sales", "--test", "--nobody", "--slot", DRY_SLOT, "--json",
            env=env, echo=False,
        )
    )  # fmt: skip
    print(
        f"$ nbcast run daily-sales --test --nobody --slot {DRY_SLOT}\n"
        f"queued dry run {dry['id']} of slot {DRY_SLOT}"
    )
    return {"test": int(test["id"]), "dry": int(dry["id"])}


def _show(nbcast: Runner, env: dict[str, str], run_id: int) -> dict[str, Any]:
    return dict(json.loads(nbcast("runs", "show", str(run_id), "--json", env=env, echo=False)))


def check_trials(
    nbcast: Runner,
    env: dict[str, str],
    trials: dict[str, int],
    runs: list[dict[str, Any]],
    mail_files: list[Path],
) -> None:
    """Check what the trials did (module docstring); raise SystemExit when not."""
    _banner("what the trials did: nothing for the subscribers, the slot's own bytes")
    tests = []
    for path in mail_files:
        mail = message_from_bytes(path.read_bytes(), policy=default_policy)
        if str(mail["Subject"]).startswith("[TEST]"):
            tests.append((str(mail["To"]), str(mail["Subject"])))
    print(f"[TEST] messages in the mailbox: {tests}")
    if [to for to, _ in tests] != [AUTHOR]:
        raise SystemExit(f"demo failed: the test run's mail went to {tests}, not {AUTHOR} alone")
    dry = _show(nbcast, env, trials["dry"])
    if dry["deliveries"]:
        raise SystemExit("demo failed: the dry run was delivered to someone")
    slot_run = next(
        r for r in runs if r["definition"] == "daily-sales" and r["slot_key"] == DRY_SLOT
    )
    scheduled = _show(nbcast, env, slot_run["id"])
    mine = {r["format"]: r["sha256"] for r in dry["renditions"] if r["variant"] == ""}
    theirs = {r["format"]: r["sha256"] for r in scheduled["renditions"] if r["variant"] == ""}
    for fmt in sorted(mine):
        same = "the same bytes" if mine[fmt] == theirs.get(fmt) else "DIFFERENT"
        print(f"{fmt}: dry run {mine[fmt][:12]}  scheduled run {str(theirs.get(fmt))[:12]}  {same}")
    if not mine or mine != theirs:
        raise SystemExit(
            f"demo failed: the dry run of {DRY_SLOT} did not render what its slot rendered"
        )

    daily = sorted(
        (r for r in runs if r["definition"] == "daily-sales" and r["kind"] == "scheduled"),
        key=lambda r: r["fire_at"],
    )
    friday, monday = daily[0], daily[1]
    _banner(f"nbcast runs diff: {friday['slot_key']} and {monday['slot_key']}")
    nbcast("runs", "diff", str(friday["id"]), str(monday["id"]), env=env)
    compared = json.loads(
        nbcast("runs", "diff", str(friday["id"]), str(monday["id"]), "--json", env=env, echo=False)
    )
    changed = [t for t in compared["tables"] if t["status"] == "changed"]
    if not changed or not any(t["changes"] for t in changed):
        raise SystemExit("demo failed: runs diff found no changed figure between two days")
    text = json.dumps(compared)
    if "execution_count" in text or '"duration"' in text:
        raise SystemExit("demo failed: runs diff shows volatile metadata")
    top = next(t for t in compared["tables"] if t["name"] == "top_products")
    if top["rows_after"] != 5:
        raise SystemExit(
            f"demo failed: version 2 runs with top_n 5, but its top list has "
            f"{top['rows_after']} products"
        )
    print(f"(the top list has {top['rows_after']} products, as the v2 diff says top_n runs with 5)")


def check_spreadsheet(rendered: list[Path]) -> None:
    """The daily-sales workbook opens on its About sheet, with money as USD and shares
    as percents (the example's ``output.table(…, formats=…)``)."""
    import openpyxl

    book_path = next(
        (p for p in rendered if p.name.startswith("daily-sales_") and p.suffix == ".xlsx"), None
    )
    if book_path is None:
        raise SystemExit("demo failed: no daily-sales spreadsheet was rendered")
    book = openpyxl.load_workbook(book_path)
    sheet = book["revenue_by_region"]
    header = [c.value for c in sheet[1]]
    formats = {h: c.number_format for h, c in zip(header, sheet[2], strict=True)}
    about = {row[0]: row[1] for row in book["About"].iter_rows(values_only=True)}
    print(f"{book_path.name}: sheets {book.sheetnames}; period {about.get('Period')}")
    print(f"  revenue_by_region formats: {formats}")
    if (
        book.sheetnames[0] != "About"
        or "USD" not in formats.get("Revenue", "")
        or "%" not in formats.get("Share pct", "")
        or not about.get("Period")
    ):
        raise SystemExit("demo failed: the daily-sales workbook lacks its About sheet or formats")
