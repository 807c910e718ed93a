"""The demo's last act: ``nbcast serve`` on the demo's home folder serves what the
delivery worker sent.

1. starts ``nbcast serve --no-embedded-services`` on the port the links were made
   for (``NBCAST_BASE_URL``), with a fresh server token,
   — while it starts, runs the report of the first email in the mailbox once more
   (``nbcast run`` + a local worker),
2. opens every signed link the ledger handed out (status, content type, size) and
   one whose signature was tampered with (403),
3. takes the ``List-Unsubscribe`` URL of that email and POSTs the RFC 8058 one-click
   body to it, as a mail client does; then delivers the new run and checks that its
   delivery to that recipient is ``SUPPRESSED unsubscribed``,
4. saves screenshots of the status page (overview and a run) through Chromium, while
   that delivery worker runs,
5. stops the server and prints the command that starts it again.

Any surprise fails the demo (``SystemExit`` with the reason).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Sequence
from email import message_from_bytes
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import httpx

from scripts.serving import stop, wait_ready

BIN = Path(sys.executable).parent

Nbcast = Callable[..., str]


def _launch(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(argv, env=env, stdout=handle, stderr=subprocess.STDOUT)


def _tampered(url: str) -> str:
    """``url`` with one character of its token's signature changed."""
    head, _, token = url.rpartition("/")
    middle = len(token) - 6  # inside the signature, clear of a last base64 character
    swapped = "A" if token[middle] != "A" else "B"
    return f"{head}/{token[:middle]}{swapped}{token[middle + 1 :]}"


def _first_unsubscribe(
    mail_files: Sequence[Path], deliveries: list[dict[str, Any]]
) -> tuple[str, str, str, str]:
    """(recipient, subject, one-click URL, report) of the first email that carries one,
    to the only email recipient of its report: the extra run then sends no other email
    (the local mailbox is closed by now), and has one audience, so its run id is the
    one whose delivery is checked."""
    emailed: dict[str, set[str]] = {}
    for d in deliveries:
        if d["channel"] == "email":
            emailed.setdefault(d["report"], set()).add(d["recipient"])
    for path in mail_files:
        mail = message_from_bytes(path.read_bytes(), policy=default_policy)
        header = str(mail.get("List-Unsubscribe", ""))
        urls = [part.strip(" <>") for part in header.split(",") if "http" in part]
        if not urls or "One-Click" not in str(mail.get("List-Unsubscribe-Post", "")):
            continue
        to = str(mail["To"])
        alone = [report for report, people in sorted(emailed.items()) if people == {to}]
        if alone:
            return to, str(mail["Subject"]), urls[0], alone[0]
    raise SystemExit(
        "demo failed: no email to a report's only email recipient carried a one-click "
        "List-Unsubscribe header"
    )


