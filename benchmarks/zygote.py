"""Kernel start and trivial-report wall time: normal kernels vs kernels forked from a zygote.

Run ``python benchmarks/zygote.py`` (``--runs N``, default 10). Modes, each timed
``runs`` times one after the other, medians reported:

- ``kernel_start``: ``AsyncKernelManager.start_kernel()`` until the kernel answers one
  ``kernel_info_request`` (no IOPub flush), for a plain ``AsyncKernelManager`` and for
  :class:`~nbcast.executor.kernels.forked.ZygoteKernelManager`. Also the kernel process's own
  CPU time at that moment (``/proc/<pid>/stat``); a forked kernel's excludes the
  imports it inherited.
- ``papermill``: ``papermill.execute_notebook`` of a two-cell pandas notebook (a
  ``parameters`` cell ``n = 10`` and ``import pandas as pd; ...; df.describe()``) with
  its default kernel manager vs ``kernel_manager_class=ZygoteKernelManager``.

- ``throughput``: ``--parallel`` (default 8) kernels at once, each started, running
  ``import pandas`` and a ``DataFrame``, and shut down; runs per second.

Every mode gets one untimed run first (the zygote's own start-up, ~1 s, is reported
separately as ``zygote_start_s``: it is paid once per worker process). The output is
one JSON object with the per-run times, medians and the ratios normal / zygote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import papermill
from jupyter_client.manager import AsyncKernelManager

from nbcast.executor.kernels.forked import ZygoteKernelManager
from nbcast.executor.kernels.zygote import (
    DEFAULT_INTERPRETER_OPTIONS,
    default_zygote,
    shutdown_default_zygote,
)

BODY = 'import pandas as pd\ndf = pd.DataFrame({"x": range(n)})\ndf.describe()'
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def start_once(make: Callable[[], AsyncKernelManager]) -> tuple[float, float]:
    """Wall seconds until a new kernel answers ``kernel_info``, and its CPU seconds."""
    km = make()
    started = time.perf_counter()
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        msg_id = kc.kernel_info()
        while (await kc.get_shell_msg(timeout=60))["parent_header"].get("msg_id") != msg_id:
            pass
        wall = time.perf_counter() - started
        pid = getattr(km.provisioner, "pid", None)
        cpu = cpu_seconds(pid) if isinstance(pid, int) else float("nan")
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    return wall, cpu


async def series(make: Callable[[], AsyncKernelManager], runs: int) -> list[tuple[float, float]]:
    """``runs`` kernel starts, one after the other."""
    return [await start_once(make) for _ in range(runs)]


def summarize(walls: list[float], cpus: list[float] | None = None) -> dict[str, Any]:
    """Median plus the raw values (rounded) of one mode."""
    out: dict[str, Any] = {
        "median_s": round(statistics.median(walls), 4),
        "runs_s": [round(w, 4) for w in walls],
    }
    if cpus is not None:
        out["kernel_cpu_median_s"] = round(statistics.median(cpus), 4)
    return out


def bench_kernel_start(runs: int) -> dict[str, Any]:
    """Mode (a) and (b): kernel start until ``kernel_info``."""
    makers: dict[str, Callable[[], AsyncKernelManager]] = {
        "normal": lambda: AsyncKernelManager(kernel_name="python3"),
        "zygote": lambda: ZygoteKernelManager(kernel_name="python3"),
    }
    result: dict[str, Any] = {}
    for name, make in makers.items():
        asyncio.run(start_once(make))  # untimed warm-up

        samples = asyncio.run(series(make, runs))
        result[name] = summarize([w for w, _ in samples], [c for _, c in samples])
    result["ratio_normal_over_zygote"] = round(
        result["normal"]["median_s"] / result["zygote"]["median_s"], 2
    )
    return result


async def cycle(make: Callable[[], AsyncKernelManager]) -> None:
    """One short run: start a kernel, build a DataFrame in it, shut it down."""
    km = make()
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        code = BODY.replace("range(n)", "range(10)")
        reply = await kc.execute_interactive(code, output_hook=lambda msg: None, timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
        await km.shutdown_kernel()


def bench_throughput(parallel: int) -> dict[str, Any]:
    """Runs per second with ``parallel`` concurrent short runs, normal vs zygote."""
    makers: dict[str, Callable[[], AsyncKernelManager]] = {
        "normal": lambda: AsyncKernelManager(kernel_name="python3"),
        "zygote": lambda: ZygoteKernelManager(kernel_name="python3"),
    }
    result: dict[str, Any] = {"parallel": parallel}
    for name, make in makers.items():

        async def burst(make: Callable[[], AsyncKernelManager] = make) -> float:
            started = time.perf_counter()
            await asyncio.gather(*(cycle(make) for _ in range(parallel)))
            return time.perf_counter() - started

        asyncio.run(burst())  # untimed warm-up
        wall = asyncio.run(burst())
        result[name] = {"wall_s": round(wall, 3), "runs_per_s": round(parallel / wall, 2)}
    result["ratio_zygote_over_normal"] = round(
        result["zygote"]["runs_per_s"] / result["normal"]["runs_per_s"], 2
    )
    return result


def bench_papermill(runs: int, folder: Path) -> dict[str, Any]:
    """Mode (c): a trivial pandas notebook through papermill, default vs zygote."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Py"}
    nb.cells = [
        nbformat.v4.new_code_cell("n = 10", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(BODY),
    ]
    source = folder / "report.ipynb"
    nbformat.write(nb, source)
    modes: dict[str, dict[str, Any]] = {
        "default": {},
        "zygote": {"kernel_manager_class": ZygoteKernelManager},
    }
    result: dict[str, Any] = {}
    for name, extra in modes.items():
        walls = []
        for i in range(runs + 1):
            started = time.perf_counter()
            papermill.execute_notebook(
                str(source),
                str(folder / f"out-{name}-{i}.ipynb"),
                parameters={"n": 10 + i},
                progress_bar=False,
                **extra,
            )
            walls.append(time.perf_counter() - started)
        result[name] = summarize(walls[1:])  # the first run is the warm-up
    result["ratio_default_over_zygote"] = round(
        result["default"]["median_s"] / result["zygote"]["median_s"], 2
    )
    return result


def main() -> None:
    """Run the benchmark and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=8)
    args = parser.parse_args()
    started = time.perf_counter()
    zygote = default_zygote(DEFAULT_INTERPRETER_OPTIONS)
    report: dict[str, Any] = {
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "zygote_start_s": round(time.perf_counter() - started, 3),
        "zygote_threads_after_preload": zygote.info.get("threads"),
    }
    try:
        report["kernel_start"] = bench_kernel_start(args.runs)
        with tempfile.TemporaryDirectory() as tmp:
            report["papermill"] = bench_papermill(args.runs, Path(tmp))
        report["throughput"] = bench_throughput(args.parallel)
    finally:
        shutdown_default_zygote()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
