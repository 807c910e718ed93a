"""Screenshots of nbcast's status pages in a real Chromium, for the demo and the tests.

:func:`save_screenshots` logs in with a user's token (``?token=`` on the first URL;
jupyter-server then keeps a login cookie), opens the overview and, when a run id is
given, that run's page, and saves a full-page PNG of each at 1280×800. It drives
Debian's ``chromium`` through Playwright (Playwright cannot download its own browser
here) and adds ``--no-sandbox`` when running as root, where Chromium's sandbox
refuses to start. Importing this module starts nothing.

Command line: ``python scripts/ui_screenshots.py URL TOKEN FOLDER [RUN_ID]``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["VIEWPORT", "chromium_executable", "launch_options", "open_browser", "save_screenshots"]

VIEWPORT = {"width": 1280, "height": 800}
"""The size the issue asks the pages to be usable at."""


def chromium_executable() -> str | None:
    """The path of Debian's chromium (None when it is not installed)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def launch_options() -> dict[str, Any]:
    """Playwright's ``chromium.launch`` options for the system Chromium."""
    executable = chromium_executable()
    if executable is None:
        raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
    args = ["--disable-dev-shm-usage", "--disable-gpu"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium's sandbox refuses to run as root
    return {"executable_path": executable, "args": args, "headless": True}


@contextmanager
def open_browser() -> Iterator[Any]:
    """A Playwright ``Browser`` on the system Chromium, closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**launch_options())
        try:
            yield browser
        finally:
            browser.close()


def save_screenshots(base_url: str, token: str, folder: Path, run_id: int | None) -> list[Path]:
    """Full-page screenshots of the overview and, with ``run_id``, of that run's page,
    saved in ``folder`` (made if missing); the paths written."""
    base = base_url.rstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with open_browser() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        answer = page.goto(f"{base}/nbcast/?token={quote(token, safe='')}")
        if answer is None or answer.status != 200:
            status = None if answer is None else answer.status
            raise RuntimeError(f"the overview answered {status} (is the token right?)")
        path = folder / "overview.png"
        page.screenshot(path=str(path), full_page=True)
        written.append(path)
        if run_id is not None:
            answer = page.goto(f"{base}/nbcast/runs/{int(run_id)}")
            if answer is None or answer.status != 200:
                status = None if answer is None else answer.status
                raise RuntimeError(f"run {run_id}'s page answered {status}")
            path = folder / f"run-{int(run_id)}.png"
            page.screenshot(path=str(path), full_page=True)
            written.append(path)
    return written


def main(argv: list[str]) -> int:
    """The command line (module docstring)."""
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    run_id = int(argv[3]) if len(argv) == 4 else None
    for path in save_screenshots(argv[0], argv[1], Path(argv[2]), run_id):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
