"""Everything nbcast, its workers and their kernels write under the home folder is
private to its user: after a publish, a run (its kernel writes the notebook and the
run context) and a delivery worker's renditions, no file or folder in the home is
readable by group or others — whatever the caller's umask was."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.notebooks import make_notebook

NBCAST = [sys.executable, "-m", "nbcast"]


def test_every_file_a_run_leaves_in_the_home_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "NBCAST_HOME": str(home)}
    env.pop("NBCAST_DATABASE_URL", None)
    path = make_notebook(
        tmp_path / "r.ipynb",
        body="open('written-by-the-kernel.txt', 'w').write(region)\nprint(region)",
        nbcast={"name": "r", "outputs": ["html", "csv"]},
    )
    previous = os.umask(0o022)  # a usual umask: nbcast must not depend on the caller's
    try:
        for argv in (
            ["publish", str(path)],
            ["run", "r"],
            ["worker", "--exit-when-idle", "--no-warm-kernels"],
            ["delivery-worker", "--exit-when-idle"],
            ["runs", "list"],
        ):
            done = subprocess.run(
                [*NBCAST, *argv], env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, (argv, done.stderr)
    finally:
        os.umask(previous)
    assert "SUCCEEDED" in done.stdout
    seen = list(home.rglob("*"))
    assert any(p.name == "nbcast.db" for p in seen)
    assert any("artifacts" in p.parts and p.is_file() for p in seen)
    exposed = [
        (str(p.relative_to(home)), oct(p.stat().st_mode & 0o777))
        for p in [home, *seen]
        if not p.is_symlink() and p.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    ]
    assert exposed == []
