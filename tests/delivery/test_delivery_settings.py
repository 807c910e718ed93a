"""The delivery plane's configuration refuses bad values on one line, without echoing
secrets: SMTP URLs, link lifetimes, signing keys (variable and key file)."""

from __future__ import annotations

import json
import stat
from datetime import timedelta
from pathlib import Path

import pytest

from nbcast.delivery.settings import load_delivery_settings, smtp_options
from nbcast.delivery.signing import Signer, load_signer, parse_keys
from nbcast.errors import ConfigError

# -- NBCAST_SMTP_URL ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://bob:hunter2@mail.example.com",
        "smtp://bob:hunter2@[::1",
        "smtp://bob:hunter2@mail.example.com:99999",
        "smtp://bob:hunter2@mail.example.com:abc",
        "smtp://bob:hunter2@mail.example.com:0",
        "smtp://bob:hunter2@",
    ],
    ids=["scheme", "bracket", "port_too_big", "port_not_a_number", "port_zero", "no_host"],
)
def test_a_bad_smtp_url_is_a_one_line_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        smtp_options(url)
    message = str(refused.value)
    assert message.startswith("NBCAST_SMTP_URL")
    assert "hunter2" not in message
    assert "\n" not in message


def test_a_good_smtp_url_still_works() -> None:
    assert smtp_options("smtp://bob:s%40cret@mail.example.com:587?security=starttls") == {
        "host": "mail.example.com",
        "port": 587,
        "security": "starttls",
        "username": "bob",
        "password": "s@cret",
    }


# -- NBCAST_LINK_TTL ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["99999999999w", "367d", "0s", "0", "soon"])
def test_a_link_ttl_out_of_bounds_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match="NBCAST_LINK_TTL"):
        load_delivery_settings({"NBCAST_LINK_TTL": value})


def test_a_link_ttl_within_bounds_is_taken() -> None:
    assert load_delivery_settings({"NBCAST_LINK_TTL": "366d"}).link_ttl == timedelta(days=366)
    assert load_delivery_settings({}).link_ttl == timedelta(days=7)


# -- signing keys ------------------------------------------------------------------------


def test_a_duplicate_key_id_is_refused_by_name() -> None:
    keys = "k1:0123456789abcdefghij,k2:0123456789abcdefghik,k1:zzzzzzzzzzzzzzzzzzzz"
    with pytest.raises(ConfigError, match="NBCAST_SIGNING_KEYS: key id 'k1' is given twice"):
        parse_keys(keys)
    with pytest.raises(ConfigError, match="'k1' is given twice"):
        load_signer(Path("/nonexistent"), {"NBCAST_SIGNING_KEYS": keys})
    with pytest.raises(ConfigError, match="'k1' is given twice"):
        Signer([("k1", "0123456789abcdefghij"), ("k1", "zzzzzzzzzzzzzzzzzzzz")])


def test_a_short_key_in_the_variable_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="NBCAST_SIGNING_KEYS: signing key 'k1' is shorter"):
        load_signer(Path("/nonexistent"), {"NBCAST_SIGNING_KEYS": "k1:short"})


def test_the_generated_key_file_is_private(tmp_path: Path) -> None:
    load_signer(tmp_path, environ={})
    mode = stat.S_IMODE((tmp_path / "signing-keys.json").stat().st_mode)
    assert mode == 0o600
    assert not list(tmp_path.glob(".signing-keys-*"))  # no temporary file left behind


@pytest.mark.parametrize(
    "content",
    [
        b"not json at all",
        b"\xff\xfe",
        b'{"k1": "0123456789abcdefghij"}',
        b'[["k1"]]',
        b'[["k1", 12345678901234567890]]',
        b'[["k1", "short"]]',
        b"[]",
        b'[["bad id!", "0123456789abcdefghij"]]',
    ],
    ids=["text", "binary", "object", "no_secret", "number", "short", "empty", "bad_id"],
)
def test_a_corrupt_key_file_is_a_one_line_config_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "signing-keys.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        load_signer(tmp_path, environ={})
    message = str(refused.value)
    assert message.startswith(str(path))
    assert "\n" not in message


def test_a_good_key_file_is_used(tmp_path: Path) -> None:
    (tmp_path / "signing-keys.json").write_text(
        json.dumps([["k2", "0123456789abcdefghij"], ["k1", "zzzzzzzzzzzzzzzzzzzz"]])
    )
    assert load_signer(tmp_path, environ={}).current == "k2"
