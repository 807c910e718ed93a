"""One attempt at a run, from a lease to an outcome — the same code on every engine.

:func:`execute_attempt` is a plain function of an :class:`AttemptJob` (picklable, so
Ray can ship it) that never touches the database: it writes the pinned version's
notebook into a fresh run folder, prepares the warehouse context the notebook's
``nbcast.warehouse`` reads (the tenant's connections and limits, and a usage file),
executes the notebook with papermill — on a pre-started kernel when a
:class:`~nbcast.executor.kernels.KernelPool` is given — under the run's timeout,
stores the executed notebook in the artifact store, and returns an
:class:`AttemptReport`. Recording the outcome is the worker's job, through the
fenced writes of :class:`~nbcast.executor.leases.Leases`, so an attempt whose lease
was lost in the meantime cannot complete its run whichever engine ran it.

The executed notebook is stored even when a cell fails, so the error can be read in
context.

Decisions:

- **Early exit = no results.** A notebook that stops itself with ``sys.exit()``,
  ``sys.exit(0)``, ``sys.exit(None)`` or ``raise SystemExit`` succeeds in papermill with
  its later cells not executed (:mod:`nbcast.executor.early_exit` quotes papermill's
  rule). The attempt stays SUCCEEDED — exiting is how a notebook says "nothing to report
  today" — but says so: the executed notebook's ``metadata["nbcast"]["ended_early"]``
  is ``{"cell_index": i, "code": 0}`` (written before the notebook is stored), the
  outcome's :attr:`AttemptReport.reason` is ``ended_early`` (the run's ``reason``
  column), and :func:`nbcast.delivery.tables.has_rows` is False for it, so
  ``only_if: results`` subscriptions are SUPPRESSED ``no_results``; the others still
  get the notebook as far as it ran. ``SystemExit`` with any other code (``sys.exit(3)``,
  ``sys.exit("why")``) is a failure like any raised exception
  (:class:`~nbcast.errors.NotebookExecutionError`, ename ``SystemExit``).
- **The report's own errors fail fast.** An exception raised by the notebook's code
  (a ``TypeError``, a ``KeyError`` on a renamed column) would be raised again by every
  attempt, so the run ends FAILED after one, with reason ``notebook_error`` — unless the
  version's ``retry_on`` names the exception (:func:`retried_error`: a flaky
  ``ConnectionError`` to a source worth another try), which then retries with the
  tenant's backoff up to ``max_attempts``. Infrastructure failures — the kernel died,
  the lease was lost, the worker is gone, the warehouse could not scope the run — are
  not the notebook's and keep retrying.
- **Permanent failures are not retried.** Before a kernel is started the attempt checks
  that the pinned notebook is a notebook, that the run's parameters validate against its
  parameters cell, and that its kernelspec is installed here
  (:mod:`nbcast.executor.preflight`). A failure of these — or ``NoSuchKernel`` raised
  later — is FAILED with :attr:`AttemptReport.retryable` False and a ``reason``
  (``invalid_notebook``, ``invalid_parameters``, ``no_such_kernel``), also kept in the
  error as ``error["reason"]`` and ``error["retryable"]``; the worker ends the run at
  once with that reason instead of retrying it.
- **Bounded, storable errors.** An error's ``evalue`` and each traceback entry are
  cut to :data:`MAX_ERROR_TEXT` characters, and the traceback to its last 20 entries:
  a cell that raises with a 100 MB message does not put 100 MB into two database
  rows. Everything taken from the kernel — the error's fields, the warehouse usage
  records — is made storable on both back ends (:mod:`nbcast.executor.storable`: NUL
  and lone surrogates replaced), so the database never refuses an outcome for what
  a report put in it.
- **Too much output** stops the run (:mod:`nbcast.executor.output_limits`): FAILED
  ``output_too_large``, not retried, with the notebook as far as it was kept.
- **The run folder is temporary.** Each attempt works in
  ``<work_dir>/run-<run>-attempt-<n>`` (the kernel's working directory: the input
  and output notebooks, the run context, the usage file, anything the report writes
  there). Once the executed notebook is in the artifact store and the usage is read,
  the folder is removed, whatever the outcome: the artifact store keeps what
  matters, and ``runs/`` does not grow with every run. A folder left by a worker that
  died mid-run is removed by the next worker to start there once it is older than
  :data:`STALE_RUN_FOLDER_S` (8 days: longer than any run may last)
  (:func:`sweep_run_folders`).
- **The run folder is private, whatever the umask.** It holds the tenant's warehouse
  connections and an executed report, and an attempt does not always run under the
  ``nbcast`` command's umask ``077`` (a Ray worker of an outside ``ray start`` has
  raylet's, usually ``022``). So the run folder and every missing parent of it (the
  home's ``runs/``) are created ``0700``, and the input and output notebooks, the run
  context and the usage file ``0600``, with explicit modes (:func:`_private_folder`,
  :func:`_write_private`); the output notebook is created empty before papermill
  writes it (an empty one is never stored). The kernel's setup code sets its umask
  to ``077``, so what the report itself writes is private too — as it is under the
  ``nbcast`` command, whose kernels inherit its umask.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbcast.artifacts import open_store
from nbcast.errors import (
    ConfigError,
    NotebookExecutionError,
    OutputTooLargeError,
    RunCancelledError,
    RunTimeoutError,
)
from nbcast.executor.preflight import PermanentFailure, check_attempt, permanent_reason
from nbcast.executor.storable import (
    KERNEL_SETUP,
    MAX_ERROR_TEXT,
    read_usage_file,
    storable_error,
    storable_text,
)
from nbcast.executor.watchdog import KernelUsage
from nbcast.sandbox.policy import SandboxSpec
from nbcast.scheduler.models import RunReason, RunState
from nbcast.warehouse.context import host_paths

__all__ = [
    "MAX_ERROR_TEXT",
    "STALE_RUN_FOLDER_S",
    "AttemptJob",
    "AttemptReport",
    "execute_attempt",
    "sweep_run_folders",
    "warehouse_context",
]

log = logging.getLogger(__name__)

STALE_RUN_FOLDER_S = 8 * 24 * 3600
"""Age (seconds since last modified) past which a left-over run folder is removed."""
_RUN_FOLDER = re.compile(r"run-\d+-attempt-\d+")

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
    run: dict[str, Any] | None = None
    """The run context the notebook reads with ``nbcast.context()``
    (:meth:`nbcast.executor.leases.Lease.run_context`)."""
    row_filter: dict[str, Any] | None = None
    """The run's recipient scope, applied by the warehouse to every query."""
    budget_bytes_left: int | None = None
    """Warehouse bytes the tenant's daily budget has left (None: no budget)."""
    sandbox: SandboxSpec | None = None
    """The sandbox the kernel runs in (None: the worker runs with ``--sandbox off``)."""
    retry_on: tuple[str, ...] = ()
    """Exception names of the report's own code worth another attempt
    (:func:`retried_error`)."""


