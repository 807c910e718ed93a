"""Deliveries per second through the ledger to a local SMTP server.

Prints JSON. A report with ``--recipients`` email subscriptions (default 1,000, the
most a definition may have) runs ``--runs`` times (default 4) through the executor's
real queue on PostgreSQL; the delivery plane consumes the outbox and renders the
HTML (not timed). Then one delivery worker drains the ledger — claim a batch, decide (unsubscribed,
superseded, stale, conditions), send over one SMTP session, record each answer with
its attempt row — to an aiosmtpd server running in its own process (``Sink``
handler, so the server's own cost is the same for both sides). Sends go through
``--senders`` threads (default 4, as ``nbcast delivery-worker``), each with its own
SMTP session, and answers are recorded on a thread of their own.

Side by side, the reference: the same number of messages, built once, sent with
plain ``smtplib`` to the same server — no database, no ledger — over one session, and
over ``--senders`` sessions in as many threads (the like-for-like figure). The ratio
is what effectively-once bookkeeping costs per message. Target: ≥ 500
deliveries/s.

**Governance** (``--governance on|off|both``, default ``both``; ``--repeat N``, default
2). The ``default`` tenant is given daily budgets no run can spend (1 PB, 10⁹ CPU
seconds) on both sides; only the accounting of the queue and the ledger
(``accounting=…``) differs:

- *on* (nbcast as shipped): every answer that ends a delivery (SENT, FAILED,
  SUPPRESSED) appends a hash-chained ``delivery.*`` audit entry in the recorder's
  transaction — the timed part; in the set-up (not timed) the runs' claims check the
  budgets and their successes add to ``tenant_usage_days``;
- *off*: no audit entries, no budget check, no usage.

Roles are checked in the command layer only (``publish`` and ``run_now`` here, in the
untimed set-up, on both sides). ``both`` runs on, off, on, off … each on a fresh
database prepared the same way and prints every pass (``nbcast.governance_on`` /
``governance_off``) and ``governance_overhead``: the medians of ``deliveries_per_s``
and their ratio off/on (target: on within 10 % of off), and
``governance_overhead_worker_cpu``: the same for ``worker_cpu_ms_per_delivery``, the
delivery worker's own CPU time (every thread of this process; the SMTP sink runs in
its own) per delivery, which the other work on a shared machine disturbs far less
than the wall time. ``audit_entries`` counts the
``delivery.*`` entries of the pass (0 when off). The references run once: governance
does not touch them; ``nbcast_over_reference`` is the governance-on median's.
"""

from __future__ import annotations

import argparse
import json
import smtplib
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import nbformat
import sqlalchemy as sa

from benchmarks._common import (
    NEVER_SPENT_BYTES,
    NEVER_SPENT_CPU_S,
    add_governance_arguments,
    governance_passes,
    machine_load,
    overhead,
    own_cpu_s,
    scratch_database,
    smtp_sink,
    trivial_notebook,
)
from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.ledger import Ledger
from nbcast.delivery.rendering import RenderQueue
from nbcast.delivery.signing import Signer
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.testing.http import free_port


def _executed(marker: str) -> bytes:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(total)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{marker}\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# Daily sales"), cell]
    for i, c in enumerate(nb.cells):
        c["id"] = f"c{i}"
    return str(nbformat.writes(nb)).encode()


def prepare(
    url: str,
    folder: Path,
    recipients: int,
    runs: int,
    senders: int,
    port: int,
    *,
    accounting: bool = True,
) -> tuple[Database, Ledger, int]:
    db = Database.open(url)
    clock = SystemClock()
    with db.engine.begin() as conn:  # budgets that are checked but never spent
        conn.execute(
            sa.text(
                "UPDATE tenants SET budget_warehouse_bytes_per_day = :bytes, "
                "budget_cpu_s_per_day = :cpu WHERE name = 'default'"
            ),
            {"bytes": NEVER_SPENT_BYTES, "cpu": NEVER_SPENT_CPU_S},
        )
    path = trivial_notebook(folder, "daily-sales")
    nb = json.loads(path.read_text())
    nb["metadata"]["nbcast"]["outputs"] = ["html"]
    nb["metadata"]["nbcast"]["subscriptions"] = [
        {"channel": "email", "to": f"user{i:05d}@example.com"} for i in range(recipients)
    ]
    path.write_text(json.dumps(nb))
    publish(db, path, caller=Caller(tenant="default", user="bench"))
    store = LocalArtifactStore(folder / "artifacts")
    queue = RunQueue(db, clock, owner="bench", accounting=accounting)
    for n in range(runs):
        run_now(db, clock, Caller(tenant="default", user="bench"), "daily-sales", {})
        [lease] = queue.claim(1)
        queue.start(lease)
        queue.succeed(lease, artifact_sha256=store.put(_executed(f"run {n}")).sha256, duration_s=0)
    with db.session() as session:
        consume_outbox(session, clock.now(), limit=1000)
    RenderQueue(db, clock, store, owner="bench").render_pending(100)
    signer = Signer([("k1", "benchmark-signing-secret-0123")])

    def channels() -> dict[str, Any]:  # one SMTP session per sender thread
        return {"email": EmailChannel("127.0.0.1", port, sender="reports@example.com", timeout=30)}

    ledger = Ledger(
        db,
        clock,
        store,
        channels(),
        signer,
        owner="bench",
        senders=senders,
        accounting=accounting,
        make_channels=channels,
    )
    return db, ledger, recipients * runs


