"""Permanent failures: what no retry can fix, found before a kernel is started.

A failed attempt is normally retried with backoff (:mod:`nbcast.executor.leases`): a
kernel that died, a warehouse that was away, a cell that raised may all go better next
time. Some failures cannot: the attempt would fail the same way every time, so each
retry only wastes a kernel start and delays the report's owner learning why it did not
come. Those end the run FAILED at once, after one attempt, with a reason that says why:

==================  =======================================================================
reason              cause
==================  =======================================================================
invalid_notebook    the pinned version's notebook is not JSON, not a notebook nbformat
                    reads, or its ``parameters`` tag is on several cells or a non-code cell
invalid_parameters  the run's parameters do not validate against the pinned notebook's
                    parameters cell (or that cell is not literal assignments)
no_such_kernel      no kernelspec named by the notebook is installed where the attempt
                    runs (``jupyter_client.kernelspec.NoSuchKernel``)
language_mismatch   the notebook declares a language (``kernelspec.language``,
                    ``language_info.name``) other than its installed kernel's: its
                    parameters would be written for one language and run in another
                    (:mod:`nbcast.definitions.kernelspec_check`)
output_too_large    the run sent more output than its limits allow (found while it
                    runs: :mod:`nbcast.executor.output_limits`)
==================  =======================================================================

:func:`check_attempt` checks the first four before any kernel is started (cheap: JSON
parsing, the parameters cell's AST, kernelspec files); :func:`permanent_reason`
classifies an exception raised later (a kernelspec removed meanwhile). The check runs
inside the attempt, i.e. on the machine (or Ray node) that executes it, because that is
where the kernel must exist.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nbcast.scheduler.models import RunReason

__all__ = ["PermanentFailure", "check_attempt", "permanent_reason"]

_MAX_EVALUE_CHARS = 2000


class PermanentFailure(Exception):
    """An attempt that cannot succeed on retry: ``reason`` (module docstring), and the
    ``ename`` / ``evalue`` of what was found."""

    def __init__(self, reason: RunReason, ename: str, evalue: str) -> None:
        super().__init__(reason, ename, evalue)
        self.reason = reason
        self.ename = ename
        self.evalue = evalue[:_MAX_EVALUE_CHARS]

    def __str__(self) -> str:
        return f"{self.reason}: {self.ename}: {self.evalue}"


def permanent_reason(exc: BaseException) -> RunReason | None:
    """The permanent-failure reason of ``exc``, or None when a retry might succeed."""
    from jupyter_client.kernelspec import NoSuchKernel

    from nbcast.errors import (
        NotebookError,
        OutputTooLargeError,
        ParametersCellError,
        ParameterValueError,
    )

    if isinstance(exc, PermanentFailure):
        return exc.reason
    if isinstance(exc, OutputTooLargeError):
        return RunReason.output_too_large
    if isinstance(exc, NoSuchKernel):
        return RunReason.no_such_kernel
    if isinstance(exc, (ParameterValueError, ParametersCellError)):
        return RunReason.invalid_parameters
    if isinstance(exc, NotebookError):
        return RunReason.invalid_notebook
    return None


def _failure(reason: RunReason, exc: BaseException) -> PermanentFailure:
    return PermanentFailure(reason, type(exc).__name__, str(exc))


def check_attempt(notebook_json: str, parameters: Mapping[str, Any]) -> tuple[str, str | None]:
    """Check an attempt's notebook, parameters and kernel before it starts; return the
    kernelspec name and the language to run it with — the installed kernel's
    (:mod:`nbcast.definitions.kernelspec_check`). Raises :class:`PermanentFailure`."""
    import nbformat

    from nbcast.definitions.kernelspec_check import (
        declared_language,
        installed_language,
        kernel_language,
        kernel_name,
        missing_kernel,
    )
    from nbcast.definitions.notebook import parameters_cell
    from nbcast.definitions.parameters import (
        parse_parameters_cell,
        validate_parameters,
        with_allowed,
    )
    from nbcast.errors import MetadataError, NotebookError, ParametersCellError, ParameterValueError

    try:
        notebook = json.loads(notebook_json)
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise NotebookError("not a Jupyter notebook (no list of 'cells')")
        # What papermill's loader does with the same text: it must not fail later.
        nbformat.reads(notebook_json, as_version=4)
        cell = parameters_cell(notebook)
    except Exception as exc:  # json, nbformat and jsonschema raise unrelated types
        raise _failure(RunReason.invalid_notebook, exc) from exc
    try:
        schema = parse_parameters_cell(cell[1]) if cell else ()
        block = notebook.get("metadata", {}).get("nbcast")
        validate_parameters(with_allowed(schema, block), parameters)
    except (ParameterValueError, ParametersCellError, MetadataError) as exc:
        raise _failure(RunReason.invalid_parameters, exc) from exc
    missing = missing_kernel(notebook)
    if missing is not None:
        raise PermanentFailure(
            RunReason.no_such_kernel,
            "NoSuchKernel",
            f"no kernelspec named {missing!r} is installed here",
        )
    name = kernel_name(notebook)
    actual = installed_language(name)
    declared = declared_language(notebook)
    if actual is not None and declared is not None and _same(declared) != _same(actual):
        raise PermanentFailure(
            RunReason.language_mismatch,
            "LanguageMismatch",
            f"the notebook declares language {declared[:80]!r} but its kernel {name[:80]!r} "
            f"runs {actual[:80]!r}",
        )
    return name, actual if actual is not None else kernel_language(notebook)


def _same(language: str) -> str:
    return language.strip().lower()
