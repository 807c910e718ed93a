"""The exception tree: rooted at NbcastError, documented, and every member pickles."""

from __future__ import annotations

import pickle

import pytest

import nbcast.errors as errors

SAMPLES: dict[str, errors.NbcastError] = {
    "NbcastError": errors.NbcastError("boom"),
    "NotFoundError": errors.NotFoundError("no such report"),
    "AccessDeniedError": errors.AccessDeniedError("viewers may not publish"),
    "ConflictError": errors.ConflictError("run 7 is running"),
    "ConfigError": errors.ConfigError("bad setting"),
    "StorageError": errors.StorageError("db down"),
    "SchedulerLockedError": errors.SchedulerLockedError("locked by pid 7"),
    "DefinitionError": errors.DefinitionError("bad"),
    "NotebookError": errors.NotebookError("not JSON"),
    "ParametersCellError": errors.ParametersCellError("`x = f()` is not literal", 3),
    "MetadataError": errors.MetadataError(
        "schedule.timezone", "'Mars/Olympus' is not an IANA time zone"
    ),
    "ParameterValueError": errors.ParameterValueError(("a", "b")),
    "DuplicateDefinitionError": errors.DuplicateDefinitionError("taken"),
    "UnknownDefinitionError": errors.UnknownDefinitionError("none"),
    "ScheduleError": errors.ScheduleError("from >= to"),
    "ExecutionError": errors.ExecutionError("worker died"),
    "NotebookExecutionError": errors.NotebookExecutionError(
        3, "ZeroDivisionError", "division by zero", ("Traceback", "line 1")
    ),
    "UnknownRunError": errors.UnknownRunError("no run 7"),
    "RunFinishedError": errors.RunFinishedError("run 7 ended"),
    "RunTimeoutError": errors.RunTimeoutError("over 600 s"),
    "RunCancelledError": errors.RunCancelledError("cancelled by ana"),
    "OutputTooLargeError": errors.OutputTooLargeError("cell 3 printed 9 MiB", 3),
    "LeaseLostError": errors.LeaseLostError("run 7 attempt 2"),
    "QueryLimitExceeded": errors.QueryLimitExceeded("rows", 1000, "1,001 rows > 1,000"),
    "BudgetExhausted": errors.BudgetExhausted(1000, "past the daily warehouse budget"),
    "DeliveryError": errors.DeliveryError("delivery 4 failed"),
    "RenderError": errors.RenderError("pdf: the notebook has no cells"),
    "ChannelError": errors.ChannelError("email: connection refused"),
    "TransientChannelError": errors.TransientChannelError("slack: 429", 30.0),
    "PermanentChannelError": errors.PermanentChannelError("550 no such mailbox"),
    "OutcomeUnknownError": errors.OutcomeUnknownError("slack: read timed out"),
    "LinkError": errors.LinkError("the link has expired"),
}


def test_every_public_exception_has_a_sample() -> None:
    assert set(errors.__all__) == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_exception_pickles_to_an_equal_exception(name: str) -> None:
    original = SAMPLES[name]
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is type(original)
    assert copy == original
    assert str(copy) == str(original)
    assert vars(copy) == vars(original)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_exception_is_in_the_tree_and_the_drawing(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.NbcastError)
    assert name in (errors.__doc__ or "")


def test_structured_fields_are_kept() -> None:
    err = errors.ParametersCellError("`import os` is not an assignment", 2)
    assert err.line == 2
    assert str(err) == "parameters cell, line 2: `import os` is not an assignment"
    meta = SAMPLES["MetadataError"]
    assert isinstance(meta, errors.MetadataError)
    assert meta.field == "schedule.timezone"
    assert str(meta) == "schedule.timezone: 'Mars/Olympus' is not an IANA time zone"
