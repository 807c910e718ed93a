"""The content-addressed artifact store."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nbcast.artifacts import FsspecArtifactStore, LocalArtifactStore, open_store
from nbcast.errors import ConfigError


@pytest.fixture(params=["local", "memory"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> LocalArtifactStore | FsspecArtifactStore:
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "artifacts")
    return FsspecArtifactStore(f"memory://nbcast-test/{tmp_path.name}")


def test_same_content_is_stored_once(store: LocalArtifactStore | FsspecArtifactStore) -> None:
    first = store.put(b"report")
    second = store.put(b"report")
    assert first == second
    assert first.sha256 == hashlib.sha256(b"report").hexdigest()
    assert first.size == 6
    assert store.get(first.sha256) == b"report"
    assert store.exists(first.sha256)
    assert not store.exists("0" * 64)
    with pytest.raises(KeyError):
        store.get("0" * 64)


@pytest.mark.parametrize(
    "key",
    ["../../etc/passwd", "/etc/passwd", "ab/../../x", "A" * 64, "0" * 63, "0" * 64 + "/x", ""],
)
def test_keys_cannot_escape_the_root(
    store: LocalArtifactStore | FsspecArtifactStore, key: str
) -> None:
    with pytest.raises(ConfigError, match="not an artifact key"):
        store.get(key)
    with pytest.raises(ConfigError):
        store.exists(key)


def test_local_layout_and_no_partial_files(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    ref = store.put(b"x" * 1000)
    assert store.path(ref.sha256) == tmp_path / ref.sha256[:2] / ref.sha256[2:4] / ref.sha256
    leftovers = [p for p in tmp_path.rglob(".tmp-*")]
    assert leftovers == []


def test_open_store_picks_the_backend(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path), LocalArtifactStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalArtifactStore)
    assert isinstance(open_store("memory://bucket/x"), FsspecArtifactStore)
