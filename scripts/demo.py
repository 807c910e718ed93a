"""`make demo`: nbcast end to end on the embedded defaults, in a fresh home folder.

1. publishes every example report in ``notebooks/examples`` (copied to a workspace,
   as a data scientist's working copies),
2. edits one of them visibly and publishes it again (version 2),
3. prints the version list and the diff between the two versions,
4. executes one example once with papermill into the home folder,

and prints where everything is. It uses the ``nbcast`` command exactly as a person
would. The output folder is ``demo-output/`` (override with ``NBCAST_DEMO_DIR``); it
is recreated on every run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "notebooks" / "examples"
BIN = Path(sys.executable).parent


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def nbcast(*args: str, env: dict[str, str]) -> str:
    """Run the nbcast command, echo it and its output, fail the demo if it fails."""
    print(f"$ nbcast {' '.join(args)}", flush=True)
    done = subprocess.run(
        [str(BIN / "nbcast"), *args], env=env, text=True, capture_output=True, check=False
    )
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

    banner("execute one report with papermill")
    runs = home / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    executed = runs / "daily-sales-v2-executed.ipynb"
    nbcast(
        "export", "daily-sales", "--version", "2", "-o", str(runs / "daily-sales-v2.ipynb"), env=env
    )
    cmd = [
        str(BIN / "papermill"),
        str(runs / "daily-sales-v2.ipynb"),
        str(executed),
        "-p",
        "region",
        "EMEA",
        "--cwd",
        str(runs),
        "--log-level",
        "WARNING",
    ]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True)

    banner("where everything is")
    print(f"home folder (NBCAST_HOME): {home}")
    print(f"embedded database:         {home / 'nbcast.db'}")
    print(f"working copies:            {workspace}")
    print(f"executed notebook:         {executed}")
    print(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
