"""A binding never reaches papermill as code.

Every element of the vocabulary (each base, each step kind, each snap, each format
and strftime directive) resolves to a JSON string literal, and papermill's injected
parameters cell assigns it as a string constant. A binding whose pattern *produces*
text that looks like Python — ``"+__import__("os").system("touch …")#`` — and a literal
parameter value that does, are executed in a real kernel by a real worker: the run
succeeds, the notebook sees strings, and no marker file appears.
"""

from __future__ import annotations

import ast
import json
import string
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import papermill.translators
import pytest

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.bindings import BASES, SNAPS, UNITS, Period, parse_binding, resolve
from nbcast.definitions.versions import publish
from nbcast.errors import MetadataError
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from tests.notebooks import make_notebook
from tests.workers import work_until_idle

DIRECTIVES = "aAwdbBmyYHIpMSfzZjUWcxXGuV%"
FORMATS = ["date", "datetime", *(f"%{d}" for d in DIRECTIVES), "%Y-%m-%dT%H:%M:%S%z %Z"]
STEPS: list[dict[str, Any]] = [
    *({unit: n} for unit in UNITS for n in (-3, 0, 2)),
    {"business_days": -1, "calendar": "US-NY"},
    {"business_days": 0, "calendar": "DE"},
    *({"to": anchor} for anchor in SNAPS),
]
# A New York fall-back night, both passes, and a spring-forward gap slot.
PERIODS = [
    datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
    datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
]


def _injected(values: dict[str, Any]) -> dict[str, Any]:
    """What papermill's parameters cell assigns, read back without running it: each
    assignment must be of a constant."""
    source = papermill.translators.translate_parameters("python3", "python", values)
    assigned: dict[str, Any] = {}
    for node in ast.parse(source).body:
        assert isinstance(node, ast.Assign), ast.dump(node)
        [target] = node.targets
        assert isinstance(target, ast.Name)
        assert isinstance(node.value, ast.Constant), ast.dump(node.value)
        assigned[target.id] = node.value.value
    return assigned


@pytest.mark.parametrize("base", BASES)
def test_every_vocabulary_element_resolves_to_a_json_string_literal(base: str) -> None:
    zone = ZoneInfo("America/New_York")
    bindings: list[dict[str, Any]] = [{"$period": base, "format": f} for f in FORMATS]
    bindings += [{"$period": base, "steps": [s], "format": "datetime"} for s in STEPS]
    bindings += [{"$period": base, "steps": STEPS[:16], "format": "%c"}]
    for at in PERIODS:
        nominal = at.astimezone(zone)
        period = Period(nominal, nominal - timedelta(hours=25), nominal, zone)
        values = {
            f"p{i}": resolve(parse_binding(b, f"p{i}"), period) for i, b in enumerate(bindings)
        }
        for name, value in values.items():
            assert type(value) is str, (name, value)
            assert json.loads(json.dumps(value)) == value
        assert _injected(values) == values


def test_the_directives_above_are_all_the_vocabulary_has() -> None:
    for letter in string.ascii_letters + string.punctuation:
        binding = {"$period": "slot", "format": f"%{letter}"}
        if letter in DIRECTIVES:
            parse_binding(binding, "p")
        else:
            with pytest.raises(MetadataError, match=r"^p\.format: "):
                parse_binding(binding, "p")


BODY = (
    "import json\n"
    "print(json.dumps({'label': label, 'note': note, "
    "'types': [type(label).__name__, type(note).__name__]}))\n"
)


def test_a_string_that_looks_like_code_stays_a_string_in_a_real_kernel(
    db: Database, tmp_path: Path
) -> None:
    marker = Path(f"/tmp/nbx{uuid.uuid4().hex[:10]}")
    pattern = f'"+__import__("os").system("touch {marker}")#%Y'
    assert len(pattern) <= 64  # the vocabulary's bound for a pattern
    literal = f'"\nimport os; os.system("touch {marker}")\n#\\" + str(open)'
    spec = {
        "name": "looks-like-code",
        "schedule": {"cron": "0 7 * * *", "timezone": "America/New_York"},
        "parameters": {"label": {"$period": "slot", "format": pattern}},
    }
    path = make_notebook(
        tmp_path / "code.ipynb", parameters='label = "x"\nnote = "y"\n', body=BODY, nbcast=spec
    )
    publish(
        db, path, caller=Caller(tenant="default", user="t"), now=datetime(2026, 10, 1, tzinfo=UTC)
    )
    run_id = run_now(
        db,
        FixedClock(datetime(2026, 10, 2, 12, tzinfo=UTC)),
        Caller(tenant="default", user="t"),
        "looks-like-code",
        {"note": literal},
    )
    expected = {"label": f'"+__import__("os").system("touch {marker}")#2026', "note": literal}
    with db.session() as session:
        stored = session.get(Run, run_id)
        assert stored is not None
        assert stored.parameters == expected
    work_until_idle(
        db,
        artifacts=tmp_path / "artifacts",
        work_dir=tmp_path / "runs",
        name="safety-worker",
        backoff_base=0.0,
    )
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert (run.state, run.attempt) == ("SUCCEEDED", 1)
        sha256 = run.artifact_sha256
    assert not marker.exists()
    assert sha256 is not None
    executed = json.loads(LocalArtifactStore(tmp_path / "artifacts").get(sha256))
    printed = [
        "".join(output.get("text", ""))
        for cell in executed["cells"]
        for output in cell.get("outputs", [])
        if output.get("name") == "stdout"
    ]
    [line] = [text for text in printed if text.startswith("{")]
    assert json.loads(line) == {**expected, "types": ["str", "str"]}
