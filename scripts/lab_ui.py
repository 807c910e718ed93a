"""Drive nbcast's JupyterLab extension in a real ``jupyter lab`` through Chromium.

Shared by the UI tests (``tests/labextension``) and the demo's Lab act
(``scripts/demo_lab.py``): the user settings a scratch Lab starts with, its command
line, and :class:`LabDriver`, which does in the page what a user does — open a
notebook, open "Schedule as report…" from the toolbar, the command palette or the
file browser's context menu, fill the dialog, open the Reports panel — by clicking
and typing in the real DOM (the app object is only read, to know when Lab is ready).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts.serving import wait_ready

__all__ = ["LabDriver", "lab_arguments", "start_lab", "write_user_settings"]

SCHEDULE = "nbcast:schedule"
DIALOG = ".jp-Dialog.nbcast-Dialog"
PANEL = "#nbcast-reports"


def write_user_settings(folder: Path, refresh_seconds: float = 2) -> Path:
    """Lab user settings for a scratch Lab: no news or update toast (it covers the
    status bar), and the Reports panel's refresh interval. Returns the folder."""
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
        "nbcast/plugin.jupyterlab-settings": {"refreshSeconds": refresh_seconds},
    }
    for name, value in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    return folder


def lab_arguments(folder: Path) -> tuple[str, ...]:
    """``jupyter lab`` options for a scratch Lab under ``folder``: its own settings and
    workspaces, the app exposed as ``window.jupyterapp`` (read to know it is ready)."""
    settings = write_user_settings(folder / "lab-user-settings")
    return (
        "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={folder / 'lab-workspaces'}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    )


def start_lab(
    folder: Path, root: Path, home: Path, port: int, token: str, user: str = "demo"
) -> subprocess.Popen[bytes]:
    """A headless ``jupyter lab`` with nbcast (no embedded services) serving ``root``
    on ``home``, its settings and log (``lab.log``) under ``folder``; returned once its
    health route answers. ``SystemExit`` with the reason if it does not."""
    config = folder / "jupyter-config"
    config.mkdir(exist_ok=True)
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"NbcastApp": {"embedded_services": False}})
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("NBCAST_")},
        "NBCAST_HOME": str(home),
        "NBCAST_USER": user,
        "JUPYTER_TOKEN": token,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(folder / "runtime"),
    }
    argv = [
        str(Path(sys.executable).parent / "jupyter"), "lab", f"--ServerApp.port={port}",
        "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
        "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}",
        *lab_arguments(folder),
        *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else []),
    ]  # fmt: skip
    log = folder / "lab.log"
    process = subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    wait_ready(process, log, f"http://127.0.0.1:{port}", token, what="jupyter lab", timeout=90)
    return process


