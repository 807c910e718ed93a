"""`make demo`: nbcast end to end on the embedded defaults, in a fresh home folder.

1. publishes every example report in ``notebooks/examples`` (copied to a workspace,
   as a data scientist's working copies),
2. edits one of them visibly and publishes it again (version 2),
3. prints the version list and the diff between the two versions (what changes for
   recipients first: top_n runs with 5 instead of 15),
4. previews the data-quality report's schedule across the New York fall-back
   (2026-11-01, when 01:00-02:00 happens twice),
5. runs the scheduler over those days with ``nbcast scheduler tick`` and lists the
   slots it recorded,
6. runs the queued reports through ``nbcast worker --engine ray`` (a local Ray),
   each executed with papermill on a pre-started kernel, and copies the executed
   notebooks out of the content-addressed artifact store,
7. starts a local SMTP mailbox (:mod:`nbcast.testing.smtp`: aiosmtpd, in this process,
   on 127.0.0.1 and a free port) that writes every message it receives to
   ``mailbox/NNN-<recipient>.eml``,
8. runs ``nbcast delivery-worker --exit-when-idle`` against it: the succeeded runs
   are rendered to the formats their definitions list (HTML, PDF, XLSX, CSV) and
   delivered to their subscribers by email and as signed links,
9. lists the delivery ledger and the signed links, copies the rendered files out of
   the artifact store into ``rendered/``, and checks the outcome: every delivery
   SENT (or SUPPRESSED ``no_results``, the data-quality report's ``only_if:
   results`` on a clean day) and at least one message in the mailbox — else the
   demo fails,
10. starts ``nbcast serve`` on this home folder (the port the links were made for),
   opens every signed link and a tampered one (403), unsubscribes a recipient with
   the one-click POST from an email's ``List-Unsubscribe`` header and shows that the
   next delivery to them is SUPPRESSED ``unsubscribed``, saves screenshots of the
   status page with Chromium, and stops the server (:mod:`scripts.demo_server`),
11. tries daily-sales without sending it — a test run to the author, a dry run of
   Monday's slot to no one — and checks that no subscriber got either, that the dry
   run rendered the slot's own bytes, and compares two days' reports with ``nbcast
   runs diff`` (:mod:`scripts.demo_trial`),

and prints where everything is. It uses the ``nbcast`` command exactly as a person
would. So that it always crosses a DST change, the demo runs on nbcast's injectable
clock (``NBCAST_CLOCK=fixed:…``): the reports are published on 2026-10-30 and the
scheduler ticks hourly through 2026-11-02. The report worker and the delivery worker
then run on the real clock, as they would in production; it is also what signed links
expire against (7 days from now), so the printed links stay valid for a server
started on this home folder. The consequence is deliberate: a report is delivered
when the demo runs, which (after 2026-11-02) is later than its slot, so the one
definition that declares ``staleness`` (kpi-dashboard: ``after: 2h``, ``action:
banner``) is delivered with its *late* renditions, which carry a "this report is
late by …" banner. None declares ``action: suppress``: nothing is withheld as stale.
The output folder is ``demo-output/`` (override with ``NBCAST_DEMO_DIR``); it is
recreated on every run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from email.policy import default as default_policy
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbcast.testing.smtp import FakeSMTPServer

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "notebooks" / "examples"
BIN = Path(sys.executable).parent
PUBLISHED = datetime(2026, 10, 30, 0, 0, tzinfo=UTC)
TICKS_UNTIL = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
# The only suppression the demo expects: data-quality mails with only_if: results, so
# an interval without findings is SUPPRESSED no_results. (The backfilled daily-sales
# reports are sent: a backfill's rows are never superseded or stale.) Anything else
# or any FAILED delivery fails the demo.
EXPECTED_SUPPRESSIONS = {"no_results"}


def iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def nbcast(*args: str, env: dict[str, str], echo: bool = True, timeout: float | None = None) -> str:
    """Run the nbcast command, echo it and its output, fail the demo if it fails."""
    if echo:
        print(f"$ nbcast {' '.join(args)}", flush=True)
    try:
        done = subprocess.run(
            [str(BIN / "nbcast"), *args],
            env=env,
            text=True,
            capture_output=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        sys.stderr.write(exc.stderr.decode(errors="replace") if exc.stderr else "")
        raise SystemExit(
            f"demo failed: nbcast {' '.join(args)} took over {timeout:.0f} s"
        ) from None
    if echo:
        sys.stdout.write(done.stdout)
        # What nbcast warns about (a changed default the metadata block hides, say).
        warned = [line for line in done.stderr.splitlines(True) if line.startswith("warning:")]
        sys.stdout.write("".join(warned))
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"demo failed: nbcast {' '.join(args)} exited {done.returncode}")
    return done.stdout


def edit_daily_sales(path: Path) -> None:
    """A reviewer-visible change: the top list shows 5 products — the value the
    metadata block runs it with (15 before) and the cell's default — and a new
    narrative cell says so. (Changing only the cell's default would not change what
    runs: publishing warns of that, and the diff flags it.)"""
    nb = json.loads(path.read_text())
    params = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    source = "".join(params["source"])
    params["source"] = source.replace("top_n = 10", "top_n = 5")
    nb["metadata"]["nbcast"]["parameters"]["top_n"] = 5
    nb["cells"].insert(
        1,
        {
            "cell_type": "markdown",
            "id": "demo-note",
            "metadata": {},
            "source": "> Changed in v2: the top list shows 5 products, as agreed with Sales.",
        },
    )
    path.write_text(json.dumps(nb, indent=1))


def start_mailbox(folder: Path) -> FakeSMTPServer:
    """nbcast's local SMTP mailbox on 127.0.0.1:<free port>, writing into ``folder``."""
    try:
        from nbcast.testing.smtp import FakeSMTPServer
    except ImportError as exc:
        raise SystemExit(f"demo failed: {exc}; run `make demo` (dev extra)") from None
    mailbox = FakeSMTPServer(folder=folder, accept_reply="250 2.0.0 Ok: saved")
    try:
        return mailbox.start()
    except RuntimeError as exc:
        raise SystemExit(f"demo failed: could not start the local SMTP mailbox: {exc}") from None


