"""Two runs' executed reports compared: the read behind ``nbcast runs diff A B``,
``GET /nbcast/api/v1/runs/{a}/diff/{b}``, the status page's comparison and the Lab's.

Both runs must be the caller's tenant's (another tenant's run is "no run", as
everywhere) and have an executed notebook; each is read bounded
(:func:`nbcast.views.run_files.run_notebook`). The comparison itself is
:func:`nbcast.views.output_diff.compare_outputs`. Any two runs may be compared —
two days of one report, a dry run of a new version against the live version's run of
the same slot (``nbcast run NAME --test --version N --slot KEY``, then ``runs diff``),
even two reports — and each side says which run, version, slot and parameters it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.artifacts import ArtifactStore
from nbcast.scheduler.runs import dry_run_slot
from nbcast.views.output_diff import OutputDiff, compare_outputs
from nbcast.views.run_files import NotebookUnavailable, run_notebook
from nbcast.views.runs import RunDetail

__all__ = ["ComparedRun", "RunComparison", "compare_runs"]


@dataclass(frozen=True, kw_only=True)
class ComparedRun:
    """One side of a comparison: which run, of what."""

    id: int
    definition: str
    version: int
    kind: str
    slot_key: str | None
    """Its slot — a dry run's, the slot it ran (its context's)."""
    parameters: dict[str, Any]

    @classmethod
    def of(cls, run: RunDetail) -> ComparedRun:
        slot = run.slot_key or dry_run_slot(run.kind, run.context)
        return cls(
            id=run.id,
            definition=run.definition,
            version=run.version,
            kind=run.kind,
            slot_key=slot,
            parameters=run.parameters,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "definition": self.definition,
            "version": self.version,
            "kind": self.kind,
            "slot_key": self.slot_key,
            "parameters": self.parameters,
        }

    def title(self) -> str:
        """``run 12: daily-sales v2, slot 2026-12-04T07:00``."""
        slot = f"slot {self.slot_key}" if self.slot_key else self.kind
        test = " (test)" if self.kind == "test" else ""
        return f"run {self.id}: {self.definition} v{self.version}, {slot}{test}"


@dataclass(frozen=True, kw_only=True)
class RunComparison:
    """Run ``a``'s report compared with run ``b``'s (``b`` is "after")."""

    a: ComparedRun
    b: ComparedRun
    diff: OutputDiff

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a.to_json(), "b": self.b.to_json(), **self.diff.to_json()}

    def lines(self) -> list[str]:
        """The comparison for a terminal."""
        head = [f"--- {self.a.title()}", f"+++ {self.b.title()}"]
        return head + self.diff.lines()


def compare_runs(
    session: Session, caller: Caller, a: int, b: int, store: ArtifactStore
) -> RunComparison:
    """Compare the executed reports of the caller's runs ``a`` and ``b`` (module
    docstring); :class:`~nbcast.views.run_files.NotebookUnavailable` when either has
    none to read."""
    sides = []
    for run_id in (a, b):
        detail, data = run_notebook(session, caller, run_id, store)
        try:
            notebook = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            raise NotebookUnavailable(
                f"the executed notebook of run {run_id} is not JSON"
            ) from None
        if not isinstance(notebook, dict):
            raise NotebookUnavailable(f"the executed notebook of run {run_id} is not a notebook")
        sides.append((ComparedRun.of(detail), notebook))
    (run_a, before), (run_b, after) = sides
    return RunComparison(a=run_a, b=run_b, diff=compare_outputs(before, after))
