"""Execute one notebook run with papermill: the ``nbcast`` engine and the worker's entry point.

Users keep papermill's behaviour — the ``parameters`` cell convention, the
``injected-parameters`` cell, papermill metadata in the output notebook, the error
banner cells and :class:`~papermill.exceptions.PapermillExecutionError` — because
nbcast runs notebooks *through* ``papermill.execute_notebook``. What nbcast adds is a
papermill engine and a watchdog.

Design decisions:

- **The ``nbcast`` engine** (:class:`WarmKernelEngine`) is papermill's nbclient engine
  with three differences: its kernel comes from a
  :class:`~nbcast.executor.kernels.KernelPool` (engine kwarg ``kernel_pool=``) or is
  pre-acquired (``kernel=``); it runs ``setup_code`` silently (no history, nothing in
  the output notebook) before the first cell; and it connects to a pooled kernel with
  :func:`~nbcast.executor.kernels.wait_until_connected` instead of nbclient's
  ``wait_for_ready`` (no 0.2 s IOPub-silence wait). It is registered with papermill
  (``papermill_engines.register``) when this module is imported. It is deliberately
  *not* published as a ``papermill.engine`` entry point: papermill loads that group
  from inside its own import, so importing this module first would re-enter it half
  initialized; and the engine is only useful with a pool, which papermill's CLI
  cannot pass. The engine
  shuts a pooled kernel down after its run only if it acquired it: whoever acquired
  a kernel releases it.
- **Without a pool** the engine starts its own kernel the way papermill's nbclient
  engine does (nbclient owns, starts and shuts it down). nbcast passes a
  ``kernel_manager_class`` (an ``AsyncKernelManager`` subclass made per run) that
  starts the kernel with the kernel environment
  (:mod:`nbcast.executor.kernels.environment`), hands its process to the watchdog
  and runs ``setup_code`` — the same silent way as the pooled path.
- **No process-wide ``chdir``.** papermill's ``cwd=`` changes the *worker's* working
  directory for the whole run, which is wrong with several runs in threads. Instead
  the kernel changes directory: the warm path prepends ``os.chdir(cwd)`` to the
  setup code (the pooled kernel was started elsewhere), the cold path starts the
  kernel in ``cwd`` through nbclient's ``resources={"metadata": {"path": cwd}}``.
- **Watchdog** (:mod:`nbcast.executor.watchdog`). ``timeout_s`` (whole run, kernel
  start included) and ``cancel`` are watched by a thread. When either fires it
  interrupts the kernel (SIGINT, so the running cell records ``KeyboardInterrupt``
  and papermill saves the notebook as usual), waits
  :data:`~nbcast.executor.watchdog.INTERRUPT_GRACE_S`, then SIGKILLs the kernel's
  process group if the run has not ended. Before
  :func:`execute_notebook` raises :class:`~nbcast.errors.RunTimeoutError` or
  :class:`~nbcast.errors.RunCancelledError` the kernel process is killed and reaped,
  so none survives. A limit that passes while a pooled kernel is being acquired takes
  effect as soon as it is handed over (acquisition is bounded by ``start_timeout``).
  A run that ends after the watchdog fired is reported as timed out / cancelled even
  if its last cell happened to finish: the limit had passed.
- **Output limits** (:mod:`nbcast.executor.output_limits`). Both paths run on the
  ``nbcast`` engine's notebook client, which counts each cell's output as it arrives;
  past a limit the kernel is killed at once, the rest is dropped unread, and
  :func:`execute_notebook` raises
  :class:`~nbcast.errors.OutputTooLargeError`.
- **Errors.** A failing cell becomes :class:`~nbcast.errors.NotebookExecutionError`
  with papermill's fields; ``cell_index`` is papermill's, i.e. the index in the
  executed notebook (after the injected-parameters cell, before papermill's error
  banner cells). A failing ``setup_code`` raises :class:`~nbcast.errors.ExecutionError`.
  Anything else (a kernel that cannot start, ``TimeoutError`` from the pool) is
  raised unchanged.
- **The run's event loop is closed when the run ends.** nbclient's synchronous calls
  run on a per-thread asyncio loop that ``jupyter_core.utils.run_sync`` creates on
  first use and keeps in a context variable; nothing ever closes it, so every thread
  that ran a notebook left an open loop (an epoll and a socket pair, 3 fds) until the
  cyclic garbage collector found it — enough, with many short-lived attempt threads
  between collections, for "Too many open files". :func:`execute_notebook` closes a
  loop that was created during its run (:func:`_closing_run_loop`); a loop that
  existed before, or one still running, is left alone. The next run on the thread
  gets a new loop (``ensure_event_loop`` replaces a closed one).
- **Early exits.** A notebook that stops itself with ``sys.exit()`` / ``sys.exit(0)``
  succeeds in papermill with its later cells not executed; nbcast records where in the
  executed notebook's metadata and in :attr:`ExecutionResult.ended_early`
  (:mod:`nbcast.executor.early_exit`). A ``SystemExit`` with another code is an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import nbformat
import papermill
import zmq
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellExecutionComplete
from nbclient.util import ensure_async, run_hook, run_sync
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, papermill_engines
from papermill.exceptions import PapermillExecutionError
from papermill.log import logger as papermill_logger
from papermill.utils import merge_kwargs, remove_args

from nbcast.errors import (
    ExecutionError,
    NotebookExecutionError,
    OutputTooLargeError,
    RunCancelledError,
    RunTimeoutError,
)
from nbcast.executor.early_exit import record_early_exit
from nbcast.executor.kernels import (
    KernelPool,
    KernelProcess,
    PooledKernel,
    execute_silently,
    wait_until_connected,
)
from nbcast.executor.kernels.environment import kernel_environment
from nbcast.executor.output_limits import (
    OutputBudget,
    OutputLimits,
    SocketWatch,
)
from nbcast.executor.storable import without_surrogates
from nbcast.executor.watchdog import KernelUsage, RunWatchdog, StopReason

__all__ = [
    "ENGINE_NAME",
    "ExecutionResult",
    "WarmKernelEngine",
    "execute_notebook",
]

#: The name the engine is registered under with papermill.
ENGINE_NAME = "nbcast"


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionResult:
    """What one successful notebook run measured."""

    #: wall time of the whole run, kernel acquisition included
    duration_s: float
    #: seconds spent waiting for a kernel to start (0.0 for a warm pooled kernel)
    kernel_start_s: float
    #: the kernel came from the pool already warmed up
    warm: bool
    #: where papermill wrote the executed notebook
    output_path: str
    #: ``{"cell_index": i, "code": 0}`` when the notebook stopped itself with
    #: ``sys.exit()`` at cell ``i`` (:mod:`nbcast.executor.early_exit`), else None
    ended_early: dict[str, Any] | None = None


class _OutputGuard:
    """One run's output accounting (:mod:`nbcast.executor.output_limits`), shared by
    its notebook client and its watchdog."""

    def __init__(self, limits: OutputLimits, watchdog: RunWatchdog) -> None:
        self.limits = limits
        self.budget = OutputBudget(limits)
        self.watchdog = watchdog
        self.overflowed = False
        self._sockets: SocketWatch | None = None

    @property
    def dropping(self) -> bool:
        """Whether output is past its limit: later messages are dropped unread."""
        return self.overflowed or self.watchdog.reason is StopReason.output

    def watch(self, client: Any) -> None:
        """Watch the client's IOPub and shell sockets for oversized messages."""
        self._sockets = SocketWatch([client.iopub_channel.socket, client.shell_channel.socket])
        self.watchdog.watch_sockets(self._sockets)

    def overflow(self, why: str, cell_index: int) -> None:
        """Too much output: stop the kernel now."""
        self.overflowed = True
        self.watchdog.fire(StopReason.output, why, cell_index)

    def close(self) -> None:
        """Before the client's sockets close (they drop when the kernel stops): the
        kernel's usage is read one last time while it lives."""
        self.watchdog.sample()
        if self._sockets is not None:
            self.watchdog.settle_sockets()
            self._sockets.close()
            self._sockets = None