def serve_and_check(
    *,
    nbcast: Nbcast,
    env: dict[str, str],
    out: Path,
    root: Path,
    base_url: str,
    port: int,
    deliveries: list[dict[str, Any]],
    mail_files: Sequence[Path],
) -> None:
    """The module docstring's five steps."""
    token = secrets.token_urlsafe(24)
    server_env = {
        **env,
        "JUPYTER_TOKEN": token,
        "JUPYTER_CONFIG_DIR": str(out / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(out / "jupyter-runtime"),
    }
    as_root = ["--allow-root"] if os.geteuid() == 0 else []
    argv = [
        str(BIN / "nbcast"),
        "serve",
        "--no-embedded-services",
        "--port",
        str(port),
        f"--ServerApp.root_dir={root}",
        *as_root,
    ]
    log = out / "server.log"
    print(f"$ nbcast serve --no-embedded-services --port {port}   (log: {log})", flush=True)
    server = _launch(argv, server_env, log)
    try:
        # While the server starts: one more run of the report whose first email will be
        # unsubscribed, executed now and delivered after the unsubscribe.
        recipient, subject, unsubscribe, report = _first_unsubscribe(mail_files, deliveries)
        run = json.loads(nbcast("run", report, "--json", env=env))
        nbcast("worker", "--exit-when-idle", "--no-warm-kernels", env=env, timeout=300)
        try:
            wait_ready(server, log, base_url, token, what="nbcast serve")
        except SystemExit as exc:
            raise SystemExit(f"demo failed: {exc}") from None
        _links(deliveries)
        _unsubscribe(recipient, subject, unsubscribe)
        # The run page shown: a delivered run whose links were just opened.
        shown = min(d["run"] for d in deliveries if d["channel"] == "link")
        _suppressed_and_screenshots(nbcast, env, out, base_url, token, run["id"], recipient, shown)
    finally:
        stop(server)
    print(
        "the server is stopped; to open the links and the status page again:\n"
        f"    NBCAST_HOME={env['NBCAST_HOME']} {BIN / 'nbcast'} serve --port {port}"
        f"{' --allow-root' if as_root else ''}\n"
        f"  then {base_url}/nbcast/?token=<the token it prints>"
    )


def _links(deliveries: list[dict[str, Any]]) -> None:
    """Open every signed link handed out, and one with a tampered signature."""
    links = [
        url
        for d in sorted(deliveries, key=lambda d: d["id"])
        if d["channel"] == "link" and d["state"] == "SENT"
        for url in (d["receipt"] or {}).get("links", [])
    ]
    with httpx.Client(timeout=30) as http:
        for url in links:
            answer = http.get(url)
            kind = answer.headers.get("content-type", "").split(";")[0]
            print(f"GET {url[:72]}… → {answer.status_code} {kind}, {len(answer.content):,} bytes")
            if answer.status_code != 200:
                raise SystemExit(f"demo failed: the signed link answered {answer.status_code}")
        forged = http.get(_tampered(links[0]))
    print(f"the same link with one character of its signature changed → {forged.status_code}")
    if forged.status_code != 403:
        raise SystemExit(f"demo failed: a tampered link answered {forged.status_code}")


def _unsubscribe(recipient: str, subject: str, url: str) -> None:
    """POST the RFC 8058 one-click body, as a mail provider does."""
    answer = httpx.post(
        url,
        content=b"List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=30,
    )
    print(f"one-click unsubscribe of {recipient} from {subject!r} → {answer.status_code}")
    if answer.status_code != 200:
        raise SystemExit(f"demo failed: one-click unsubscribe answered {answer.status_code}")


def _suppressed_and_screenshots(
    nbcast: Nbcast,
    env: dict[str, str],
    out: Path,
    base_url: str,
    token: str,
    run_id: int,
    recipient: str,
    shown: int,
) -> None:
    """Deliver the extra run (the unsubscribed recipient must be SUPPRESSED) while
    Chromium takes the status page's screenshots (the overview and run ``shown``)."""
    try:
        from scripts.ui_screenshots import save_screenshots
    except ImportError as exc:  # playwright is in the dev extra, which make demo installs
        raise SystemExit(f"demo failed: {exc}") from None
    print("$ nbcast delivery-worker --exit-when-idle --poll 0.5", flush=True)
    delivering = subprocess.Popen(
        [str(BIN / "nbcast"), "delivery-worker", "--exit-when-idle", "--poll", "0.5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        shots = save_screenshots(base_url, token, out / "screenshots", shown)
    except RuntimeError as exc:  # chromium missing: `make demo` installs it
        delivering.kill()
        raise SystemExit(f"demo failed: screenshots: {exc}") from None
    output, _ = delivering.communicate(timeout=300)
    sys.stdout.write(output.decode(errors="replace").splitlines()[-1] + "\n")
    if delivering.returncode != 0:
        raise SystemExit(f"demo failed: the delivery worker exited {delivering.returncode}")
    after = json.loads(
        nbcast("deliveries", "list", "--run", str(run_id), "--json", env=env, echo=False)
    )
    mine = [d for d in after if d["recipient"] == recipient and d["channel"] == "email"]
    for d in mine:
        print(f"run {run_id} to {recipient}: {d['state']} {d['reason'] or ''}")
    if not mine or any((d["state"], d["reason"]) != ("SUPPRESSED", "unsubscribed") for d in mine):
        raise SystemExit("demo failed: the unsubscribed recipient was not suppressed")
    for path in shots:
        print(f"screenshot: {path}")
    if os.environ.get("NBCAST_DEMO_DOCS") == "1":  # make docs-images: the README's picture
        docs = Path(__file__).resolve().parents[1] / "docs" / "images" / "status-overview.png"
        docs.write_bytes(shots[0].read_bytes())
        print(f"  (also {docs})")
