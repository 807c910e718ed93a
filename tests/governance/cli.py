"""Running ``nbcast`` in the test's process as one person: the governance tests'
command-line helper."""

from __future__ import annotations

import pytest

from nbcast.cli import main


def act_as(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, user: str, *argv: str
) -> tuple[int, str, str]:
    """``nbcast ARGV`` as ``user`` (``NBCAST_USER``): exit status, stdout, stderr."""
    monkeypatch.setenv("NBCAST_USER", user)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