class _SetupNotebookClient(PapermillNotebookClient):  # type: ignore[misc]
    """papermill's notebook client, running ``setup_code`` silently before cell 0 and
    keeping the run's output within its limits (``guard``)."""

    def __init__(
        self,
        nb_man: Any,
        setup_code: str = "",
        guard: _OutputGuard | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(nb_man, **kwargs)
        self.nbcast_setup_code = setup_code
        self.nbcast_guard = guard

    async def async_start_new_kernel_client(self) -> Any:
        """Connect to the kernel, with sockets that refuse oversized messages; for a
        pooled kernel, without nbclient's 0.2 s IOPub wait."""
        self.kc = self.km.client()
        if self.nbcast_guard is not None:  # before any socket exists
            self.kc.context.setsockopt(zmq.MAXMSGSIZE, self.nbcast_guard.limits.message_bytes)
        self.kc.start_channels()
        try:
            if self.owns_km:
                await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))
            else:
                await wait_until_connected(self.kc, self.startup_timeout)
            if self.nbcast_guard is not None:
                self.nbcast_guard.watch(self.kc)
        except BaseException:
            if self.owns_km:
                await self._async_cleanup_kernel()
            else:
                self.kc.stop_channels()
                self.kc = None
            raise
        self.kc.allow_stdin = False
        await run_hook(self.on_notebook_start, notebook=self.nb)
        return self.kc

    # nbclient binds the synchronous twin to its own coroutine; rebind it to ours.
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    async def _async_cleanup_kernel(self) -> None:
        if self.nbcast_guard is not None:
            self.nbcast_guard.close()
        await super()._async_cleanup_kernel()

    _cleanup_kernel = run_sync(_async_cleanup_kernel)

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        """Count the message against the run's output limits before nbclient keeps it."""
        guard = self.nbcast_guard
        if guard is not None:
            # papermill writes the notebook as UTF-8, which has no lone surrogates.
            msg = {**msg, "content": without_surrogates(msg.get("content"))}
            if guard.dropping:
                content = msg.get("content") or {}
                if msg.get("msg_type") == "status" and content.get("execution_state") == "idle":
                    raise CellExecutionComplete()
                return None
            why = guard.budget.add(cell_index, msg)
            if why is not None:
                note = f"[nbcast] output stopped: {why}; the run was ended\n"
                cell.outputs.append(nbformat.v4.new_output("stream", name="stderr", text=note))
                # The kernel is killed; nbclient notices within a second (it polls
                # whether the kernel lives) and stops, dropping what is still queued.
                guard.overflow(why, cell_index)
                return None
        return super().process_message(msg, cell, cell_index)

    def papermill_execute_cells(self) -> None:
        """Run the setup code, then papermill's cell loop."""
        if self.nbcast_setup_code.strip():
            msg_id = self.kc.execute(
                self.nbcast_setup_code, silent=True, store_history=False, allow_stdin=False
            )
            reply = self.wait_for_reply(msg_id)
            if reply is None:
                raise ExecutionError("setup code timed out")
            content = reply["content"]
            if content.get("status") != "ok":
                raise ExecutionError(
                    f"setup code raised {content.get('ename', '?')}: {content.get('evalue', '')}"
                )
        super().papermill_execute_cells()


