"""Publishing by path obeys the contents authorizer, and no answer shows an absolute
path of the server (:mod:`nbcast.server_extension.contents_paths`).

Two live servers:

- ``nbcast serve`` (:class:`~nbcast.server_extension.authorizer.NbcastAuthorizer`),
  where alice is named among the users who may read files and bob is not: bob's
  publish by path is refused exactly as his ``GET /api/contents`` is, with one
  answer whether the file exists or not, and he still publishes by body;
- ``jupyter server`` with an authorizer that refuses ``contents`` to every named
  user (:class:`tests.server.refusing_authorizer.ContentsRefusingAuthorizer`): the
  publish asks it ``read`` on ``contents`` for that very request, and is refused.

Everything answered — bound files, refusals, the definition's page — is checked for
the server's root folder, which must never appear.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.live import LiveServer
from tests.server.refusing_authorizer import REFUSALS_ENV
from tests.server.test_api_definitions import nbcast, notebook

API = "/nbcast/api/v1"
ROOT = Path(__file__).resolve().parents[2]


def _write(folder: Path, relative: str, name: str) -> None:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook({"name": name}, "print(1)")))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder: Path = tmp_path_factory.mktemp("by-path")
    with LiveServer(
        folder,
        users={"alice": "acme", "bob": "globex"},
        extra=("--NbcastAuthorizer.operators=alice",),
    ) as live:
        for tenant in ("acme", "globex"):
            nbcast(live, "tenants", "create", tenant)
        _write(folder, "reports/daily.ipynb", "daily")
        _write(folder, "reports/bobs.ipynb", "bobs")
        _write(folder, ".hidden/secret.ipynb", "secret")
        yield live


def _no_root(live: LiveServer, answer: httpx.Response) -> Any:
    """The answer's text never names the server's folder (as given or resolved)."""
    for root in {str(live.folder), str(live.folder.resolve())}:
        assert root not in answer.text, answer.text[:500]
    return answer.json() if answer.headers["content-type"].startswith("application/json") else None


def test_a_reader_publishes_by_path_and_sees_the_file_relative_to_the_root(
    served: LiveServer,
) -> None:
    with served.client("alice") as alice:
        published = alice.post(f"{API}/definitions", json={"path": "reports/daily.ipynb"})
        assert published.status_code == 201, published.text
        assert _no_root(served, published)["definition"]["source_path"] == "reports/daily.ipynb"
        listed = alice.get(f"{API}/definitions")
        assert [d["source_path"] for d in _no_root(served, listed)["items"]] == [
            "reports/daily.ipynb"
        ]
        page = alice.get("/nbcast/definitions/daily")
        assert page.status_code == 200
        _no_root(served, page)
        assert "reports/daily.ipynb" in page.text
        # The same name from elsewhere: refused, naming both files as shown.
        clash = alice.post(f"{API}/definitions", json={"notebook": notebook({"name": "daily"})})
        assert clash.status_code == 400
        assert _no_root(served, clash)["error"] == {
            "code": "invalid",
            "message": "definition 'daily' is bound to reports/daily.ipynb; choose another "
            "name for api:daily",
            "field": "name",
        }
        # The contents manager's own messages name absolute paths: not passed on.
        (served.folder / "reports" / "binary.ipynb").write_bytes(b"\xff\xfe\x00garbage")
        unreadable = alice.post(f"{API}/definitions", json={"path": "reports/binary.ipynb"})
        assert unreadable.status_code == 400
        assert _no_root(served, unreadable)["error"]["message"] == (
            "'reports/binary.ipynb': cannot be read as a UTF-8 text file"
        )
        # A hidden file is not for publishing, as the contents API does not show it.
        hidden = alice.post(f"{API}/definitions", json={"path": ".hidden/secret.ipynb"})
        assert hidden.status_code == 403, hidden.text


def test_someone_who_may_not_read_files_may_not_publish_them(served: LiveServer) -> None:
    with served.client("bob") as bob:
        assert bob.get("/api/contents/reports/bobs.ipynb").status_code == 403
        answers = [
            bob.post(f"{API}/definitions", json={"path": path})
            for path in ("reports/bobs.ipynb", "reports/missing.ipynb", "reports")
        ]
        assert {a.status_code for a in answers} == {403}
        assert len({a.text for a in answers}) == 1  # nothing said about what exists
        assert _no_root(served, answers[0])["error"]["field"] == "path"
        assert bob.get(f"{API}/definitions").json()["items"] == []
        # The check says nothing about files he may not read either.
        check = bob.post(
            f"{API}/notebooks/check",
            json={"notebook": notebook({"name": "bobs"}), "path": "reports/bobs.ipynb"},
        )
        assert check.status_code == 200
        # By body, the same notebook publishes.
        body = bob.post(f"{API}/definitions", json={"notebook": notebook({"name": "bobs"})})
        assert body.status_code == 201, body.text
        assert body.json()["definition"]["source_path"] == "api:bobs"


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder: Path = tmp_path_factory.mktemp("contents-refused")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    authorizer = "tests.server.refusing_authorizer.ContentsRefusingAuthorizer"
    with LiveServer(
        folder,
        users={"alice": "acme"},
        env={"PYTHONPATH": path, REFUSALS_ENV: str(folder / "refusals.jsonl")},
        command="server",
        extra=(f"--ServerApp.authorizer_class={authorizer}",),
    ) as live:
        nbcast(live, "tenants", "create", "acme")
        _write(folder, "reports/daily.ipynb", "daily")
        yield live


def test_the_servers_own_authorizer_is_asked_read_on_contents(refusing: LiveServer) -> None:
    refusals = Path(refusing.env[REFUSALS_ENV])
    with refusing.client("alice") as alice:
        refused = alice.post(f"{API}/definitions", json={"path": "reports/daily.ipynb"})
        assert refused.status_code == 403, refused.text
        assert _no_root(refusing, refused)["error"]["code"] == "forbidden"
        assert alice.get(f"{API}/definitions").json()["items"] == []
    asked = [json.loads(line) for line in refusals.read_text().splitlines()]
    assert {
        "handler": "DefinitionsHandler",
        "method": "POST",
        "path": f"{API}/definitions",
        "action": "read",
        "resource": "contents",
    } in asked


@pytest.mark.parametrize(
    ("source", "root", "shown"),
    [
        ("/srv/jupyter/reports/a.ipynb", "/srv/jupyter", "reports/a.ipynb"),
        ("/srv/jupyter/reports/a.ipynb", "/srv/jupyter/", "reports/a.ipynb"),
        ("/home/ops/elsewhere/a.ipynb", "/srv/jupyter", "outside-root:a.ipynb"),
        ("/srv/jupyter-other/a.ipynb", "/srv/jupyter", "outside-root:a.ipynb"),
        ("/srv/jupyter/a.ipynb", None, "outside-root:a.ipynb"),
        ("api:daily", "/srv/jupyter", "api:daily"),
        ("contents:reports/a.ipynb", None, "contents:reports/a.ipynb"),
    ],
)
def test_how_a_bound_file_is_shown(source: str, root: str | None, shown: str) -> None:
    from nbcast.server_extension.contents_paths import shown_source

    assert shown_source(source, root) == shown