@dataclass(frozen=True, kw_only=True)
class AttemptReport:
    """How an attempt ended, with what the worker records."""

    state: RunState
    duration_s: float
    kernel_start_s: float | None = None
    artifact_sha256: str | None = None
    error: dict[str, Any] | None = None
    usage: list[dict[str, Any]] = field(default_factory=list)
    host: str = ""
    reason: str | None = None
    """Why it ended so, when that is more than its state: ``ended_early`` on a success,
    a permanent failure's reason (:mod:`nbcast.executor.preflight`) on a failure."""
    retryable: bool = True
    """False for a failure no retry can fix: the run ends FAILED at once."""
    cpu_s: float | None = None
    """CPU seconds the kernel used (:class:`~nbcast.executor.watchdog.KernelUsage`)."""
    peak_mem_mb: float | None = None
    """The kernel's peak resident memory, MB."""


def job_connections(job: AttemptJob) -> dict[str, Any]:
    """The tenant's warehouse connections as the run may use them: scoped to its row
    filter; without any, the lake (``job.lake``, ``$NBCAST_LAKE`` or ``./lake``)."""
    configured = job.warehouse or {}
    connections = configured.get("connections")
    if not connections:
        lake = job.lake or os.environ.get("NBCAST_LAKE") or "lake"
        return {"default": {"kind": "parquet", "path": str(Path(lake).resolve())}}
    # Never an admin URL in a kernel; a scoped run's PostgreSQL connections log in as
    # the row filter's own role (row-level security), others it cannot scope are
    # withheld (nbcast.warehouse.rls).
    from nbcast.warehouse.rls import scoped_connections

    scoped: dict[str, Any] = scoped_connections(connections, job.row_filter)
    return scoped