class WarmKernelEngine(NBClientEngine):  # type: ignore[misc]
    """papermill engine ``nbcast``: a pooled (or pre-acquired) kernel plus silent setup code.

    Engine kwargs, given to ``papermill.execute_notebook``:

    - ``kernel_pool``: a :class:`~nbcast.executor.kernels.KernelPool`; the engine
      acquires one kernel (``start_timeout`` bounds the wait) and shuts it down after.
    - ``kernel``: a :class:`~nbcast.executor.kernels.PooledKernel` acquired by the
      caller, who also releases it. Its kernelspec must be the notebook's.
    - ``on_kernel``: called with the pooled kernel before the run starts (nbcast's
      watchdog uses it).
    - ``setup_code``: kernel code run silently before the first cell.
    - ``output_guard``: the run's output accounting (nbcast's own runs pass one).

    With neither ``kernel_pool`` nor ``kernel`` it starts its own kernel, like
    papermill's nbclient engine, and still runs ``setup_code``.
    """

    @classmethod
    def execute_managed_notebook(
        cls,
        nb_man: Any,
        kernel_name: str,
        log_output: bool = False,
        stdout_file: Any = None,
        stderr_file: Any = None,
        start_timeout: float = 60,
        execution_timeout: float | None = None,
        kernel_pool: KernelPool | None = None,
        kernel: PooledKernel | None = None,
        on_kernel: Callable[[PooledKernel], None] | None = None,
        setup_code: str = "",
        output_guard: _OutputGuard | None = None,
        **kwargs: Any,
    ) -> Any:
        """Execute the notebook held by ``nb_man`` (papermill's engine contract)."""
        kwargs = remove_args(["input_path"], **kwargs)
        safe_kwargs = remove_args(["timeout", "startup_timeout"], **kwargs)
        final_kwargs = merge_kwargs(
            safe_kwargs,
            timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
            startup_timeout=start_timeout,
            kernel_name=kernel_name,
            log=papermill_logger,
            log_output=log_output,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
        )
        acquired: PooledKernel | None = None
        if kernel is None and kernel_pool is not None:
            kernel = acquired = kernel_pool.acquire(timeout=start_timeout, kernel_name=kernel_name)
        try:
            if kernel is not None:
                if kernel.kernel_name != kernel_name:
                    raise ValueError(
                        f"the notebook needs kernel {kernel_name!r}, "
                        f"the pooled kernel runs {kernel.kernel_name!r}"
                    )
                kernel.start_run()
                if on_kernel is not None:
                    on_kernel(kernel)
            client = _SetupNotebookClient(
                nb_man,
                km=kernel.manager if kernel is not None else None,
                setup_code=setup_code,
                guard=output_guard,
                **final_kwargs,
            )
            try:
                return client.execute()
            finally:
                if output_guard is not None:
                    output_guard.close()
                # nbclient leaves the client of a kernel it does not own connected.
                if kernel is not None and client.kc is not None:
                    client.kc.stop_channels()
                    client.kc = None
        finally:
            if acquired is not None:
                acquired.release()


