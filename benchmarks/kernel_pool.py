"""Per-run wall time of a trivial pandas report: papermill CLI, papermill in-process, warm pool.

Run ``python benchmarks/kernel_pool.py`` (``--runs N``, default 10; ``--size N``, the
pool size, default 2). It writes a two-cell notebook to a temporary folder (a
``parameters`` cell ``n = 10`` and ``import pandas as pd; df = pd.DataFrame(...);
df.describe()``) and executes it ``runs`` times, one run after the other, by:

- ``papermill_cli``: the ``papermill`` command in a subprocess (interpreter start and
  imports included, as a cron job would pay them);
- ``papermill_in_process``: ``papermill.execute_notebook`` with its default engine;
- ``nbcast_no_pool``: :func:`nbcast.executor.notebook_runner.execute_notebook` with
  ``pool=None`` (papermill's default engine plus nbcast's watchdog and setup code);
- ``warm_pool``: the same with a :class:`~nbcast.executor.kernels.KernelPool`; between
  runs the benchmark waits (untimed) until the pool has refilled, i.e. runs that
  arrive further apart than a refill takes;
- ``warm_pool_back_to_back``: the same without that pause, so after the first
  ``size`` runs each run waits for a kernel still being prepared.

The in-process modes get one untimed run first, so one-time costs of the benchmark
process itself (importing papermill, matplotlib's font cache) are not counted. The
output is one JSON object: per-mode run times, their median/mean/min/max, and the
ratios of medians against ``warm_pool``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import papermill

from nbcast.executor.kernels import KernelPool
from nbcast.executor.notebook_runner import execute_notebook

BODY = 'import pandas as pd\ndf = pd.DataFrame({"x": range(n)})\ndf.describe()'


def make_notebook(folder: Path) -> Path:
    """Write the benchmark notebook into ``folder``; return its path."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    params = nbformat.v4.new_code_cell("n = 10")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(BODY)]
    path = folder / "report.ipynb"
    nbformat.write(nb, path)
    return path


def summary(times: list[float]) -> dict[str, Any]:
    """Median, mean, min and max of ``times``, plus the rounded runs themselves."""
    return {
        "median_s": round(statistics.median(times), 3),
        "mean_s": round(statistics.fmean(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
        "runs_s": [round(t, 3) for t in times],
    }


def timed(
    runs: int, once: Callable[[int], None], between: Callable[[], object] | None = None
) -> list[float]:
    """Wall time of ``runs`` sequential calls of ``once``; ``between`` runs untimed after each."""
    times = []
    for i in range(runs):
        began = time.perf_counter()
        once(i)
        times.append(time.perf_counter() - began)
        if between is not None:
            between()
    return times


def main() -> None:
    """Run every mode and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--size", type=int, default=2)
    args = parser.parse_args()
    cli = Path(sys.executable).parent / "papermill"

    with tempfile.TemporaryDirectory(prefix="nbcast-bench-") as tmp:
        folder = Path(tmp)
        source = make_notebook(folder)
        out = str(folder / "out.ipynb")
        results: dict[str, dict[str, Any]] = {}

        def run_cli(_: int) -> None:
            subprocess.run(
                [str(cli), str(source), out, "-p", "n", "10", "--no-progress-bar"],
                check=True,
                capture_output=True,
            )

        def run_papermill(_: int) -> None:
            papermill.execute_notebook(str(source), out, parameters={"n": 10}, progress_bar=False)

        def runner(pool: KernelPool | None, extra: list[dict[str, Any]]) -> Callable[[int], None]:
            def once(_: int) -> None:
                result = execute_notebook(source, out, {"n": 10}, cwd=tmp, pool=pool)
                extra.append(
                    {"warm": result.warm, "kernel_start_s": round(result.kernel_start_s, 3)}
                )

            return once

        results["papermill_cli"] = summary(timed(args.runs, run_cli))
        run_papermill(-1)
        results["papermill_in_process"] = summary(timed(args.runs, run_papermill))
        no_pool: list[dict[str, Any]] = []
        runner(None, [])(-1)
        results["nbcast_no_pool"] = summary(timed(args.runs, runner(None, no_pool)))

        with KernelPool(size=args.size) as pool:
            pool.wait_ready(120)
            runner(pool, [])(-1)
            pool.wait_ready(120)
            warm: list[dict[str, Any]] = []
            refilled = timed(args.runs, runner(pool, warm), lambda: pool.wait_ready(120))
            results["warm_pool"] = summary(refilled)
            results["warm_pool"]["kernels"] = warm
            back: list[dict[str, Any]] = []
            results["warm_pool_back_to_back"] = summary(timed(args.runs, runner(pool, back)))
            results["warm_pool_back_to_back"]["kernels"] = back

    base = results["warm_pool"]["median_s"]
    report = {
        "benchmark": "kernel_pool",
        "runs": args.runs,
        "pool_size": args.size,
        "python": sys.version.split()[0],
        "papermill": papermill.__version__,
        "modes": results,
        "ratios_vs_warm_pool": {
            mode: round(r["median_s"] / base, 2)
            for mode, r in results.items()
            if mode != "warm_pool"
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