def warehouse_context(
    job: AttemptJob, run_dir: Path, connections: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run context ``nbcast.warehouse`` reads inside the kernel: the tenant's
    connections as the run may use them (:func:`job_connections`, unless given), its
    limits (the day's budget left included) and its row filter."""
    configured = job.warehouse or {}
    if connections is None:
        connections = job_connections(job)
    limits = {**DEFAULT_LIMITS, **configured.get("limits", {})}
    if job.budget_bytes_left is not None:  # a query may not cross the day's budget
        limits["budget_bytes_left"] = max(0, int(job.budget_bytes_left))
    context: dict[str, Any] = {
        "run_id": job.run_id,
        "tenant": job.tenant,
        "connections": connections,
        "limits": limits,
        "usage_path": str(run_dir / "warehouse-usage.jsonl"),
    }
    if job.run is not None:
        context["run"] = job.run
    if job.row_filter:  # the recipient scope: every query of the run is filtered
        context["row_filter"] = dict(job.row_filter)
    return context


def _record_run(output: Path, run: dict[str, Any]) -> None:
    """The executed notebook records which run it is (``metadata.nbcast_run``): its
    context as the notebook saw it."""
    try:
        notebook = json.loads(output.read_text(encoding="utf-8"))
        notebook.setdefault("metadata", {})["nbcast_run"] = run
        output.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    except (OSError, ValueError, AttributeError):  # an unreadable notebook is stored as is
        pass


def _private_folder(folder: Path) -> None:
    """Create ``folder`` and its missing parents ``0700`` (module docstring).

    ``Path.mkdir(parents=True)`` would give the parents the umask's mode and
    ``mkdir``'s own mode is masked by it, hence one ``mkdir`` and ``chmod`` per folder.
    Existing parents are left as they are; ``folder`` itself is this attempt's, so it
    is made ``0700`` even if it exists.
    """
    missing: list[Path] = []
    current = folder
    while not os.path.lexists(current) and current.parent != current:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # another attempt made it meanwhile (and made it private)
            continue
        os.chmod(path, 0o700)
    os.chmod(folder, 0o700)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as a ``0600`` file (module docstring), never through a
    symbolic link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(fd, 0o600)
        handle.write(text)


def _setup_code(run_dir: Path, context_path: Path) -> str:
    # Runs silently in the kernel before the first cell (see nbcast.executor.kernels).
    return (
        "import os as _os\n"
        "_os.umask(0o077)\n"
        f"_os.chdir({str(run_dir)!r})\n"
        f"_os.environ['NBCAST_RUN_CONTEXT'] = {str(context_path)!r}\n"
        "del _os\n"
    ) + KERNEL_SETUP


def execute_attempt(
    job: AttemptJob, *, pool: Any = None, cancel: threading.Event | None = None
) -> AttemptReport:
    """Execute ``job`` (module docstring); never raises for notebook problems."""
    started = time.monotonic()
    run_dir = Path(job.work_dir) / f"run-{job.run_id}-attempt-{job.attempt}"
    _private_folder(run_dir)
    try:
        return _execute(job, run_dir, started, pool=pool, cancel=cancel)
    finally:
        _remove(run_dir)


def _execute(
    job: AttemptJob,
    run_dir: Path,
    started: float,
    *,
    pool: Any,
    cancel: threading.Event | None,
) -> AttemptReport:
    """:func:`execute_attempt` once the run folder exists (it removes it afterwards).

    A sandboxed attempt's kernel is acquired first: the kernel sees only its own run
    folder (the box's), so the run context and the usage file are written there, for
    the tenant's uid; the notebooks stay in ``run_dir``, which only the worker sees.
    """
    from nbcast.executor.notebook_runner import execute_notebook

    source = run_dir / "input.ipynb"
    output = run_dir / "output.ipynb"
    _write_private(source, job.notebook_json)
    _write_private(output, "")  # papermill rewrites it in place: it stays 0600
    state, error, kernel_start = RunState.SUCCEEDED, None, None
    used = KernelUsage()
    reason: str | None = None
    kernel: Any = None
    kernel_dir = run_dir
    owned_pool: Any = None
    context: dict[str, Any] = {"usage_path": str(run_dir / "warehouse-usage.jsonl")}
    env_before = os.environ.get("NBCAST_RUN_CONTEXT")
    try:
        kernel_name, language = check_attempt(job.notebook_json, job.parameters)
        connections = job_connections(job)
        if job.sandbox is not None:
            if pool is None:  # no warm kernels: a pool that keeps none, for this one
                from nbcast.executor.kernels import KernelPool

                pool = owned_pool = KernelPool(size=0, profiles=())
            # The kernel sees the tenant's lake scope: what its connections read.
            spec = dataclasses.replace(job.sandbox, readonly=tuple(host_paths(connections)))
            kernel = pool.acquire(timeout=job.timeout_s, kernel_name=kernel_name, sandbox=spec)
            kernel_dir = Path(kernel.box.folder)
        context = warehouse_context(job, kernel_dir, connections)
        context_path = kernel_dir / "run-context.json"
        for path, text in ((Path(context["usage_path"]), ""), (context_path, json.dumps(context))):
            _write_private(path, text)
            if kernel is not None:
                kernel.box.give(str(path))
        result = execute_notebook(
            str(source),
            str(output),
            job.parameters,
            cwd=str(kernel_dir),
            pool=pool,
            kernel=kernel,
            setup_code=_setup_code(kernel_dir, context_path),
            timeout_s=job.timeout_s,
            cancel=cancel,
            kernel_name=kernel_name,
            language=language,
            usage=used,
        )
        kernel_start = result.kernel_start_s
        if result.ended_early is not None:
            reason = RunReason.ended_early
    except PermanentFailure as exc:
        state, reason = RunState.FAILED, exc.reason
        error = _error(exc.ename, exc.evalue, ())
    except ConfigError as exc:  # the warehouse could not scope the run: try again later
        state, error = RunState.FAILED, _error(type(exc).__name__, str(exc), ())
    except NotebookExecutionError as exc:
        state = RunState.FAILED
        if not retried_error(exc.ename, job.retry_on):
            reason = RunReason.notebook_error
        error = {"cell_index": exc.cell_index, **_error(exc.ename, exc.evalue, exc.traceback)}
    except OutputTooLargeError as exc:
        state, reason = RunState.FAILED, RunReason.output_too_large
        error = {"cell_index": exc.cell_index, **_error(type(exc).__name__, str(exc), ())}
    except RunTimeoutError as exc:
        state, error = RunState.TIMED_OUT, {"message": str(exc)}
    except RunCancelledError as exc:
        state, error = RunState.CANCELLED, {"message": str(exc)}
    except Exception as exc:  # the kernel died, papermill broke: retryable, mostly
        state, reason = RunState.FAILED, permanent_reason(exc)
        error = _error(type(exc).__name__, str(exc), traceback.format_exception(exc))
    finally:
        if env_before is None:
            os.environ.pop("NBCAST_RUN_CONTEXT", None)
    try:
        usage = read_usage_file(Path(context["usage_path"]))
    finally:
        if kernel is not None:  # its sandbox ends: whatever the report left running too
            kernel.kill()
        if owned_pool is not None:
            owned_pool.close()
    written = _written(output)
    if written and job.run is not None:
        _record_run(output, job.run)
    sha = open_store(job.artifacts).put_file(output).sha256 if written else None
    import socket

    retryable = not (state is RunState.FAILED and reason is not None)
    if error is not None and not retryable:
        error.update(reason=reason, retryable=False)
    return AttemptReport(
        state=state,
        duration_s=time.monotonic() - started,
        kernel_start_s=kernel_start,
        artifact_sha256=sha,
        error=storable_error(error),
        usage=usage,
        host=socket.gethostname(),
        reason=reason,
        retryable=retryable,
        cpu_s=used.cpu_s,
        peak_mem_mb=used.peak_mem_mb,
    )


ALWAYS_RETRIED = frozenset({"BudgetExhausted"})
"""Exceptions raised in the kernel by nbcast's own code that are no fault of the report:
the tenant's daily warehouse budget is spent (the run waits for the next day's)."""


def retried_error(ename: str, retry_on: Sequence[str]) -> bool:
    """Whether the report's own exception ``ename`` (its class name as the kernel
    reports it) is one its definition retries: a name of ``retry_on``, or the last part
    of a dotted one (``requests.exceptions.Timeout`` names ``Timeout``). The kernel
    reports a class name only, so a listed base class does not cover its subclasses.
    :data:`ALWAYS_RETRIED` is retried whatever ``retry_on`` says."""
    name = ename.rsplit(".", 1)[-1]
    if name in ALWAYS_RETRIED:
        return True
    return any(name == listed.rsplit(".", 1)[-1] for listed in retry_on)


def _written(output: Path) -> bool:
    """Whether papermill wrote the output notebook (it is created empty beforehand)."""
    try:
        return output.stat().st_size > 0
    except OSError:
        return False


def _error(ename: str, evalue: str, trace: Sequence[str]) -> dict[str, Any]:
    """An error's fields, bounded and storable (module docstring)."""
    stored = storable_error({"ename": ename, "evalue": evalue, "traceback": list(trace)})
    assert stored is not None
    return stored


def sweep_run_folders(work_dir: str | os.PathLike[str], *, now: float | None = None) -> int:
    """Remove the run folders in ``work_dir`` that attempts left behind (their worker
    died) and nobody touched for :data:`STALE_RUN_FOLDER_S`; return how many."""
    current = time.time() if now is None else now
    removed = 0
    try:
        entries = list(os.scandir(work_dir))
    except OSError:
        return 0
    for entry in entries:
        if not _RUN_FOLDER.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            age = current - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if age > STALE_RUN_FOLDER_S:
            _remove(Path(entry.path))
            removed += 1
    return removed


def _remove(run_dir: Path) -> None:
    """Remove an attempt's run folder (module docstring); what cannot be removed (a
    file a leftover process of the report still writes) is logged and left."""
    shutil.rmtree(run_dir, ignore_errors=True)
    if run_dir.exists():
        log.warning("could not remove all of the run folder %s", storable_text(run_dir))
