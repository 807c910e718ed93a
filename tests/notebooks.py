"""Helpers that write small notebooks for tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def make_notebook(
    path: Path,
    parameters: str | None = 'region = "EMEA"\ntop_n = 5\n',
    body: str = "print(region)",
    nbcast: dict[str, Any] | None = None,
    extra_cells: list[dict[str, Any]] | None = None,
) -> Path:
    """Write a valid nbformat 4.5 notebook with an optional parameters cell."""
    cells: list[dict[str, Any]] = []
    if parameters is not None:
        cells.append(
            {
                "cell_type": "code",
                "id": "params",
                "metadata": {"tags": ["parameters"]},
                "source": parameters,
                "outputs": [],
                "execution_count": None,
            }
        )
    cells.append(
        {
            "cell_type": "code",
            "id": "body",
            "metadata": {},
            "source": body,
            "outputs": [],
            "execution_count": None,
        }
    )
    cells.extend(extra_cells or [])
    metadata: dict[str, Any] = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    }
    if nbcast is not None:
        metadata["nbcast"] = nbcast
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}, indent=1
        )
    )
    return path
