"""``POST /notebooks/check`` under load, side by side with its reference. Prints JSON.

The figure (issue 20, item 7): six concurrent 30 MB check requests leave the server
under 500 MB RSS and another tenant's ``GET /nbcast/api/v1/definitions`` p99 under
200 ms.

A real ``nbcast serve`` on PostgreSQL, with two tenants: ``acme``, whose six authors
send checks, and ``globex``, whose viewer lists its 20 definitions. The victim's
``GET /definitions`` latency (one request every 20 ms, keep-alive, from this process)
and the server's resident memory (``/proc/<pid>/status``: ``VmRSS`` sampled every
20 ms, alone and with its children's — a heavy check runs in a child process — and
the ``VmHWM`` high-water mark) are measured in three phases, each the same number of
victim requests:

1. ``reference``: no check load;
2. ``checks_30mb``: six clients (one per author, in a process of their own) each
   sending a 30 MB notebook (code cells, no outputs) again and again, without pause —
   refused by its declared size before the server keeps any of it (413; two bodies
   at a time read and dropped so their clients get the answer, the others answered
   at once and their connections closed: status 0 below);
3. ``checks_under_cap``: the same six clients sending notebooks just under the size
   cap (8 MiB by default): admitted as heavy checks, at most one in flight per user
   and four per server, checked one at a time in a child process; the rest 429.

For each phase: the victim's p50/p99, the server's peak RSS, the checks answered by
status. Targets: peak RSS < 500 MB, victim p99 < 200 ms under load.

Usage: ``python -m benchmarks.check_load [--requests N] [--body-mb MB]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import machine_load, scratch_database

REPO = Path(__file__).resolve().parents[1]
AUTHORS = tuple(f"author{i}" for i in range(1, 7))
VICTIM = "viewer"
DEFINITIONS = 20
CHECK = "/nbcast/api/v1/notebooks/check"
RSS_TARGET_MB = 500
P99_TARGET_MS = 200


# -- notebooks ---------------------------------------------------------------------------


def _code_lines() -> list[str]:
    """Lines of real Python (nbcast's own source) for notebooks of any size."""
    lines: list[str] = []
    for path in sorted((REPO / "nbcast").rglob("*.py")):
        lines.extend(path.read_text().splitlines(keepends=True))
    return lines


def check_body(size: int, lines: list[str]) -> bytes:
    """A check request of about ``size`` bytes: a notebook of 40-line code cells."""
    cells: list[dict[str, Any]] = []
    total, at = 0, 0
    while total < size - 2_000:
        source = lines[at : at + 40] or lines[:40]
        at = (at + 40) % max(1, len(lines) - 40)
        cell = {
            "cell_type": "code",
            "id": f"c{len(cells)}",
            "metadata": {},
            "source": source,
            "outputs": [],
            "execution_count": None,
        }
        total += len(json.dumps(cell)) + 2
        cells.append(cell)
    notebook = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "nbcast": {"name": "big"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps({"notebook": notebook, "path": "big.ipynb"}).encode()


# -- the check load, in a process of its own -------------------------------------------


def _load(url: str, tokens: list[str], body: bytes, stop: Any, out: Any) -> None:
    """One client per token, each sending ``body`` again and again until ``stop``."""

    async def client(token: str, statuses: Counter[int]) -> None:
        headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as http:
            while not stop.is_set():
                try:
                    answer = await http.post(CHECK, content=body)
                    statuses[answer.status_code] += 1
                    if answer.status_code == 429:
                        await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
                except httpx.TransportError:
                    statuses[0] += 1  # connection refused or reset: counted as 0

    async def run() -> Counter[int]:
        statuses: Counter[int] = Counter()
        await asyncio.gather(*(client(token, statuses) for token in tokens))
        return statuses

    out.put(dict(asyncio.run(run())))


# -- measuring ---------------------------------------------------------------------------


def _status(pid: int, name: str) -> int:
    """Field ``name`` (kB) of ``/proc/<pid>/status``; 0 for a process that is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a heavy check's child process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Memory:
    """The server's ``VmRSS``, alone and with its children's, sampled every 20 ms, and
    its ``VmHWM``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kb = 0
        self.peak_with_children_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def field(self, name: str) -> int:
        return _status(self.pid, name)

    def _sample(self) -> None:
        while not self._stop.is_set():
            own = self.field("VmRSS")
            children = sum(_status(child, "VmRSS") for child in _children(self.pid))
            self.peak_kb = max(self.peak_kb, own)
            self.peak_with_children_kb = max(self.peak_with_children_kb, own + children)
            time.sleep(0.02)

    def __enter__(self) -> Memory:
        self.peak_kb = self.peak_with_children_kb = self.field("VmRSS")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
        "requests": len(ordered),
    }


def victim(client: httpx.Client, requests: int) -> dict[str, float]:
    """``requests`` timed ``GET /definitions`` of the other tenant, one every 20 ms."""
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = client.get("/nbcast/api/v1/definitions")
        elapsed = time.perf_counter() - started
        if answer.status_code != 200 or len(answer.json()["items"]) != DEFINITIONS:
            raise RuntimeError(f"GET /definitions answered {answer.status_code}: {answer.text}")
        samples.append(elapsed)
        time.sleep(max(0.0, 0.02 - elapsed))
    return _percentiles(samples)


def phase(
    server: Any, victim_client: httpx.Client, requests: int, body: bytes | None
) -> dict[str, Any]:
    """One phase: the victim's latency and the server's memory, under ``body`` checks
    from every author (None: no load)."""
    from tests.server.live import user_token

    assert server.process is not None
    memory = Memory(server.process.pid)
    stop: Any = multiprocessing.Event()
    queue: Any = multiprocessing.Queue()
    load = None
    if body is not None:
        tokens = [user_token(a) for a in AUTHORS]
        load = multiprocessing.Process(target=_load, args=(server.url, tokens, body, stop, queue))
        load.start()
        time.sleep(2.0)  # the six clients are sending
    with memory:
        latency = victim(victim_client, requests)
    result: dict[str, Any] = {"victim_get_definitions": latency}
    if load is not None:
        stop.set()
        result["checks_by_status"] = dict(sorted(queue.get(timeout=600).items()))
        load.join(timeout=60)
    result["server_rss_peak_mb"] = round(memory.peak_kb / 1024, 1)
    result["server_vmhwm_mb"] = round(memory.field("VmHWM") / 1024, 1)
    result["server_and_children_rss_peak_mb"] = round(memory.peak_with_children_kb / 1024, 1)
    return result


# -- main ------------------------------------------------------------------------------


def seed(server: Any) -> None:
    """Tenants, roles, and the victim tenant's definitions (published by body)."""
    import subprocess

    from nbcast.config import load_settings
    from tests.members import grant_url
    from tests.server.live import BIN

    env = {k: v for k, v in server.env.items() if k not in ("NBCAST_TENANT", "NBCAST_USER")}
    for tenant in ("acme", "globex"):
        subprocess.run(
            [str(BIN / "nbcast"), "tenants", "create", tenant], env=env, check=True,
            capture_output=True,
        )  # fmt: skip
    url = load_settings(dict(server.env)).database_url
    for author in AUTHORS:
        grant_url(url, "acme", f"jupyter:{author}", "author")
    grant_url(url, "globex", "jupyter:publisher", "author")
    grant_url(url, "globex", f"jupyter:{VICTIM}", "viewer")
    with server.client("publisher") as publisher:
        for i in range(DEFINITIONS):
            notebook = {
                "cells": [
                    {"cell_type": "code", "id": "p", "metadata": {}, "source": f"print({i})",
                     "outputs": [], "execution_count": None}
                ],
                "metadata": {
                    "kernelspec": {"name": "python3", "display_name": "Python 3",
                                   "language": "python"},
                    "nbcast": {"name": f"report-{i:02}", "schedule": {"cron": f"{i} 7 * * 1-5"}},
                },
                "nbformat": 4,
                "nbformat_minor": 5,
            }  # fmt: skip
            answer = publisher.post("/nbcast/api/v1/definitions", json={"notebook": notebook})
            if answer.status_code != 201:
                raise RuntimeError(f"publish answered {answer.status_code}: {answer.text}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500, help="victim requests per phase")
    parser.add_argument("--body-mb", type=float, default=30.0, help="the large check's size")
    parser.add_argument("--under-cap-mb", type=float, default=7.5, help="the admitted checks' size")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.server.live import LiveServer

    lines = _code_lines()
    large = check_body(int(args.body_mb * 1e6), lines)
    under = check_body(int(args.under_cap_mb * 1e6), lines)
    results: dict[str, Any] = {
        "benchmark": "check_load",
        "clients": len(AUTHORS),
        "large_body_bytes": len(large),
        "under_cap_body_bytes": len(under),
        "machine": machine_load(),
    }
    with scratch_database() as url, tempfile.TemporaryDirectory() as tmp:
        users = {**{a: "acme" for a in AUTHORS}, "publisher": "globex", VICTIM: "globex"}
        server = LiveServer(Path(tmp), users=users, env={"NBCAST_DATABASE_URL": url})
        with server:
            seed(server)
            with server.client(VICTIM) as client:
                victim(client, 50)  # warm the connection, the caches and the pool
                results["reference"] = phase(server, client, args.requests, None)
                results["checks_30mb"] = phase(server, client, args.requests, large)
                results["checks_under_cap"] = phase(server, client, args.requests, under)
    loaded = [results["checks_30mb"], results["checks_under_cap"]]
    results["targets"] = {
        "server_rss_mb_below": RSS_TARGET_MB,
        "victim_p99_ms_below": P99_TARGET_MS,
        "met": all(
            max(p["server_vmhwm_mb"], p["server_and_children_rss_peak_mb"]) < RSS_TARGET_MB
            and p["victim_get_definitions"]["p99_ms"] < P99_TARGET_MS
            for p in loaded
        ),
    }
    results["p99_loaded_over_reference"] = {
        name: round(
            results[name]["victim_get_definitions"]["p99_ms"]
            / results["reference"]["victim_get_definitions"]["p99_ms"],
            2,
        )
        for name in ("checks_30mb", "checks_under_cap")
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main()