def run_nbcast(ledger: Ledger, total: int, batch: int) -> dict[str, Any]:
    cpu = own_cpu_s()
    started = time.perf_counter()
    while ledger.deliver_due(batch):
        pass
    elapsed = time.perf_counter() - started
    cpu = own_cpu_s() - cpu
    ledger.close()
    sent = ledger.stats.sent
    return {
        "sent": sent,
        "expected": total,
        "seconds": round(elapsed, 2),
        "deliveries_per_s": round(sent / elapsed),
        "worker_cpu_ms_per_delivery": round(1000 * cpu / max(sent, 1), 3),
    }


def run_reference(port: int, total: int, sessions: int) -> dict[str, Any]:
    message = EmailMessage()
    message["From"] = "reports@example.com"
    message["To"] = "user@example.com"
    message["Subject"] = "daily-sales"
    message.set_content("daily sales")
    message.add_alternative("<h1>Daily sales</h1>", subtype="html")
    payload = message.as_bytes()

    def send(share: range) -> None:
        with smtplib.SMTP("127.0.0.1", port) as smtp:
            for i in share:
                smtp.sendmail("reports@example.com", [f"user{i:05d}@example.com"], payload)

    started = time.perf_counter()
    with ThreadPoolExecutor(sessions) as pool:
        list(pool.map(send, [range(k, total, sessions) for k in range(sessions)]))
    elapsed = time.perf_counter() - started
    return {
        "sent": total,
        "sessions": sessions,
        "seconds": round(elapsed, 2),
        "deliveries_per_s": round(total / elapsed),
    }


def _audit_entries(db: Database) -> int:
    with db.engine.connect() as conn:
        query = "SELECT count(*) FROM audit_log WHERE action LIKE 'delivery.%'"
        return int(conn.execute(sa.text(query)).scalar() or 0)


def measure_nbcast(args: argparse.Namespace, port: int, on: bool) -> dict[str, Any]:
    """One pass on a fresh database, governance ``on`` or not (module docstring)."""
    with scratch_database() as url, tempfile.TemporaryDirectory() as tmp:
        db, ledger, total = prepare(
            url, Path(tmp), args.recipients, args.runs, args.senders, port, accounting=on
        )
        result = run_nbcast(ledger, total, args.batch)
        result["audit_entries"] = _audit_entries(db)
        db.dispose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100, help="ledger rows per claim")
    parser.add_argument(
        "--senders", type=int, default=4, help="parallel senders, one SMTP session each"
    )
    add_governance_arguments(parser)
    args = parser.parse_args()
    load_before = machine_load()
    passes = governance_passes(args.governance, args.repeat)
    sides: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    port = free_port()
    sink = smtp_sink(port)
    try:
        for on in passes:
            sides[on].append(measure_nbcast(args, port, on))
        total = args.recipients * args.runs
        reference_one = run_reference(port, total, 1)
        reference = run_reference(port, total, args.senders)
    finally:
        sink.terminate()
        sink.wait(10)
    governed: dict[str, Any] = {"governance": args.governance}
    results: dict[str, Any]
    if args.governance == "both":
        governed["repeat"] = args.repeat
        cost = overhead(
            "deliveries_per_s",
            [r["deliveries_per_s"] for r in sides[True]],
            [r["deliveries_per_s"] for r in sides[False]],
        )
        cpu = overhead(
            "worker_cpu_ms_per_delivery",
            [r["worker_cpu_ms_per_delivery"] for r in sides[True]],
            [r["worker_cpu_ms_per_delivery"] for r in sides[False]],
            higher_is_better=False,
        )
        results = {
            "nbcast": {"governance_on": sides[True], "governance_off": sides[False]},
            "governance_overhead": cost,
            "governance_overhead_worker_cpu": cpu,
            "reference_plain_smtplib_one_session": reference_one,
            "reference_plain_smtplib": reference,
            "nbcast_over_reference": round(cost["median_on"] / reference["deliveries_per_s"], 3),
            "governance_off_over_reference": round(
                cost["median_off"] / reference["deliveries_per_s"], 3
            ),
        }
    else:
        [nbcast] = sides[passes[0]]
        results = {
            "nbcast": nbcast,
            "reference_plain_smtplib_one_session": reference_one,
            "reference_plain_smtplib": reference,
            "nbcast_over_reference": round(
                nbcast["deliveries_per_s"] / reference["deliveries_per_s"], 3
            ),
        }
    print(
        json.dumps(
            {
                "benchmark": "deliver",
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "database": "postgresql",
                "recipients": args.recipients,
                "runs": args.runs,
                "batch": args.batch,
                "senders": args.senders,
                **governed,
                **results,
                "target_deliveries_per_s": 500,
                "machine": {"before": load_before, "after": machine_load()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
