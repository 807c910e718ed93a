"""The demo's JupyterLab act: a headless ``jupyter lab`` with nbcast's extension, driven
in Chromium as a data scientist would, with screenshots of the dialog and the panel.

1. starts ``jupyter lab`` on a folder holding the example ``daily_sales.ipynb`` with
   its ``nbcast`` block removed, with a home folder of its own (``lab/home``: the
   demo's main home has a fixed clock, and this act shows the real next fire times);
2. opens the notebook, "Schedule as report…" from its toolbar, and fills the dialog:
   a nightly 02:30 cron in New York (so the dialog shows the coming DST changes),
   ``report_date`` bound to the previous business day of the slot, ``top_n`` 5, HTML
   and PDF, an email subscription — screenshot ``lab/dialog.png``;
3. saves and publishes, then shows the Reports panel with the report's versions and
   next fires — screenshot ``lab/panel.png``; checks that the notebook file now holds
   the block and that the API lists the definition;
4. stops Lab.

Any surprise fails the demo (``SystemExit`` with the reason).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
TOKEN = "demo-lab-token"


def lab_act(out: Path, examples: Path, docs_images: Path | None = None) -> list[Path]:
    """Run the act (module docstring); the screenshots it saved."""
    from playwright.sync_api import sync_playwright

    from nbcast.testing.http import free_port
    from scripts.lab_ui import DIALOG, PANEL, LabDriver, start_lab
    from scripts.serving import stop
    from scripts.ui_screenshots import launch_options

    folder = out / "lab"
    (folder / "notebooks").mkdir(parents=True)
    (folder / "home").mkdir(mode=0o700)
    notebook = json.loads((examples / "daily_sales.ipynb").read_text())
    notebook["metadata"].pop("nbcast", None)
    target = folder / "notebooks" / "daily_sales.ipynb"
    target.write_text(json.dumps(notebook, indent=1))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    print(f"$ jupyter lab --port {port}   (headless, the notebook without its nbcast block)")
    try:
        process = start_lab(folder, folder / "notebooks", folder / "home", port, TOKEN)
    except SystemExit as exc:
        raise SystemExit(f"demo failed: {exc}") from None
    shots: list[Path] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(**launch_options())
            context = browser.new_context(
                viewport={"width": 1400, "height": 1000}, timezone_id="America/New_York"
            )
            page = context.new_page()
            drive = LabDriver(page, base, TOKEN, folder)
            drive.open("daily_sales.ipynb")
            print("toolbar: Schedule as report…")
            drive.schedule_from_toolbar()
            drive.field("Name").fill("daily-sales")
            drive.set_schedule("30 2 * * *", "America/New_York")
            drive.set_parameter("report_date", "binding", "previous business day of the slot")
            drive.set_parameter("top_n", "value", "5")
            drive.set_outputs("html", "pdf")
            drive.add_subscription("email", "cfo@example.com")
            drive.field("What changed").fill("scheduled from JupyterLab")
            notes = [n.inner_text() for n in page.locator(f"{DIALOG} .nbcast-DstNote").all()]
            if not notes:
                raise SystemExit("demo failed: the dialog showed no DST note for 02:30 New York")
            for note in notes:
                print(f"  DST note in the dialog: {note}")
            page.locator(f"{DIALOG} .nbcast-ScheduleDialog").evaluate("e => e.scrollTop = 0")
            shots.append(drive.screenshot("dialog"))
            drive.save()
            drive.saved()
            block = json.loads(target.read_text())["metadata"].get("nbcast")
            if not block or block.get("schedule", {}).get("cron") != "30 2 * * *":
                raise SystemExit(f"demo failed: the notebook's block is {block!r}")
            print(f"  the notebook now holds its nbcast block: {json.dumps(block)}")
            panel = drive.open_panel()
            drive.widen_sidebar(160)
            panel.locator(".nbcast-Definition[data-definition='daily-sales']").wait_for()
            page.locator(f"{PANEL} tr[data-version='1']").wait_for()
            shots.append(drive.screenshot("panel"))
            context.close()
            browser.close()
        with httpx.Client(base_url=base, headers={"Authorization": f"token {TOKEN}"}) as client:
            listed = client.get("/nbcast/api/v1/definitions").json()["items"]
        if [d["name"] for d in listed] != ["daily-sales"]:
            raise SystemExit(f"demo failed: the API lists {listed!r}")
        print(f"  published: daily-sales version {listed[0]['latest_version']}, "
              f"next fire {listed[0]['next_fires'][0]['local']}")  # fmt: skip
    finally:
        stop(process)
    saved = [p for p in shots if p is not None]
    if docs_images is not None:
        for path in saved:
            shutil.copy(path, docs_images / f"lab-{path.name}")
    return saved
