"""The extension ships prebuilt: ``pip install .`` of a built tree (pip itself, in a
plain venv), and the wheel made from it, with no Node.js on ``PATH``, give a JupyterLab
that lists nbcast's extension enabled — the files under ``share/jupyter/labextensions/nbcast``,
not a second copy inside the package.

The clean venv gets nbcast without its dependencies and jupyterlab (from uv's cache):
what is tested is the extension's install, not nbcast's dependency tree, which the
rest of the suite uses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BUILT = ROOT / "nbcast" / "labextension"


def _no_node_path(folder: Path) -> str:
    """A PATH of the venv's tools and the system's, without node, npm, npx or yarn."""
    tools = folder / "tools"
    tools.mkdir()
    for name in ("sh", "bash", "git", "cp", "ls", "cat", "env", "uname", "rm", "mkdir"):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    return str(tools)


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def clean_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    if not (BUILT / "package.json").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("the labextension is not built (make labextension)")
        pytest.skip("the labextension is not built (make labextension)")
    folder = tmp_path_factory.mktemp("clean-install")
    # The process's environment (the package index, its certificates, uv's cache),
    # with a PATH that has no Node.js and scratch Jupyter folders.
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "VIRTUAL_ENV"))},
        "PATH": f"{folder / 'venv' / 'bin'}:{_no_node_path(folder)}",
        "JUPYTER_CONFIG_DIR": str(folder / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(folder / "jupyter-data"),
    }
    assert shutil.which("node", path=env["PATH"]) is None
    # A plain venv, with pip in it (what a user has); jupyterlab comes from uv's cache.
    _run([sys.executable, "-m", "venv", str(folder / "venv")], env, folder)
    return folder, env


def test_pip_install_of_the_tree_gives_an_enabled_extension_without_node(
    clean_env: tuple[Path, dict[str, str]],
) -> None:
    folder, env = clean_env
    python = str(folder / "venv" / "bin" / "python")
    _run([str(BIN / "uv"), "pip", "install", "--quiet", "--python", python, "jupyterlab>=4.6,<5"],
         env, folder)  # fmt: skip
    # `pip install .` itself: pip builds the wheel (hatchling and the jupyter-builder
    # hook in an isolated build environment), with no Node.js to be found.
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(ROOT)], env, folder)
    share = folder / "venv" / "share" / "jupyter" / "labextensions" / "nbcast"
    assert (share / "package.json").exists()
    assert (share / "install.json").exists()
    assert (share / "schemas" / "nbcast" / "plugin.json").exists()
    assert list((share / "static").glob("remoteEntry.*.js"))
    listing = _run([str(folder / "venv" / "bin" / "jupyter"), "labextension", "list"], env, folder)
    assert "nbcast v0.1.0 enabled OK (python, nbcast)" in listing.replace("\x1b[32m", "").replace(
        "\x1b[0m", ""
    )


def test_the_wheel_carries_the_extension_once(
    clean_env: tuple[Path, dict[str, str]],
) -> None:
    folder, env = clean_env
    out = folder / "dist"
    _run([str(BIN / "uv"), "build", "--wheel", "--quiet", "--out-dir", str(out), str(ROOT)],
         env, folder)  # fmt: skip
    [wheel] = out.glob("nbcast-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    prefix = "nbcast-0.1.0.data/data/share/jupyter/labextensions/nbcast/"
    assert f"{prefix}package.json" in names
    assert f"{prefix}install.json" in names
    assert any(n.startswith(f"{prefix}static/remoteEntry.") for n in names)
    assert not [n for n in names if n.startswith("nbcast/labextension/")]
    assert not [n for n in names if "node_modules" in n or n.endswith(".ts")]
