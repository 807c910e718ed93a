"""What the browser tests share: the repository's scripts loaded as modules (the
screenshot and Lab drivers live in ``scripts/``), and the rule for a missing browser —
skipped with the reason, except in CI (``CI=true``), where it is a failure."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

__all__ = ["require_browser", "script"]

ROOT = Path(__file__).resolve().parents[1]


def script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (also in ``sys.modules``, for its own imports)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def require_browser(*also: tuple[bool, str]) -> None:
    """Skip (fail in CI) when Playwright or chromium is missing, or when one of
    ``also``'s conditions is false (its reason given)."""
    missing = None
    if importlib.util.find_spec("playwright") is None:
        missing = "playwright is not installed (pip install nbcast[dev])"
    elif script("ui_screenshots").chromium_executable() is None:
        missing = "chromium is not installed (make chromium, or apt-get install -y chromium)"
    else:
        missing = next((reason for ok, reason in also if not ok), None)
    if missing is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser tests must run in CI: {missing}")
    pytest.skip(missing)
