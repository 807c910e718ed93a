"""`make demo`: nbcast end to end on the embedded defaults, in a fresh home folder.

1. publishes every example report in ``notebooks/examples`` (copied to a workspace,
   as a data scientist's working copies),
2. edits one of them visibly and publishes it again (version 2),
3. prints the version list and the diff between the two versions,
4. previews the data-quality report's schedule across the New York fall-back
   (2026-11-01, when 01:00-02:00 happens twice),
5. runs the scheduler over those days with ``nbcast scheduler tick`` and lists the
   slots it recorded,
6. runs the queued reports through ``nbcast worker --engine ray`` (a local Ray),
   each executed with papermill on a pre-started kernel, and copies the executed
   notebooks out of the content-addressed artifact store,

and prints where everything is. It uses the ``nbcast`` command exactly as a person
would. So that it always crosses a DST change, the demo runs on nbcast's injectable
clock (``NBCAST_CLOCK=fixed:…``): the reports are published on 2026-10-30 and the
scheduler ticks hourly through 2026-11-02. The output folder is ``demo-output/``
(override with ``NBCAST_DEMO_DIR``); it is recreated on every run.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "notebooks" / "examples"
BIN = Path(sys.executable).parent
PUBLISHED = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
TICKS_UNTIL = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def nbcast(*args: str, env: dict[str, str], echo: bool = True) -> str:
    """Run the nbcast command, echo it and its output, fail the demo if it fails."""
    if echo:
        print(f"$ nbcast {' '.join(args)}", flush=True)
    done = subprocess.run(
        [str(BIN / "nbcast"), *args], env=env, text=True, capture_output=True, check=False
    )
    if echo:
        sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"demo failed: nbcast {' '.join(args)} exited {done.returncode}")
    return done.stdout


def edit_daily_sales(path: Path) -> None:
    """A reviewer-visible change: a new default and a new narrative cell."""
    nb = json.loads(path.read_text())
    params = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    source = "".join(params["source"])
    params["source"] = source.replace("top_n = 10", "top_n = 5")
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

    banner("publish the example reports")
    notebooks = sorted(EXAMPLES.glob("*.ipynb"))
    for source in notebooks:
        shutil.copy(source, workspace / source.name)
        nbcast("publish", str(workspace / source.name), "-m", "initial version", env=env)
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
    nbcast("schedule", "preview", "--cron", "0 */4 * * *", "--tz", "America/New_York",
           "--from", "2026-10-31T12:00:00Z", "--to", "2026-11-02T00:00:00Z", env=env)
    nbcast("schedule", "preview", "--cron", "*/30 1 * * *", "--tz", "America/New_York",
           "--dst-fold", "both",
           "--from", "2026-11-01T04:00:00Z", "--to", "2026-11-01T07:00:00Z", env=env)

    banner("run the scheduler hourly from 2026-10-30 to 2026-11-02 (nbcast scheduler tick)")
    # The same command, run in this process 72 times to save 72 interpreter starts.
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
        total += json.loads(captured.getvalue())["slots"]
    env["NBCAST_CLOCK"] = f"fixed:{iso(tick)}"
    print(f"{total} slots materialized by {int((TICKS_UNTIL - PUBLISHED) / timedelta(hours=1))}"
          " hourly ticks")
    nbcast("runs", "list", "--definition", "data-quality", env=env)
    nbcast("runs", "list", "--state", "QUEUED", env=env)

    banner("run the queued reports on Ray (nbcast worker --engine ray)")
    worker_env = {k: v for k, v in env.items() if k != "NBCAST_CLOCK"}  # the real clock
    worker_env.setdefault("NBCAST_RAY_TEMP_DIR", f"/tmp/nbcast-demo-ray-{os.getpid()}")
    worker_env["RAY_USAGE_STATS_ENABLED"] = "0"
    nbcast("worker", "--engine", "ray", "--concurrency", "2", "--exit-when-idle",
           env=worker_env)
    runs = json.loads(nbcast("runs", "list", "--json", env=worker_env, echo=False))
    nbcast("runs", "list", "--state", "SUCCEEDED", env=worker_env)
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

    banner("where everything is")
    print(f"home folder (NBCAST_HOME): {home}")
    print(f"embedded database:         {home / 'nbcast.db'}")
    print(f"working copies:            {workspace}")
    print(f"artifact store:            {home / 'artifacts'}")
    for path in executed:
        print(f"executed notebook:         {path}")
    print(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
