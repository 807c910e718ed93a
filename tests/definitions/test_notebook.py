"""Reading, normalizing and hashing notebooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcast.definitions.notebook import (
    load_notebook,
    normalize_notebook,
    notebook_sha256,
    parameters_cell,
)
from nbcast.errors import NotebookError
from tests.notebooks import make_notebook


def _executed(path: Path) -> Path:
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            cell["execution_count"] = i + 1
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
            cell["metadata"]["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.7"}
    out = path.with_name("executed.ipynb")
    out.write_text(json.dumps(nb))
    return out


def test_outputs_counts_and_volatile_metadata_do_not_change_the_hash(tmp_path: Path) -> None:
    clean = make_notebook(tmp_path / "r.ipynb")
    a = normalize_notebook(load_notebook(clean).notebook)
    b = normalize_notebook(load_notebook(_executed(clean)).notebook)
    assert a == b
    assert notebook_sha256(a) == notebook_sha256(b)
    assert all(c.get("outputs", []) == [] for c in b["cells"])
    assert "language_info" not in b["metadata"]


def test_source_changes_change_the_hash(tmp_path: Path) -> None:
    a = normalize_notebook(load_notebook(make_notebook(tmp_path / "a.ipynb")).notebook)
    b = normalize_notebook(
        load_notebook(make_notebook(tmp_path / "b.ipynb", body="print(region * 2)")).notebook
    )
    assert notebook_sha256(a) != notebook_sha256(b)


def test_normalizing_is_idempotent_and_gives_missing_ids_deterministically(
    tmp_path: Path,
) -> None:
    path = make_notebook(tmp_path / "old.ipynb")
    nb = json.loads(path.read_text())
    nb["nbformat_minor"] = 4
    for cell in nb["cells"]:
        del cell["id"]
    path.write_text(json.dumps(nb))
    first = normalize_notebook(load_notebook(path).notebook)
    second = normalize_notebook(load_notebook(path).notebook)
    assert first == second == normalize_notebook(first)
    assert all(cell["id"].startswith("nbcast-") for cell in first["cells"])
    assert first["nbformat_minor"] == 5


def test_parameters_cell_is_found() -> None:
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# Title"},
            {
                "cell_type": "code",
                "metadata": {"tags": ["x", "parameters"]},
                "source": ["a = 1\n", "b = 2"],
            },
        ]
    }
    assert parameters_cell(nb) == (1, "a = 1\nb = 2")
    assert parameters_cell({"cells": []}) is None


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        pytest.param(
            [{"cell_type": "markdown", "metadata": {"tags": ["parameters"]}, "source": "x = 1"}],
            "markdown cell tagged 'parameters'",
            id="markdown",
        ),
        pytest.param(
            [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": ""}] * 2,
            "are all tagged 'parameters'",
            id="two",
        ),
    ],
)
def test_bad_parameter_tags(cells: list[dict[str, object]], message: str) -> None:
    with pytest.raises(NotebookError, match=message):
        parameters_cell({"cells": cells})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param('{"hello": "world"}', "not a Jupyter notebook", id="not-notebook"),
        pytest.param(
            '{"cells": [{"cell_type": "code"}], "metadata": {}, "nbformat": 4, '
            '"nbformat_minor": 5}',
            "not a valid notebook",
            id="invalid-cell",
        ),
        pytest.param(
            '{"cells": [], "metadata": {}, "nbformat": 3, "nbformat_minor": 0}',
            "nbformat 3 is not supported",
            id="v3",
        ),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_text(content)
    with pytest.raises(NotebookError, match=message):
        load_notebook(path)


def test_side_file_holds_the_block(tmp_path: Path) -> None:
    path = make_notebook(tmp_path / "r.ipynb")
    (tmp_path / "r.nbcast.toml").write_text('name = "side"\n[schedule]\ncron = "0 7 * * *"\n')
    loaded = load_notebook(path)
    assert loaded.block == {"name": "side", "schedule": {"cron": "0 7 * * *"}}
    assert loaded.block_source == "r.nbcast.toml"
    both = make_notebook(tmp_path / "r.ipynb", nbcast={"name": "meta"})
    with pytest.raises(NotebookError, match="keep one"):
        load_notebook(both)