def describe_mail(path: Path) -> str:
    """One line about an .eml file: recipient, subject, attachments."""
    mail = message_from_bytes(path.read_bytes(), policy=default_policy)
    attached = [part.get_filename() or "?" for part in mail.iter_attachments()]
    line = f"to {mail['To']} · {mail['Subject']!r} · attached: {', '.join(attached) or 'nothing'}"
    body = mail.get_body(("html",))
    if body is not None and 'class="nbcast-stale"' in body.get_content():
        line += "\n    (past its staleness.after: sent with the 'late' banner renditions)"
    return line


def copy_renditions(home: Path, target: Path) -> list[Path]:
    """Copy every rendered file out of the artifact store, with a readable name; fail
    the demo if a rendition is not DONE."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{(home / 'nbcast.db').as_posix()}")
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT run_id, format, variant, state, filename, sha256, error "
                    "FROM renditions ORDER BY run_id, variant, format"
                )
            ).all()
    finally:
        engine.dispose()
    if not rows:
        raise SystemExit("demo failed: nothing was rendered")
    undone = [r for r in rows if r.state != "DONE" or not r.sha256]
    if undone:
        for r in undone:
            print(f"run {r.run_id} {r.format} {r.variant or 'base'}: {r.state} {r.error}")
        raise SystemExit(f"demo failed: {len(undone)} rendition(s) not rendered")
    target.mkdir()
    copied = []
    base = {(r.run_id, r.format): r.sha256 for r in rows if not r.variant}
    for r in rows:
        name = r.filename or f"run-{r.run_id}.{r.format}"
        if r.variant and base.get((r.run_id, r.format)) == r.sha256:
            continue  # e.g. a spreadsheet has no banner: the late one is the same file
        if r.variant:
            stem, dot, suffix = name.rpartition(".")
            name = f"{stem}-{r.variant}{dot}{suffix}" if dot else f"{name}-{r.variant}"
        path = target / name
        shutil.copy(home / "artifacts" / r.sha256[:2] / r.sha256[2:4] / r.sha256, path)
        copied.append(path)
    return copied


def start_worker(env: dict[str, str], log: Path, *argv: str) -> subprocess.Popen[bytes]:
    """``nbcast ARGV`` (a worker) in the background, its output in ``log``."""
    handle = log.open("wb")
    return subprocess.Popen(
        [str(BIN / "nbcast"), *argv], env=env, stdout=handle, stderr=subprocess.STDOUT
    )


def last_line(log: Path, prefix: str) -> str:
    """The last line of ``log`` that starts with ``prefix`` (a worker's summary)."""
    lines = [
        line
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.startswith(prefix)
    ]
    return lines[-1] if lines else "(no summary: see the log)"


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM: the worker finishes what it runs, then exits."""
    if worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()


def _active_runs(home: Path) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{(home / 'nbcast.db').as_posix()}")
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM runs WHERE state IN ('QUEUED','LEASED','RUNNING')"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def wait_for_runs(home: Path, worker: subprocess.Popen[bytes], timeout: float = 180) -> None:
    """Until the worker has run everything queued (the demo fails if it stops)."""
    deadline = time.monotonic() + timeout
    while _active_runs(home):
        if worker.poll() is not None:
            raise SystemExit("demo failed: the worker stopped")
        if time.monotonic() > deadline:
            raise SystemExit("demo failed: runs still queued after 3 minutes")
        time.sleep(0.2)


def tick_and_run(env: dict[str, str], worker: subprocess.Popen[bytes], home: Path) -> int:
    """``nbcast scheduler tick`` hourly from PUBLISHED to TICKS_UNTIL — in this process,
    to save an interpreter start per tick — letting the worker finish after each."""
    from nbcast.cli import main as nbcast_main

    os.environ.update(env)
    tick, total = PUBLISHED, 0
    while tick < TICKS_UNTIL:
        tick += timedelta(hours=1)
        os.environ["NBCAST_CLOCK"] = f"fixed:{iso(tick)}"
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            if nbcast_main(["scheduler", "tick", "--json"]) != 0:
                raise SystemExit(f"demo failed: nbcast scheduler tick at {iso(tick)}")
        slots = json.loads(captured.getvalue())["slots"]
        total += slots
        if slots:
            wait_for_runs(home, worker)
    env["NBCAST_CLOCK"] = f"fixed:{iso(tick)}"
    return total


def show_periods(listing: str) -> None:
    """Which period each run covered: its slot, kind and bound report date."""
    for run in json.loads(listing):
        context = run.get("context") or {}
        print(
            f"  {run['slot_key'] or '-':<17} {run['kind']:<9} {run['state']:<9} "
            f"report_date={run['parameters'].get('report_date')}"
            + (f"  (interval from {context['interval_start']})" if context else "")
        )


DOCS_IMAGES = REPO / "docs" / "images"


def write_thumbnails(rendered: list[Path], folder: Path, docs: bool) -> list[Path]:
    """Page 1 of the newest base PDF of each example (the KPI dashboard: its landscape
    table page) as a 600-pixel PNG, into ``folder`` — and, with ``docs``
    (``make docs-images``), into ``docs/images``, which the README shows. Not by
    default: the page header names when the run finished, so every demo would change
    tracked files."""
    from nbcast.delivery.renderers.thumbnails import pdf_thumbnail

    folder.mkdir()
    if docs:
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    newest: dict[str, Path] = {}
    for path in sorted(rendered):
        if path.suffix == ".pdf" and not path.stem.endswith("-late"):
            newest[path.stem.split("_", 1)[0]] = path
    written = []
    for definition, pdf in sorted(newest.items()):
        page = 1 if definition == "kpi-dashboard" else 0
        image = pdf_thumbnail(pdf.read_bytes(), width=600, page=page)
        target = folder / f"{definition}.png"
        target.write_bytes(image)
        if docs:
            (DOCS_IMAGES / target.name).write_bytes(image)
        written.append(target)
    return written


def main() -> int:
    started = time.monotonic()
    out = Path(os.environ.get("NBCAST_DEMO_DIR", REPO / "demo-output")).resolve()
    if out.exists():
        shutil.rmtree(out)
    home, workspace = out / "home", out / "workspace"
    workspace.mkdir(parents=True)
    env = {
        **os.environ,
        "NBCAST_HOME": str(home),
        "NBCAST_USER": "demo",
        "NBCAST_LAKE": str(EXAMPLES / "lake"),
        "NBCAST_CLOCK": f"fixed:{iso(PUBLISHED)}",
    }
    env.pop("NBCAST_DATABASE_URL", None)
    # The links and unsubscribe URLs are made for the server the demo starts at the end.
    from nbcast.testing.http import free_port

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"

    # The mailbox first: the email channel is configured for every command, so
    # publishing a report that emails says nothing about an unconfigured channel.
    mailbox = start_mailbox(out / "mailbox")
    env["NBCAST_SMTP_URL"] = f"smtp://127.0.0.1:{mailbox.port}"
    env["NBCAST_SMTP_FROM"] = "reports@nbcast-demo.example"

    banner("publish the example reports")
    notebooks = sorted(EXAMPLES.glob("*.ipynb"))
    for source in notebooks:
        shutil.copy(source, workspace / source.name)
        nbcast("publish", str(workspace / source.name), "-m", "initial version", env=env)
    # Every report's kernel runs in a sandbox; these read only the lake, so theirs get no
    # network at all (and the demo's local Ray, which asks for no token, refuses a
    # sandboxed report on the host's network: nbcast.executor.engines.ray).
    nbcast("tenants", "set-network", "default", "none", env=env)
    sys.path.insert(0, str(REPO))  # run as a file: make `scripts` importable
    from scripts.demo_governance import governance_act, publish_regional
    from scripts.demo_trial import check_trials, queue_trials

    banner("daily-sales for two regional leads: one PDF each, scoped to their region")
    publish_regional(nbcast, env, workspace, EXAMPLES / "daily_sales.ipynb")
    nbcast("definitions", "list", env=env)

    banner("edit daily_sales.ipynb and publish version 2")
    edited = workspace / "daily_sales.ipynb"
    edit_daily_sales(edited)
    nbcast("publish", str(edited), "-m", "top 5 instead of top 10", env=env)
    nbcast("publish", str(edited), env=env)  # unchanged: no new version

    banner("versions and the diff a reviewer sees")
    nbcast("versions", "daily-sales", env=env)
    nbcast("diff", "daily-sales", "1", "2", "--no-color", env=env)

    banner("preview the data-quality schedule across the New York fall-back")
    nbcast(
        "schedule",
        "preview",
        "--cron",
        "0 */4 * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2026-10-31T12:00:00Z",
        "--to",
        "2026-11-02T00:00:00Z",
        env=env,
    )
    nbcast(
        "schedule",
        "preview",
        "--cron",
        "*/30 1 * * *",
        "--tz",
        "America/New_York",
        "--dst-fold",
        "both",
        "--from",
        "2026-11-01T04:00:00Z",
        "--to",
        "2026-11-01T07:00:00Z",
        env=env,
    )

    banner("preview daily-sales with its parameters across the Berlin fall-back (25 Oct)")
    nbcast(
        "schedule",
        "preview",
        "--definition",
        "daily-sales",
        "--from",
        "2026-10-22T00:00:00Z",
        "--to",
        "2026-11-04T00:00:00Z",
        env=env,
    )
    print("(report_date is bound to the business day before each slot: Monday reports Friday)")

    banner(
        "the scheduler ticks hourly to 2026-11-02 while a Ray worker runs what is due "
        "and a delivery worker renders and delivers it"
    )
    worker_env = {k: v for k, v in env.items() if k != "NBCAST_CLOCK"}  # the real clock
    worker_env.setdefault("NBCAST_RAY_TEMP_DIR", f"/tmp/nbcast-demo-ray-{os.getpid()}")
    worker_env["RAY_USAGE_STATS_ENABLED"] = "0"
    print(f"local SMTP mailbox listening on 127.0.0.1:{mailbox.port}, writing to {mailbox.folder}")
    # The same clock as the report worker (the real one): see the module docstring.
    delivery_env = {
        **worker_env,
        "NBCAST_SMTP_URL": f"smtp://127.0.0.1:{mailbox.port}",
        "NBCAST_SMTP_FROM": "reports@nbcast-demo.example",
        "NBCAST_BASE_URL": base_url,
    }
    for name in ("NBCAST_SLACK_TOKEN", "NBCAST_WEBHOOK_SECRET", "NBCAST_LINK_TTL"):
        delivery_env.pop(name, None)
    worker_log, delivery_log = out / "worker.log", out / "delivery-worker.log"
    print(f"$ nbcast worker --engine ray --concurrency 2   (in the background; log: {worker_log})")
    print(f"$ nbcast delivery-worker --poll 0.5   (in the background; log: {delivery_log})")
    worker = start_worker(worker_env, worker_log, "worker", "--engine", "ray", "--concurrency", "2")
    delivering = start_worker(delivery_env, delivery_log, "delivery-worker", "--poll", "0.5")
    try:
        total = tick_and_run(env, worker, home)
        print(
            f"{total} slots materialized by {int((TICKS_UNTIL - PUBLISHED) / timedelta(hours=1))}"
            " hourly ticks; after each, the worker ran what was due before the next"
        )
        nbcast("runs", "list", "--definition", "data-quality", env=worker_env)
        print(
            "(data-quality fires every 4 hours; its runs finish before the next slot, so each "
            "slot is a real run: none is skipped as an overlap)"
        )

        banner("each daily-sales run reports the business day before its slot")
        show_periods(
            nbcast(
                "runs", "list", "--definition", "daily-sales", "--json", env=worker_env, echo=False
            )
        )

        banner("backfill the week of 19 October: five runs, five different trading days")
        nbcast(
            "backfill",
            "daily-sales",
            "--from",
            "2026-10-19",
            "--to",
            "2026-10-24",
            env=env,
        )
        trials = queue_trials(nbcast, env)
        wait_for_runs(home, worker)
        show_periods(
            nbcast(
                "runs",
                "list",
                "--definition",
                "daily-sales",
                "--kind",
                "backfill",
                "--json",
                env=worker_env,
                echo=False,
            )
        )
    finally:
        stop_worker(worker)
        stop_worker(delivering)
    runs = json.loads(nbcast("runs", "list", "--json", env=worker_env, echo=False))
    failed = [r for r in runs if r["state"] in ("FAILED", "TIMED_OUT")]
    if failed:
        raise SystemExit(f"demo failed: {len(failed)} run(s) failed; see {worker_log}")
    executed_dir = out / "executed"
    executed_dir.mkdir()
    executed = []
    for run in runs:
        if run["state"] == "SUCCEEDED" and run["artifact_sha256"]:
            sha = run["artifact_sha256"]
            target = executed_dir / f"{run['definition']}-{run['slot_key'] or run['id']}.ipynb"
            shutil.copy(home / "artifacts" / sha[:2] / sha[2:4] / sha, target)
            executed.append(target)
    if not executed:
        raise SystemExit("demo failed: no run succeeded")

    banner("what was rendered and delivered (email to the local SMTP mailbox)")
    print(f"the background delivery worker: {last_line(delivery_log, 'delivery worker done')}")
    print("(it was stopped as the report worker finished; this one delivers the rest)")
    try:
        nbcast(
            "delivery-worker", "--exit-when-idle", "--poll", "0.5", env=delivery_env, timeout=300
        )
    finally:
        mailbox.stop()
    nbcast("deliveries", "list", env=delivery_env)
    nbcast("links", "list", env=delivery_env)
    deliveries = json.loads(nbcast("deliveries", "list", "--json", env=delivery_env, echo=False))
    rendered = copy_renditions(home, out / "rendered")
    from scripts.demo_trial import check_spreadsheet

    check_spreadsheet(rendered)

    unexpected = [
        d
        for d in deliveries
        if not (
            d["state"] == "SENT"
            or (d["state"] == "SUPPRESSED" and d["reason"] in EXPECTED_SUPPRESSIONS)
        )
    ]
    for d in unexpected:
        print(
            f"unexpected: delivery {d['id']} ({d['report']} {d['channel']} {d['recipient']}):"
            f" {d['state']} {d['reason'] or ''} {d['error'] or ''}"
        )
    if not deliveries:
        raise SystemExit("demo failed: the delivery worker recorded no delivery")
    if unexpected:
        raise SystemExit(
            f"demo failed: {len(unexpected)} delivery(ies) neither SENT nor "
            f"SUPPRESSED as intended ({', '.join(sorted(EXPECTED_SUPPRESSIONS))})"
        )
    emails_sent = sum(1 for d in deliveries if d["channel"] == "email" and d["state"] == "SENT")
    if not mailbox.files:
        raise SystemExit("demo failed: no message reached the local mailbox")
    if len(mailbox.files) != emails_sent:
        raise SystemExit(
            f"demo failed: {emails_sent} emails SENT in the ledger but "
            f"{len(mailbox.files)} .eml files in the mailbox"
        )
    link_urls = [
        (d["report"], d["recipient"], url)
        for d in sorted(deliveries, key=lambda d: d["id"])
        if d["channel"] == "link" and d["state"] == "SENT"
        for url in (d["receipt"] or {}).get("links", [])
    ]
    if not link_urls:
        raise SystemExit("demo failed: no signed link was handed out")
    for d in sorted(deliveries, key=lambda d: d["id"]):
        if d["state"] == "SUPPRESSED":
            why = {"no_results": "the report found nothing to tell"}[d["reason"]]
            print(
                f"as intended: {d['report']} run {d['run']} to {d['recipient']} ({d['channel']})"
                f" SUPPRESSED {d['reason']} - {why}"
            )
    for path in mailbox.files:
        print(f"{path.name}: {describe_mail(path)}")
    check_trials(nbcast, delivery_env, trials, runs, mailbox.files)

    banner("nbcast serve on this home folder: the links, one-click unsubscribe, the status page")
    from scripts.demo_server import serve_and_check

    serve_and_check(
        nbcast=nbcast,
        env=delivery_env,
        out=out,
        root=workspace,
        base_url=base_url,
        port=port,
        deliveries=deliveries,
        mail_files=mailbox.files,
    )

    governance_act(nbcast, env, out, mailbox.files)

    docs = os.environ.get("NBCAST_DEMO_DOCS") == "1"
    banner("JupyterLab: schedule a notebook from its toolbar, then the Reports panel")
    from scripts.demo_lab import lab_act

    for path in lab_act(out, EXAMPLES, DOCS_IMAGES if docs else None):
        print(
            f"screenshot: {path}"
            + (f"  (also {DOCS_IMAGES / ('lab-' + path.name)})" if docs else "")
        )

    banner("a page of each example PDF (thumbnails for the README)")
    for path in write_thumbnails(rendered, out / "thumbnails", docs):
        print(f"thumbnail: {path}" + (f"  (also {DOCS_IMAGES / path.name})" if docs else ""))

    banner("where everything is")
    print(f"home folder (NBCAST_HOME): {home}")
    print(f"embedded database:         {home / 'nbcast.db'}")
    print(f"working copies:            {workspace}")
    print(f"artifact store:            {home / 'artifacts'}")
    for path in executed:
        print(f"executed notebook:         {path}")
    for path in rendered:
        print(f"rendered file:             {path}")
    for path in mailbox.files:
        print(f"email (.eml):              {path}")
    for report, recipient, url in link_urls:
        print(f"signed link ({report} for {recipient}):\n    {url}")
    print("(`nbcast links list` shows their expiry and how often each was opened)")
    print(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