class LabDriver:
    """One Lab page, driven as a user would (module docstring)."""

    def __init__(self, page: Any, base_url: str, token: str, shots: Path | None = None) -> None:
        self.page = page
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.shots = shots
        self.console_errors: list[tuple[str, str]] = []
        """(text, URL) of each console error (a failed request's URL is its resource's)."""
        page.on(
            "console",
            lambda m: (
                self.console_errors.append((m.text, m.location.get("url", "")))
                if m.type == "error"
                else None
            ),
        )

    # -- Lab itself -----------------------------------------------------------------------

    def open(self, path: str | None = None, timeout: float = 90_000) -> None:
        """Open Lab (on notebook ``path`` if given), with a fresh workspace, and wait until
        it has started and restored its layout."""
        where = f"/lab/tree/{path}" if path else "/lab"
        self.page.goto(f"{self.base_url}{where}?reset&token={self.token}")
        self.page.wait_for_function("window.jupyterapp !== undefined", timeout=timeout)
        self.page.evaluate(
            "async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }"
        )
        if path:
            self.page.wait_for_selector(
                f".jp-NotebookPanel-toolbar [data-command='{SCHEDULE}']", timeout=timeout
            )

    def activate_tab(self, label: str) -> None:
        """Bring the main-area tab labelled ``label`` to the front."""
        self.page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=label).first.click()

    def screenshot(self, name: str, selector: str | None = None) -> Path | None:
        """Save a screenshot (of ``selector`` only, if given) as ``<shots>/<name>.png``."""
        if self.shots is None:
            return None
        self.shots.mkdir(parents=True, exist_ok=True)
        path = self.shots / f"{name}.png"
        if selector:
            self.page.locator(selector).first.screenshot(path=str(path))
        else:
            self.page.screenshot(path=str(path))
        return path

    # -- the three ways into the dialog ---------------------------------------------------

    def schedule_from_toolbar(self) -> Any:
        self.page.click(f".jp-NotebookPanel-toolbar [data-command='{SCHEDULE}']")
        return self.wait_dialog()

    def schedule_from_palette(self) -> Any:
        # The shortcut is lost while another widget (a closing dialog) holds the
        # keyboard: press it again until the palette shows.
        palette = self.page.locator(".lm-CommandPalette-input")
        for _ in range(6):
            self.page.keyboard.press("Control+Shift+C")
            try:
                palette.wait_for(timeout=5_000)
                break
            except Exception:  # playwright's TimeoutError: press again
                continue
        palette.wait_for()
        palette.fill("Schedule as report")
        self.page.locator(f".lm-CommandPalette-item[data-command='{SCHEDULE}']").first.click()
        return self.wait_dialog()

    def show_sidebar(self, widget_id: str) -> Any:
        """Show the left sidebar's ``widget_id`` panel (a click on its tab, unless it is
        already shown: a click on the current tab collapses the sidebar)."""
        panel = self.page.locator(f"#{widget_id}")
        if not panel.is_visible():
            self.page.click(f".jp-SideBar [data-id='{widget_id}']")
        panel.wait_for(state="visible")
        return panel

    def schedule_from_file_browser(self, name: str) -> Any:
        self.show_sidebar("filebrowser")
        item = self.page.locator(
            ".jp-DirListing-item[data-file-type='notebook']", has_text=name
        ).first
        item.click(button="right")
        self.page.locator(f".lm-Menu-item[data-command='{SCHEDULE}']").click()
        return self.wait_dialog()

    def wait_dialog(self) -> Any:
        dialog = self.page.locator(DIALOG)
        dialog.wait_for()
        dialog.locator(".nbcast-Status").wait_for()
        return dialog

    # -- the dialog -----------------------------------------------------------------------

    def field(self, label: str) -> Any:
        return self.page.locator(f"{DIALOG} [aria-label='{label}']")

    def error_for(self, key: str) -> Any:
        return self.page.locator(f"{DIALOG} [data-error-for='{key}']")

    def set_schedule(self, cron: str, zone: str) -> None:
        """Type a cron and a zone, and wait for the preview of that schedule."""
        self.page.locator(f"{DIALOG} input[name='nbcast-kind'][value='cron']").check()
        self.field("Cron").fill(cron)
        self.field("Time zone").fill(zone)
        self.wait_preview(f"cron|{cron}||{zone}|")

    def wait_preview(self, of: str) -> None:
        """Wait until the dialog's preview is of the schedule ``of`` (``kind|cron|every|
        zone|``, then the DST policies: a prefix of the preview's ``data-of``)."""
        self.page.wait_for_function(
            """([of]) => {
                const p = document.querySelector('.nbcast-Dialog .nbcast-Preview');
                return p && p.dataset.loading === 'no' && p.dataset.of.startsWith(of);
            }""",
            arg=[of],
        )

    def set_parameter(self, name: str, mode: str, value: str) -> None:
        """Set parameter ``name`` to a value, or (``mode`` 'binding') a preset's label."""
        row = self.page.locator(f"{DIALOG} tr[data-parameter='{name}']")
        row.locator(f"select[aria-label='{name} source']").select_option(mode)
        if mode == "value":
            row.locator(f"[aria-label='{name} value']").fill(value)
        elif mode == "binding":
            row.locator(f"select[aria-label='{name} binding']").select_option(label=value)

    def set_outputs(self, *formats: str) -> None:
        for box in self.page.locator(f"{DIALOG} .nbcast-Outputs input[type=checkbox]").all():
            fmt = (box.get_attribute("aria-label") or "").removeprefix("output ")
            box.set_checked(fmt in formats)

    def add_subscription(self, channel: str, recipients: str, only_if: str = "") -> None:
        self.page.click(f"{DIALOG} .nbcast-Add")
        row = self.page.locator(f"{DIALOG} .nbcast-Subscription").last
        row.locator("select[aria-label='channel']").select_option(channel)
        row.locator("input[aria-label='recipients']").fill(recipients)
        row.locator("select[aria-label='only if']").select_option(only_if)

    def save(self) -> None:
        """Press "Save and publish" (the dialog stays open on a refusal)."""
        self.page.click(f"{DIALOG} .jp-Dialog-button.jp-mod-accept")
        self.page.wait_for_function(
            "() => { const f = document.querySelector('.nbcast-Dialog .nbcast-Form');"
            " return !f || f.dataset.busy === 'no'; }"
        )

    def saved(self, timeout: float = 30_000) -> None:
        self.page.locator(DIALOG).wait_for(state="detached", timeout=timeout)

    def cancel(self) -> None:
        self.page.click(f"{DIALOG} .jp-Dialog-button.jp-mod-reject")
        self.page.locator(DIALOG).wait_for(state="detached")

    # -- the Reports panel ----------------------------------------------------------------

    def widen_sidebar(self, pixels: int) -> None:
        """Drag the left sidebar's edge ``pixels`` to the right (as a user would)."""
        handle = self.page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
        box = handle.bounding_box()
        if box is None:
            return
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        self.page.mouse.move(x, y)
        self.page.mouse.down()
        self.page.mouse.move(x + pixels, y, steps=5)
        self.page.mouse.up()

    def open_panel(self) -> Any:
        return self.show_sidebar("nbcast-reports")

    def refreshes(self) -> int:
        return int(self.page.locator(PANEL).get_attribute("data-refreshes") or 0)

    def wait_until(self, what: str, probe: Any, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            self.page.wait_for_timeout(250)


def text_of(locator: Any) -> str:
    """A locator's visible text, whitespace collapsed."""
    return re.sub(r"\s+", " ", locator.inner_text()).strip()
