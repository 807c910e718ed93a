"""Running ``nbcast`` in the test's own process: the command-line helpers the CLI tests
share (a subprocess costs an interpreter start; these cost a function call)."""

from __future__ import annotations

import pytest

from nbcast.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``nbcast ARGV``: exit status, stdout, stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def act_as(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, user: str, *argv: str
) -> tuple[int, str, str]:
    """``nbcast ARGV`` as ``user`` (``NBCAST_USER``): exit status, stdout, stderr."""
    monkeypatch.setenv("NBCAST_USER", user)
    return run(capsys, *argv)
