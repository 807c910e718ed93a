"""Which URLs a webhook may reach, and what is kept of the answer.

The policy (``nbcast.delivery.webhook_policy``) on its own, then the webhook channel
enforcing it against real receivers on 127.0.0.1 (``nbcast/testing/webhook.py``): a
refused URL never becomes a request, an allowed loopback receiver works, the address
is pinned (one lookup per connection, TLS still verifies the host name), redirects are
not followed, and no response body reaches a receipt or an error.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbcast.delivery.channels import build_channels
from nbcast.delivery.channels._peer import RETRY_AFTER_CEILING, parse_retry_after, peer_text
from nbcast.delivery.channels.webhook import WebhookChannel
from nbcast.delivery.settings import load_delivery_settings
from nbcast.delivery.webhook_policy import (
    WebhookPolicy,
    check_webhook_url,
    load_webhook_policy,
    resolve_webhook_host,
)
from nbcast.errors import ConfigError, PermanentChannelError, TransientChannelError
from nbcast.testing.http import HTTPReply
from nbcast.testing.webhook import WebhookReceiver, webhook_receiver
from tests.delivery.test_webhook_channel import LOCAL, SECRET, make_message

STRICT = WebhookPolicy()
HTTP_ONLY = WebhookPolicy(allow_http=True)

# -- the policy ---------------------------------------------------------------------

REFUSED = {
    "file_url": "file:///etc/passwd",
    "gopher_url": "gopher://127.0.0.1:70/_HELO",
    "bare_word": "hello",
    "plain_http": "http://hooks.example.com/x",
    "no_host": "https:///x",
    "userinfo": "https://user:secret@hooks.example.com/x",
    "port_zero": "https://hooks.example.com:0/x",
    "port_too_big": "https://hooks.example.com:99999/x",
    "metadata_ipv4": "https://169.254.169.254/latest/meta-data/",
    "metadata_ipv6": "https://[fd00:ec2::254]/latest/meta-data/",
    "loopback": "https://127.0.0.1/x",
    "loopback_ipv6": "https://[::1]/x",
    "localhost": "https://localhost/x",
    "localhost_dot": "https://LOCALHOST./x",
    "sub_localhost": "https://hooks.localhost/x",
    "mapped_loopback": "https://[::ffff:127.0.0.1]/x",
    "mapped_metadata": "https://[::ffff:169.254.169.254]/x",
    "nat64_loopback": "https://[64:ff9b::7f00:1]/x",
    "sixtofour_private": "https://[2002:a00:1::]/x",
    "decimal_ipv4": "https://2130706433/x",
    "hex_ipv4": "https://0x7f.1/x",
    "private_10": "https://10.1.2.3/x",
    "private_192": "https://192.168.0.10/x",
    "cgnat": "https://100.64.0.1/x",
    "link_local": "https://169.254.1.1/x",
    "unspecified": "https://0.0.0.0/x",
    "multicast": "https://224.0.0.251/x",
    "reserved": "https://240.0.0.1/x",
}


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_the_default_policy_refuses(url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_webhook_url(url, STRICT, resolve=False)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/x", "https://8.8.8.8:8443/x", "https://[2606:4700::1]/x"]
)
def test_the_default_policy_lets_public_https_through(url: str) -> None:
    check_webhook_url(url, STRICT, resolve=False)


def test_userinfo_is_refused_without_echoing_the_password() -> None:
    with pytest.raises(ConfigError) as refused:
        check_webhook_url("ftp://user:hunter2@example.com/", STRICT, resolve=False)
    assert "hunter2" not in str(refused.value)


def test_the_allow_list_names_hosts_and_holds_addresses_and_networks() -> None:
    policy = WebhookPolicy(allow_http=True, allowed=("hooks.internal", "10.20.0.0/16", "::1"))
    check_webhook_url("http://hooks.internal:8080/x", policy, resolve=False)
    check_webhook_url("https://10.20.3.4/x", policy, resolve=False)
    check_webhook_url("https://[::1]/x", policy, resolve=False)
    check_webhook_url("https://localhost/x", policy, resolve=False)  # ::1 is allowed
    for url in ("https://10.21.0.1/x", "https://127.0.0.1/x", "https://169.254.169.254/"):
        with pytest.raises(ConfigError):
            check_webhook_url(url, policy, resolve=False)


def test_resolving_judges_every_address_of_a_name() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        check_webhook_url("https://localhost/x", STRICT, resolve=True)
    # A name the allow-list names is reached whatever it resolves to.
    check_webhook_url("https://localhost/x", WebhookPolicy(allowed=("localhost",)), resolve=True)

    def two_answers(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        return [(0, 0, 0, "", ("8.8.8.8", port)), (0, 0, 0, "", ("10.0.0.7", port))]

    with pytest.raises(ConfigError, match=r"10\.0\.0\.7.*private"):
        resolve_webhook_host("hooks.example.com", 443, STRICT, resolver=two_answers)
    allowed = WebhookPolicy(allowed=("10.0.0.0/8",))
    assert resolve_webhook_host("hooks.example.com", 443, allowed, resolver=two_answers) == [
        ipaddress.ip_address("8.8.8.8"),
        ipaddress.ip_address("10.0.0.7"),
    ]


def test_the_policy_comes_from_the_environment() -> None:
    policy = load_webhook_policy(
        {
            "NBCAST_WEBHOOK_ALLOW_HTTP": "yes",
            "NBCAST_WEBHOOK_ALLOWED_HOSTS": " hooks.internal , 10.0.0.0/8,127.0.0.1,[::1] ",
        }
    )
    assert policy.allow_http
    assert policy.names_host("HOOKS.internal.")
    assert policy.allows_address(ipaddress.ip_address("10.9.8.7"))
    assert policy.allows_address(ipaddress.ip_address("::1"))
    assert load_webhook_policy({}) == WebhookPolicy()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NBCAST_WEBHOOK_ALLOWED_HOSTS", "10.0.0.1/8"),
        ("NBCAST_WEBHOOK_ALLOWED_HOSTS", "hooks.internal:8080"),
        ("NBCAST_WEBHOOK_ALLOWED_HOSTS", "https://hooks.internal"),
        ("NBCAST_WEBHOOK_ALLOWED_HOSTS", "two words"),
        ("NBCAST_WEBHOOK_ALLOW_HTTP", "maybe"),
    ],
    ids=["host_bits", "port", "url", "space", "flag"],
)
def test_a_malformed_policy_is_a_config_error_naming_the_variable(
    variable: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_webhook_policy({variable: value})


def test_settings_hand_the_policy_to_the_webhook_channel() -> None:
    settings = load_delivery_settings(
        {
            "NBCAST_WEBHOOK_SECRET": SECRET,
            "NBCAST_WEBHOOK_ALLOW_HTTP": "1",
            "NBCAST_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        }
    )
    assert settings.webhook_policy == WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))
    channel = build_channels(settings)["webhook"]
    assert isinstance(channel, WebhookChannel)
    assert channel.policy == settings.webhook_policy
    channel.close()
    strict = build_channels(load_delivery_settings({"NBCAST_WEBHOOK_SECRET": SECRET}))
    assert strict["webhook"].policy == WebhookPolicy()  # type: ignore[attr-defined]


def test_the_channel_class_judges_webhook_recipients_at_publish() -> None:
    assert WebhookChannel.check_recipient("ftp://hooks.example.com") == (
        "'ftp://hooks.example.com' is not an https:// URL"
    )
    assert WebhookChannel.check_recipient("https://hooks.example.com/x") is None
    here = WebhookChannel.check_recipient_here
    assert "loopback" in (here("https://127.0.0.1/x", {}) or "")
    allowed = {"NBCAST_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1", "NBCAST_WEBHOOK_ALLOW_HTTP": "1"}
    assert here("http://127.0.0.1:9/x", allowed) is None


# -- the channel enforces it ----------------------------------------------------------


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as receiver:
        yield receiver


HOSTILE = {
    "file_url": lambda port: "file:///etc/passwd",
    "gopher_url": lambda port: f"gopher://127.0.0.1:{port}/_POST",
    "bare_word": lambda port: "hello",
    "metadata_ip": lambda port: "http://169.254.169.254/latest/meta-data/",
    "loopback": lambda port: f"http://127.0.0.1:{port}/hooks/nbcast",
    "localhost": lambda port: f"http://localhost:{port}/hooks/nbcast",
    "mapped_ipv6": lambda port: f"http://[::ffff:127.0.0.1]:{port}/hooks/nbcast",
    "decimal_ipv4": lambda port: f"http://2130706433:{port}/hooks/nbcast",
}


@pytest.mark.parametrize("make_url", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_refused_url_is_never_requested(hook: WebhookReceiver, make_url: Any) -> None:
    with WebhookChannel(SECRET, timeout=1.0, policy=HTTP_ONLY) as channel:
        with pytest.raises(PermanentChannelError, match="refused"):
            channel.send(make_message(make_url(hook.port)))
    assert hook.requests == []


def test_a_name_that_resolves_to_loopback_is_refused_when_connecting(
    hook: WebhookReceiver,
) -> None:
    def loopback(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    url = f"http://hooks.example.test:{hook.port}/hooks/nbcast"
    check_webhook_url(url, HTTP_ONLY, resolve=False)  # nothing to see without a lookup
    with WebhookChannel(SECRET, timeout=1.0, policy=HTTP_ONLY, resolver=loopback) as channel:
        with pytest.raises(PermanentChannelError, match=r"127\.0\.0\.1.*loopback"):
            channel.send(make_message(url))
    assert hook.requests == []


def test_an_allowed_loopback_receiver_is_reached_through_the_one_lookup_it_was_judged_on(
    hook: WebhookReceiver,
) -> None:
    lookups: list[str] = []

    def pinned(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    url = f"http://hooks.example.test:{hook.port}/hooks/nbcast"
    with WebhookChannel(SECRET, timeout=1.0, policy=LOCAL, resolver=pinned) as channel:
        for _ in range(3):
            assert channel.send(make_message(url)).detail["status"] == 200
    # One lookup for the one kept-alive connection: the address judged is the address
    # connected to, and the Host header still names the host.
    assert lookups == ["hooks.example.test"]
    assert [r.header("host") for r in hook.requests] == [f"hooks.example.test:{hook.port}"] * 3
    assert len({r.peer for r in hook.requests}) == 1


def test_a_redirect_is_not_followed(hook: WebhookReceiver) -> None:
    with webhook_receiver() as elsewhere, WebhookChannel(SECRET, policy=LOCAL) as channel:
        hook.respond(302, headers={"Location": elsewhere.url})
        with pytest.raises(PermanentChannelError, match="302"):
            channel.send(make_message(hook.url))
        assert elsewhere.requests == []


def test_a_proxy_from_the_environment_is_not_used(
    hook: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    with webhook_receiver() as proxy:  # a proxy would resolve the name itself
        root = proxy.url.removesuffix("/hooks/nbcast")
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, root)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        with WebhookChannel(SECRET, policy=LOCAL) as channel:
            channel.send(make_message(hook.url))
        assert proxy.requests == []
    assert len(hook.requests) == 1


def test_no_response_body_is_kept_in_a_receipt_or_an_error() -> None:
    secret_body = b"root:x:0:0:root:/root:/bin/bash\n" * 4000  # 128 KiB, more than is read
    leaky = HTTPReply(
        200,
        secret_body,
        {"Content-Type": "text/plain", "X-Request-Id": "r" * 500, "X-Other": "dropped"},
    )
    with webhook_receiver(default=leaky) as hook, WebhookChannel(SECRET, policy=LOCAL) as channel:
        receipt = channel.send(make_message(hook.url))
        hook.respond(500, body=secret_body)
        with pytest.raises(TransientChannelError) as failed:
            channel.send(make_message(hook.url))
    assert receipt.detail == {
        "status": 200,
        "headers": {
            "content-type": "text/plain",
            "content-length": str(len(secret_body)),
            "x-request-id": "r" * 97 + "...",
        },
    }
    assert "root:" not in str(failed.value)
    assert str(failed.value) == "webhook answered HTTP 500"


# -- TLS: the name is verified, the address is pinned ---------------------------------


def _certificates(folder: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A test CA and a certificate for ``name`` it signed: (server, client) contexts."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def certificate(
        subject: str, key: Any, issuer: str, signer: Any, *, ca: bool
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("nbcast test CA", ca_key, "nbcast test CA", ca_key, ca=True)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = certificate(name, leaf_key, "nbcast test CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    (folder / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (folder / "leaf.key").write_bytes(
        leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(folder / "leaf.pem", folder / "leaf.key")
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return server, client


def test_tls_verifies_the_host_name_while_connecting_to_the_pinned_address(
    tmp_path: Path,
) -> None:
    name = "hooks.example.test"
    server, client = _certificates(tmp_path, name)
    seen: list[str | None] = []
    server.sni_callback = lambda sock, server_name, context: seen.append(server_name)

    def pinned(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    policy = WebhookPolicy(allowed=("127.0.0.1",))  # https only
    with webhook_receiver(tls=server, host=name) as hook:
        with WebhookChannel(
            SECRET, policy=policy, verify=client, resolver=pinned, timeout=5.0
        ) as channel:
            assert channel.send(make_message(hook.url)).detail["status"] == 200
            # The same receiver by its address: the certificate is not for it.
            by_address = hook.url.replace(name, "127.0.0.1")
            with pytest.raises(TransientChannelError, match="unreachable"):
                channel.send(make_message(by_address))
        assert [r.header("host") for r in hook.requests] == [f"{name}:{hook.port}"]
    assert seen[0] == name


# -- Retry-After, parsed defensively --------------------------------------------------

NOW = dt.datetime(2026, 11, 2, 8, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("99999999999999999999", RETRY_AFTER_CEILING),
        ("1e400", None),
        ("inf", None),
        ("nan", None),
        ("-5", None),
        ("soon", None),
        ("", None),
        (None, None),
        (["12"], 12.0),
        ("Fri, 31 Dec 9999 23:59:59 GMT", RETRY_AFTER_CEILING),
        ("Mon, 02 Nov 2026 08:02:00 GMT", 120.0),
        ("Sun, 01 Nov 2026 08:00:00 GMT", 0.0),
        ("Fri, 31 Dec 99999 23:59:59 GMT", None),
        ("Mon, 99 Foo 2026 99:99:99 GMT", None),
    ],
    ids=[
        "seconds",
        "decimal",
        "huge",
        "overflowing",
        "inf",
        "nan",
        "negative",
        "word",
        "empty",
        "missing",
        "list",
        "year_9999",
        "date",
        "past_date",
        "year_99999",
        "bad_date",
    ],
)
def test_retry_after_is_bounded_or_ignored(value: Any, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


def test_peer_text_is_short_and_printable() -> None:
    text = peer_text("a\x00b" + "x" * 1000)
    assert len(text) == 300
    assert "\x00" not in text
    assert text.endswith("...")
