"""What the scripts that start a server share (the demo's ``nbcast serve`` and Lab
acts, the Lab benchmark): wait until its health route answers, and stop it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

__all__ = ["stop", "wait_ready"]


def wait_ready(
    process: subprocess.Popen[bytes],
    log: Path,
    url: str,
    token: str,
    *,
    what: str,
    timeout: float = 60,
) -> None:
    """Return once ``GET {url}/nbcast/api/v1/health`` answers 200 for ``token``;
    ``SystemExit`` naming ``what`` and its ``log`` if the process exits first or
    ``timeout`` seconds pass (then it is killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited {process.returncode}; see {log}")
        try:
            answer = httpx.get(
                f"{url}/nbcast/api/v1/health",
                headers={"Authorization": f"token {token}"},
                timeout=2.0,
            )
            if answer.status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{what} did not answer within {timeout:.0f} s; see {log}")


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited after ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
