"""The demo's governance act (``scripts/demo.py`` calls :func:`governance_act`): a tiny
version of each part of the governance plane on the demo's home.

- a viewer is refused a publish (one ``error:`` line, exit 2, nothing written);
- two recipients of one report, each scoped to a region, each get a PDF with only
  their region's figures (:func:`regional_reports` — the report is published with
  the others and run by the demo's worker and delivery worker);
- ``nbcast audit verify`` passes, then fails on a copy of the database in which one
  entry was edited by hand;
- ``nbcast cost report`` with its stacked daily chart, saved under ``demo-output/``.
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["REGIONAL", "governance_act", "publish_regional", "regional_reports"]

REGIONAL = "regional-sales"
"""The recipient-scoped copy of daily-sales."""

REGIONS = {"emea-lead@example.com": "EMEA", "amer-lead@example.com": "AMER"}

BIN = Path(sys.executable).parent

Runner = Callable[..., str]


def _banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def _attempt(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run nbcast without failing the demo on a refusal (the refusal is the point)."""
    print(f"$ nbcast {' '.join(args)}", flush=True)
    done = subprocess.run(
        [str(BIN / "nbcast"), *args], env=env, text=True, capture_output=True, check=False
    )
    sys.stdout.write(done.stdout)
    sys.stdout.write(done.stderr)
    print(f"(exit status {done.returncode})")
    return done


def publish_regional(nbcast: Runner, env: dict[str, str], workspace: Path, source: Path) -> None:
    """Publish daily-sales again as a recipient-scoped report: one PDF subscription per
    regional lead, each with the region as its parameter and its row filter."""
    notebook = json.loads(source.read_text())
    block = dict(notebook["metadata"]["nbcast"])
    block.pop("schedule", None)  # run by hand in the demo
    block["name"] = REGIONAL
    block["outputs"] = ["pdf"]
    block["subscriptions"] = [
        {
            "channel": "email",
            "to": to,
            "formats": ["pdf"],
            "parameters": {"region": region},
            "row_filter": {"region": region},
        }
        for to, region in REGIONS.items()
    ]
    notebook["metadata"]["nbcast"] = block
    path = workspace / "regional_sales.ipynb"
    path.write_text(json.dumps(notebook, indent=1))
    nbcast("publish", str(path), "-m", "one PDF per regional lead", env=env)
    nbcast("run", REGIONAL, env=env)


def regional_reports(mail_files: list[Path]) -> dict[str, str]:
    """The text of the PDF each regional lead received, by recipient."""
    from email import message_from_bytes
    from email.policy import default as default_policy

    import pypdf

    found: dict[str, str] = {}
    for path in mail_files:
        message = message_from_bytes(path.read_bytes(), policy=default_policy)
        to = str(message["To"])
        if to not in REGIONS:
            continue
        for part in message.iter_attachments():  # type: ignore[attr-defined]
            if part.get_content_type() == "application/pdf":
                reader = pypdf.PdfReader(io.BytesIO(part.get_content()))
                found[to] = "\n".join(page.extract_text() for page in reader.pages)
    return found


def _table_regions(text: str) -> set[str]:
    """The regions of the rows of a daily-sales PDF's "Revenue by region" table (its
    lines start with the region's code and name)."""
    import re

    return set(re.findall(r"^(EMEA|AMER|APAC|LATAM) [A-Z][a-z]", text, flags=re.MULTILINE))


def _show_regions(mail_files: list[Path]) -> None:
    reports = regional_reports(mail_files)
    if set(reports) != set(REGIONS):
        raise SystemExit(f"demo failed: the regional leads got {sorted(reports)} PDFs")
    for to, region in REGIONS.items():
        rows = _table_regions(reports[to])
        print(f"{to}: the PDF's revenue-by-region table holds {sorted(rows)}")
        if rows != {region}:
            raise SystemExit(f"demo failed: {to}'s PDF is not scoped to {region}")


def governance_act(nbcast: Runner, env: dict[str, str], out: Path, mail_files: list[Path]) -> None:
    """The act (module docstring)."""
    _banner("roles: a viewer may read but not publish")
    nbcast("users", "add", "vera", "--role", "viewer", env=env)
    nbcast("users", "list", env=env)
    viewer = {**env, "NBCAST_USER": "vera"}
    nbcast("definitions", "list", env=viewer)
    refused = _attempt("publish", str(out / "workspace" / "daily_sales.ipynb"), env=viewer)
    if refused.returncode != 2 or not refused.stderr.startswith("error: "):
        raise SystemExit("demo failed: the viewer's publish was not refused")

    _banner("recipient-scoped data: two regional leads, one report, each their own region")
    _show_regions(mail_files)

    _banner("the audit log: intact, then broken by a manual edit of a copy")
    nbcast("audit", "verify", env=env)
    copy = out / "tampered"
    copy.mkdir()
    home = Path(env["NBCAST_HOME"])
    for name in ("nbcast.db", "nbcast.db-wal", "nbcast.db-shm"):
        if (home / name).exists():
            shutil.copy(home / name, copy / name)
    conn = sqlite3.connect(copy / "nbcast.db")
    try:
        seq = conn.execute(
            "SELECT seq FROM audit_log WHERE action = 'definition.published' ORDER BY seq LIMIT 1"
        ).fetchone()[0]
        conn.execute(
            "UPDATE audit_log SET actor = 'mallory' WHERE action = 'definition.published' "
            "AND seq = ?",
            (seq,),
        )
        conn.commit()
    finally:
        conn.close()
    print(f"(edited entry {seq} of a copy by hand: its actor is now mallory)")
    tampered = {**env, "NBCAST_DATABASE_URL": f"sqlite:///{copy / 'nbcast.db'}"}
    broken = _attempt("audit", "verify", env=tampered)
    if broken.returncode != 1 or "BROKEN" not in broken.stdout:
        raise SystemExit("demo failed: the edited audit log verified")
    nbcast("audit", "export", "-o", str(out / "audit.jsonl"), env=env)

    _banner("cost: what each report used, per day, with a chart")
    plot = out / "cost.png"
    nbcast(
        "cost", "report", "--from", "2026-10-19", "--to", "2026-11-03", "--plot", str(plot), env=env
    )
    if not plot.is_file():
        raise SystemExit("demo failed: no cost chart was saved")
    print(f"cost chart: {plot}")
