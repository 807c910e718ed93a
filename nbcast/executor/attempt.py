"""One attempt at a run, from a lease to an outcome — the same code on every engine.

:func:`execute_attempt` is a plain function of an :class:`AttemptJob` (picklable, so
Ray can ship it) that never touches the database: it writes the pinned version's
notebook into a fresh run folder, prepares the warehouse context the notebook's
``nbcast.warehouse`` reads (the tenant's connections and limits, and a usage file),
executes the notebook with papermill — on a pre-started kernel when a
:class:`~nbcast.executor.kernels.KernelPool` is given — under the run's timeout,
stores the executed notebook in the artifact store, and returns an
:class:`AttemptOutcome`. Recording the outcome is the worker's job, through the
fenced writes of :class:`~nbcast.executor.queue.RunQueue`, so an attempt whose lease
was lost in the meantime cannot complete its run whichever engine ran it.

The executed notebook is stored even when a cell fails, so the error can be read in
context.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbcast.artifacts import open_store
from nbcast.errors import NotebookExecutionError, RunCancelledError, RunTimeoutError
from nbcast.executor.models import RunState

__all__ = ["AttemptJob", "AttemptOutcome", "execute_attempt", "warehouse_context"]

DEFAULT_LIMITS = {"timeout_s": 60, "max_rows": 1_000_000, "max_bytes": 256 * 1024 * 1024}


@dataclass(frozen=True, kw_only=True)
class AttemptJob:
    """Everything an engine needs to execute one attempt (no database handles)."""

    run_id: int
    attempt: int
    tenant: str
    definition: str
    label: str
    notebook_json: str
    parameters: dict[str, Any]
    timeout_s: float
    work_dir: str
    artifacts: str
    warehouse: dict[str, Any] | None = None
    lake: str | None = None


@dataclass(frozen=True, kw_only=True)
class AttemptOutcome:
    """How an attempt ended, with what the worker records."""

    state: RunState
    duration_s: float
    kernel_start_s: float | None = None
    artifact_sha256: str | None = None
    error: dict[str, Any] | None = None
    usage: list[dict[str, Any]] = field(default_factory=list)
    host: str = ""


def warehouse_context(job: AttemptJob, run_dir: Path) -> dict[str, Any]:
    """The run context ``nbcast.warehouse`` reads inside the kernel."""
    configured = job.warehouse or {}
    connections = configured.get("connections")
    if not connections:
        lake = job.lake or os.environ.get("NBCAST_LAKE") or "lake"
        connections = {"default": {"kind": "parquet", "path": str(Path(lake).resolve())}}
    limits = {**DEFAULT_LIMITS, **configured.get("limits", {})}
    return {
        "run_id": job.run_id,
        "tenant": job.tenant,
        "connections": connections,
        "limits": limits,
        "usage_path": str(run_dir / "warehouse-usage.jsonl"),
    }


def _setup_code(run_dir: Path, context_path: Path) -> str:
    # Runs silently in the kernel before the first cell (see nbcast.executor.kernels).
    return (
        "import os as _os\n"
        f"_os.chdir({str(run_dir)!r})\n"
        f"_os.environ['NBCAST_RUN_CONTEXT'] = {str(context_path)!r}\n"
        "del _os\n"
    )


def _usage(path: Path) -> list[dict[str, Any]]:
    # read_usage skips a half-written last line (a kernel killed mid-write).
    from nbcast.warehouse import read_usage

    if not path.exists():
        return []
    return [item.to_json() for item in read_usage(path)]


def execute_attempt(
    job: AttemptJob, *, pool: Any = None, cancel: threading.Event | None = None
) -> AttemptOutcome:
    """Execute ``job`` (module docstring); never raises for notebook problems."""
    from nbcast.executor.notebook_runner import execute_notebook

    started = time.monotonic()
    run_dir = Path(job.work_dir) / f"run-{job.run_id}-attempt-{job.attempt}"
    run_dir.mkdir(parents=True, exist_ok=True)
    source = run_dir / "input.ipynb"
    output = run_dir / "output.ipynb"
    source.write_text(job.notebook_json, encoding="utf-8")
    context_path = run_dir / "run-context.json"
    context = warehouse_context(job, run_dir)
    context_path.write_text(json.dumps(context), encoding="utf-8")
    env_before = os.environ.get("NBCAST_RUN_CONTEXT")
    state, error, kernel_start = RunState.SUCCEEDED, None, None
    try:
        result = execute_notebook(
            str(source),
            str(output),
            job.parameters,
            cwd=str(run_dir),
            pool=pool,
            setup_code=_setup_code(run_dir, context_path),
            timeout_s=job.timeout_s,
            cancel=cancel,
        )
        kernel_start = result.kernel_start_s
    except NotebookExecutionError as exc:
        state = RunState.FAILED
        error = {
            "cell_index": exc.cell_index,
            "ename": exc.ename,
            "evalue": exc.evalue,
            "traceback": list(exc.traceback)[-20:],
        }
    except RunTimeoutError as exc:
        state, error = RunState.TIMED_OUT, {"message": str(exc)}
    except RunCancelledError as exc:
        state, error = RunState.CANCELLED, {"message": str(exc)}
    except Exception as exc:  # the kernel died, papermill broke: retryable
        state = RunState.FAILED
        error = {
            "ename": type(exc).__name__,
            "evalue": str(exc),
            "traceback": traceback.format_exception(exc)[-20:],
        }
    finally:
        if env_before is None:
            os.environ.pop("NBCAST_RUN_CONTEXT", None)
    sha = None
    if output.exists():
        sha = open_store(job.artifacts).put_file(output).sha256
    import socket

    return AttemptOutcome(
        state=state,
        duration_s=time.monotonic() - started,
        kernel_start_s=kernel_start,
        artifact_sha256=sha,
        error=error,
        usage=_usage(Path(context["usage_path"])),
        host=socket.gethostname(),
    )
