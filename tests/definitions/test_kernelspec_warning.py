"""``nbcast publish`` of a notebook whose kernelspec is not installed where nbcast runs
publishes it (workers elsewhere may have the kernel) and warns: one ``warning:`` line
on stderr, and the same text in ``--json``'s ``warnings`` (issue 9, finding 14).

Run through the real CLI in a subprocess, so stdout and stderr are the process's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.notebooks import make_notebook

pytestmark = pytest.mark.timeout(120)

MISSING = "nbcast-test-no-such-kernel"
WARNING = (
    f"warning: kernel {MISSING!r} is not installed here (jupyter kernelspec list); runs on "
    "this machine will fail until it is"
)


def notebook(tmp_path: Path, name: str, kernel: str) -> Path:
    path = make_notebook(tmp_path / f"{name}.ipynb", nbcast={"name": name})
    raw = json.loads(path.read_text())
    raw["metadata"]["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    path.write_text(json.dumps(raw))
    return path


def nbcast(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbcast", *argv],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=90,
    )


def published(name: str) -> list[int]:
    done = nbcast("versions", name, "--json")
    assert done.returncode == 0, done.stderr
    return [int(v["version"]) for v in json.loads(done.stdout)]


def test_a_missing_kernel_is_published_with_one_warning_line(tmp_path: Path) -> None:
    done = nbcast("publish", str(notebook(tmp_path, "elsewhere", MISSING)))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [WARNING]
    assert done.stdout.startswith("published elsewhere v1 ")
    assert published("elsewhere") == [1]


def test_the_json_output_carries_the_warning(tmp_path: Path) -> None:
    done = nbcast("publish", "--json", str(notebook(tmp_path, "elsewhere", MISSING)))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # the warning goes to stderr, never into the JSON
    assert result["warnings"] == [WARNING.removeprefix("warning: ")]
    assert (result["definition"], result["version"], result["created"]) == ("elsewhere", 1, True)
    assert done.stderr.splitlines() == [WARNING]


def test_an_installed_kernel_gives_no_warning(tmp_path: Path) -> None:
    done = nbcast("publish", "--json", str(notebook(tmp_path, "here", "python3")))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warnings"] == []
    assert "warning" not in done.stderr


def test_the_check_is_against_the_kernelspecs_installed_where_nbcast_runs(
    tmp_path: Path,
) -> None:
    """The same notebook publishes without a warning once its kernelspec is installed
    (here through ``JUPYTER_PATH``), with it when it is not."""
    path = notebook(tmp_path, "elsewhere", MISSING)
    spec = tmp_path / "jupyter" / "kernels" / MISSING
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": MISSING,
                "language": "python",
            }
        )
    )
    installed = nbcast(
        "publish", "--json", str(path), env={"JUPYTER_PATH": str(tmp_path / "jupyter")}
    )
    assert installed.returncode == 0, installed.stderr
    assert json.loads(installed.stdout)["warnings"] == []
    assert "warning" not in installed.stderr
    path.write_text(path.read_text().replace("print(region)", "print(region * 2)"))
    missing = nbcast("publish", "--json", str(path))
    assert missing.returncode == 0, missing.stderr
    assert json.loads(missing.stdout)["warnings"] == [WARNING.removeprefix("warning: ")]
    assert published("elsewhere") == [1, 2]
