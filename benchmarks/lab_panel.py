"""The Lab extension's figure: the time the Reports panel takes to show 1,000
definitions, side by side with its reference. Prints JSON.

A real ``jupyter lab`` with nbcast (embedded SQLite home, no embedded services) holds
``--definitions`` definitions of the server owner's tenant, published through
:func:`nbcast.definitions.versions.publish` (cron schedules in four zones, so every row
has its next fires computed by the server). In Debian's Chromium, each sample reloads
Lab, waits until it has restored, clicks the Reports tab and stops the clock when the
panel's table has all its rows in the DOM.

Reference: the same data fetched by the same page, without the panel — the API pages
the panel requests (``GET /nbcast/api/v1/definitions?limit=500``, then the next page),
from the page's own ``fetch`` with its cookies, timed in the browser once Lab is idle.
The ratio says what the panel adds to the requests it has to make; the panel's own
requests, timed inside it (``panel_requests_ms``: they run while Lab's start-up requests
still occupy the server), split the rest into waiting and drawing.

Also printed: the extension's JavaScript (``bundle_bytes``, gzip ``bundle_gzip_bytes``)
and how much of it a Lab start loads (``startup_js_bytes``: nbdime's diff components
load only when a diff is opened).

Usage: ``python -m benchmarks.lab_panel [--definitions N] [--samples N]``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nbcast.access import Caller
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.testing.http import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TOKEN = "bench-token"
OWNER = "bench"
ZONES = ("Europe/Berlin", "America/New_York", "Asia/Tokyo", "UTC")


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seed(home: Path, folder: Path, count: int) -> float:
    """Publish ``count`` definitions in the owner's tenant; the seconds it took."""
    db = Database.open(f"sqlite:///{home / 'nbcast.db'}")
    caller = Caller(tenant="default", user=OWNER)
    started = time.perf_counter()
    (folder / "notebooks").mkdir()
    try:
        for i in range(count):
            path = folder / "notebooks" / f"report-{i:04d}.ipynb"
            block = {
                "name": f"report-{i:04d}",
                "schedule": {"cron": f"{i % 60} {i % 24} * * *", "timezone": ZONES[i % 4]},
            }
            notebook = {
                "cells": [
                    {
                        "cell_type": "code",
                        "id": "body",
                        "metadata": {},
                        "source": f"print({i})",
                        "outputs": [],
                        "execution_count": None,
                    }
                ],
                "metadata": {
                    "kernelspec": {
                        "name": "python3",
                        "display_name": "Python 3",
                        "language": "python",
                    },
                    "nbcast": block,
                },
                "nbformat": 4,
                "nbformat_minor": 5,
            }
            path.write_text(json.dumps(notebook))
            publish(db, path, caller=caller)
    finally:
        db.dispose()
    return time.perf_counter() - started


FETCH_ALL = """async () => {
    const t0 = performance.now();
    let after = null, n = 0;
    do {
        const q = '?limit=500' + (after ? '&after=' + encodeURIComponent(after) : '');
        const r = await fetch('/nbcast/api/v1/definitions' + q, {cache: 'no-store'});
        const page = await r.json();
        n += page.items.length;
        after = page.next;
    } while (after);
    return [performance.now() - t0, n];
}"""


def measure(base: str, count: int, samples: int) -> dict[str, Any]:
    shots = _script("ui_screenshots")
    lab_ui = _script("lab_ui")
    from playwright.sync_api import sync_playwright

    panel_ms: list[float] = []
    fetch_ms: list[float] = []
    api_ms: list[float] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**shots.launch_options())
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        loaded: dict[str, int] = {}

        def record(response: Any) -> None:
            if "/lab/extensions/nbcast/static/" in response.url and response.url.endswith(
                (".js", ".js?v=" + response.url.rsplit("?v=", 1)[-1])
            ):
                body = response.body()
                loaded[response.url.split("?", 1)[0]] = len(body)

        page.on("response", record)
        drive = lab_ui.LabDriver(page, base, TOKEN)
        for _ in range(samples + 1):  # the first is a warm-up (caches, JIT)
            drive.open()
            started = time.perf_counter()
            page.click(".jp-SideBar [data-id='nbcast-reports']")
            page.wait_for_function(
                f"() => document.querySelectorAll('#nbcast-reports tr[data-definition]').length"
                f" === {count}",
                timeout=120_000,
            )
            panel_ms.append((time.perf_counter() - started) * 1000)
            fetch_ms.append(float(page.get_attribute("#nbcast-reports", "data-load-ms") or 0))
            elapsed, found = page.evaluate(FETCH_ALL)
            assert found == count, found
            api_ms.append(float(elapsed))
        browser.close()
    panel_ms, fetch_ms, api_ms = panel_ms[1:], fetch_ms[1:], api_ms[1:]
    return {
        "startup_js_bytes": sum(loaded.values()),
        "definitions": count,
        "samples": samples,
        "panel_ms_median": round(statistics.median(panel_ms), 1),
        "panel_ms_max": round(max(panel_ms), 1),
        "panel_requests_ms_median": round(statistics.median(fetch_ms), 1),
        "api_fetch_ms_median": round(statistics.median(api_ms), 1),
        "ratio_panel_to_api": round(statistics.median(panel_ms) / statistics.median(api_ms), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--definitions", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="nbcast-bench-lab-"))
    home = folder / "home"
    home.mkdir(mode=0o700)
    process = None
    try:
        seconds = seed(home, folder, args.definitions)
        port = free_port()
        # Lab serves an empty folder: the 1,000 notebooks are not its business, and a
        # file browser listing them would only load the server the panel is timed on.
        root = folder / "root"
        root.mkdir()
        process = _script("lab_ui").start_lab(folder, root, home, port, TOKEN, user=OWNER)
        result = measure(f"http://127.0.0.1:{port}", args.definitions, args.samples)
        result["seed_seconds"] = round(seconds, 1)
        bundle = REPO / "nbcast" / "labextension" / "static"
        result["bundle_bytes"] = sum(p.stat().st_size for p in bundle.glob("*.js"))
        result["bundle_gzip_bytes"] = sum(
            len(gzip.compress(p.read_bytes(), 9)) for p in bundle.glob("*.js")
        )
        print(json.dumps({"lab_panel": result}, indent=2))
    finally:
        if process is not None:
            _script("serving").stop(process)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