papermill_engines.register(ENGINE_NAME, WarmKernelEngine)


def _run_kernel_manager_class(
    setup_code: str,
    start_timeout: float,
    on_process: Callable[[KernelProcess | None], None],
    on_ready: Callable[[float], None],
) -> type[AsyncKernelManager]:
    """An ``AsyncKernelManager`` for one cold run: reports its process, runs the setup code."""

    class RunKernelManager(AsyncKernelManager):
        """Kernel manager of one nbcast run on papermill's default engine."""

        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            began = time.monotonic()
            kw.setdefault("env", kernel_environment())
            await super().start_kernel(**kw)
            try:
                on_process(KernelProcess.of(self))
                client = self.client()
                client.start_channels()
                try:
                    await wait_until_connected(client, start_timeout)
                    on_ready(time.monotonic() - began)
                    if setup_code.strip():
                        await execute_silently(client, setup_code, timeout=None, what="setup code")
                finally:
                    client.stop_channels()
            except BaseException:
                # nbclient only cleans up kernels whose start succeeded.
                await self.shutdown_kernel(now=True)
                raise

    return RunKernelManager


@contextlib.contextmanager
def _closing_run_loop() -> Iterator[None]:
    """Close the thread's event loop that jupyter_core created during the block (module
    docstring), and put back what the thread had before, so its fds are freed now and
    not at the next garbage collection."""
    from jupyter_core import utils as jupyter_utils

    current: Any = getattr(jupyter_utils, "_loop", None)  # its per-thread ContextVar
    before = current.get() if current is not None else None
    try:
        yield
    finally:
        loop = current.get() if current is not None else None
        if loop is not None and loop is not before and not loop.is_running():
            if not loop.is_closed():
                loop.close()
            current.set(before)
            with contextlib.suppress(RuntimeError):
                if asyncio.get_event_loop_policy().get_event_loop() is loop:
                    asyncio.set_event_loop(before)


def _local_path(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return text if "://" in text else os.path.abspath(text)


def execute_notebook(
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    parameters: Mapping[str, Any],
    *,
    cwd: str,
    pool: KernelPool | None,
    kernel: PooledKernel | None = None,
    setup_code: str = "",
    timeout_s: float | None = None,
    cancel: threading.Event | None = None,
    start_timeout: float = 60,
    kernel_name: str | None = None,
    language: str | None = None,
    output_limits: OutputLimits | None = None,
    usage: KernelUsage | None = None,
) -> ExecutionResult:
    """Run one parameterized notebook with papermill and write the executed notebook.

    The kernel works in ``cwd``; ``setup_code`` runs silently in it before the first
    cell. ``kernel`` is one the caller acquired (and releases: a sandboxed kernel is
    acquired before its run folder is written); otherwise with a ``pool`` the kernel is
    a pooled one, else the engine starts one (engine ``nbcast`` each way).
    ``timeout_s`` limits the whole run and ``cancel`` may be set from another thread;
    either stops the kernel. ``output_limits`` bound
    the output it may send (default :class:`OutputLimits`'s); ``usage``, when given,
    receives what the kernel used (also when the run fails). ``kernel_name`` and
    ``language`` override the notebook's (papermill's own arguments).

    Raises :class:`~nbcast.errors.NotebookExecutionError` when a cell raises (the output
    notebook is written first, by papermill), :class:`~nbcast.errors.RunTimeoutError`,
    :class:`~nbcast.errors.RunCancelledError`,
    :class:`~nbcast.errors.OutputTooLargeError` (the notebook as far
    as it was kept is written), or :class:`~nbcast.errors.ExecutionError` when
    ``setup_code`` fails.
    """
    began = time.monotonic()
    if cancel is not None and cancel.is_set():
        raise RunCancelledError("the run was cancelled before it started")
    input_path = _local_path(input_path)
    output_path = _local_path(output_path)
    cwd = os.path.abspath(cwd)
    if not os.path.isdir(cwd):
        raise ExecutionError(f"the run directory {cwd} does not exist")
    watchdog = RunWatchdog(timeout_s, cancel, usage)
    guard = _OutputGuard(output_limits or OutputLimits(), watchdog)
    outcome: dict[str, Any] = {"warm": False, "kernel_start_s": 0.0}
    pooled: list[PooledKernel] = []

    def on_kernel(kernel: PooledKernel) -> None:
        pooled.append(kernel)
        outcome.update(warm=kernel.warm, kernel_start_s=kernel.wait_s)
        watchdog.attach(kernel.process)

    def on_ready(start_s: float) -> None:
        outcome.update(kernel_start_s=start_s)

    common: dict[str, Any] = {
        "parameters": dict(parameters),
        "report_mode": False,
        "progress_bar": False,
        "log_output": False,
        "start_timeout": start_timeout,
    }
    if kernel_name is not None:
        common["kernel_name"] = kernel_name
    if language is not None:
        common["language"] = language
    if pool is not None or kernel is not None:
        chdir = f"import os as _nbcast_os\n_nbcast_os.chdir({cwd!r})\ndel _nbcast_os\n"
        engine: dict[str, Any] = {
            "engine_name": ENGINE_NAME,
            "on_kernel": on_kernel,
            "setup_code": chdir + setup_code,
            "output_guard": guard,
        }
        if kernel is not None:
            engine["kernel"] = kernel
        else:
            engine["kernel_pool"] = pool
    else:
        engine = {
            "engine_name": ENGINE_NAME,
            "kernel_manager_class": _run_kernel_manager_class(
                setup_code, start_timeout, watchdog.attach, on_ready
            ),
            "resources": {"metadata": {"path": cwd}},
            "output_guard": guard,
        }

    failure: BaseException | None = None
    executed: Any = None
    with _closing_run_loop():
        try:
            executed = papermill.execute_notebook(input_path, output_path, **common, **engine)
        except BaseException as exc:
            failure = exc
        finally:
            process = watchdog.finish()
            if watchdog.reason is not None:
                # The engine (or nbclient) shut the kernel down politely; make sure it is gone.
                if process is not None:
                    process.kill()
                for kernel in pooled:
                    kernel.kill()

    if watchdog.reason is StopReason.timeout:
        raise RunTimeoutError(f"the run exceeded its time limit of {timeout_s}s") from failure
    if watchdog.reason is StopReason.cancel:
        raise RunCancelledError("the run was cancelled") from failure
    if watchdog.reason is StopReason.output:
        raise OutputTooLargeError(
            f"{watchdog.detail or 'too much output'} (at most {guard.limits.cell_bytes:,} "
            f"bytes per cell and {guard.limits.run_bytes:,} per run)",
            watchdog.cell_index,
        ) from failure
    if isinstance(failure, PapermillExecutionError):
        raise NotebookExecutionError(
            failure.cell_index, failure.ename, failure.evalue, tuple(failure.traceback or ())
        ) from failure
    if failure is not None:
        raise failure
    return ExecutionResult(
        duration_s=time.monotonic() - began,
        kernel_start_s=float(outcome["kernel_start_s"]),
        warm=bool(outcome["warm"]),
        output_path=output_path,
        ended_early=record_early_exit(executed, output_path),
    )
