"""Which URLs a webhook subscription may reach: HTTPS to public addresses, unless allowed.

A webhook's ``to`` is a URL that the delivery worker requests from inside your
network. Left open, a subscription could make nbcast reach an internal service or a
cloud metadata endpoint on its author's behalf (server-side request forgery). So a
webhook URL must be:

- ``https://`` — or ``http://`` as well when ``NBCAST_WEBHOOK_ALLOW_HTTP`` is ``1``,
  ``true`` or ``yes`` — with a host, without ``user:password@``, with a port in
  1..65535, and at most :data:`MAX_URL_LENGTH` characters long;
- to a host whose *every* address is public. Refused: private (10/8, 172.16/12,
  192.168/16, fc00::/7), loopback (127/8, ::1, and the names ``localhost`` and
  ``*.localhost``), link-local (169.254/16, fe80::/10), multicast, reserved,
  unspecified (0.0.0.0, ::), shared address space / CGNAT (100.64/10) and the cloud
  metadata addresses (169.254.169.254, fd00:ec2::254). An IPv4 address inside an IPv6
  one (``::ffff:a.b.c.d``, 6to4, Teredo, NAT64 ``64:ff9b::/96``) is judged as that
  IPv4 address too, and old numeric forms such as ``2130706433`` or ``0x7f.1`` as the
  IPv4 address they mean.

Unless ``NBCAST_WEBHOOK_ALLOWED_HOSTS`` (comma-separated host names, IP addresses and
CIDR networks, e.g. ``hooks.internal,10.20.0.0/16,127.0.0.1``) names the host — then
any address it resolves to is reached — or contains the address. Names match
exactly (case-insensitive, no wildcards).

Two checks, one rule: :func:`check_webhook_url` with ``resolve=False`` (at publish
time) judges what the URL itself says — scheme, host, port, literal addresses,
``localhost`` names; with ``resolve=True`` it also looks the name up and judges every
address. At send time the webhook channel resolves the name, judges every address and
connects to one it judged (:func:`resolve_webhook_host`), so a name cannot answer one
address to the check and another to the connection (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from nbcast.errors import ConfigError
from nbcast.limits import clip

__all__ = [
    "MAX_URL_LENGTH",
    "WebhookPolicy",
    "check_webhook_url",
    "load_webhook_policy",
    "resolve_webhook_host",
    "webhook_url_problem",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[..., Sequence[tuple[Any, ...]]]

MAX_URL_LENGTH = 2048
"""The longest webhook URL accepted, in characters."""

_METADATA = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True)
class WebhookPolicy:
    """What webhook URLs may reach (module docstring). The default is the strict one:
    HTTPS to public addresses only.

    ``allowed`` holds host names, IP addresses and CIDR networks (as strings or
    :mod:`ipaddress` objects) that may be reached even though they are not public —
    ``WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))`` lets a test post to a
    receiver on the loopback interface. A malformed entry is a
    :class:`~nbcast.errors.ConfigError`.
    """

    allow_http: bool = False
    allowed: tuple[str | IPAddress | IPNetwork, ...] = ()
    _names: frozenset[str] = field(init=False, repr=False, compare=False)
    _networks: tuple[IPNetwork, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in self.allowed:
            parsed = _allowed_entry(entry)
            if isinstance(parsed, str):
                names.add(parsed)
            else:
                networks.append(parsed)
        object.__setattr__(self, "allowed", tuple(self.allowed))
        object.__setattr__(self, "_names", frozenset(names))
        object.__setattr__(self, "_networks", tuple(networks))

    @property
    def schemes(self) -> tuple[str, ...]:
        """The URL schemes a webhook may use."""
        return ("https", "http") if self.allow_http else ("https",)

    def names_host(self, host: str) -> bool:
        """Whether the allow-list names ``host`` (normalised: lower case, no final dot)."""
        return _normal_host(host) in self._names

    def allows_address(self, address: IPAddress) -> bool:
        """Whether the allow-list contains ``address`` (or the IPv4 address inside it)."""
        candidates = [address, *_embedded_ipv4(address)]
        return any(
            candidate.version == network.version and candidate in network
            for candidate in candidates
            for network in self._networks
        )

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be reached, or None if it may."""
        if self.allows_address(address):
            return None
        for candidate in (*_embedded_ipv4(address), address):
            reason = _non_public(candidate)
            if reason is not None:
                return reason if candidate == address else f"{reason} (as {candidate})"
        return None


def webhook_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook recipient on syntax alone, or None.

    A webhook is an ``https://`` (or, where an administrator allows it, ``http://``)
    URL with a host and no credentials. Which hosts may be reached is decided when
    publishing (:func:`check_webhook_url` with the configured policy) and again, after
    resolving the name, when sending.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"{clip(url)} is not a URL"
    if parts.scheme not in ("https", "http"):
        return f"{clip(url)} is not an https:// URL"
    if not parts.hostname:
        return f"{clip(url)} has no host"
    if parts.username is not None or parts.password is not None:
        return "a webhook URL must not carry credentials"
    if port == 0:
        return f"{clip(url)} has port 0"
    return None


def load_webhook_policy(environ: Mapping[str, str] | None = None) -> WebhookPolicy:
    """The policy from ``NBCAST_WEBHOOK_ALLOW_HTTP`` and ``NBCAST_WEBHOOK_ALLOWED_HOSTS``
    (module docstring); a malformed value is a :class:`~nbcast.errors.ConfigError`
    naming the variable."""
    env = os.environ if environ is None else environ
    flag = env.get("NBCAST_WEBHOOK_ALLOW_HTTP", "").strip().lower()
    if flag not in _TRUE | _FALSE:
        raise ConfigError(
            f"NBCAST_WEBHOOK_ALLOW_HTTP must be 1/true/yes or 0/false/no, not {flag[:40]!r}"
        )
    entries = [e.strip() for e in env.get("NBCAST_WEBHOOK_ALLOWED_HOSTS", "").split(",")]
    try:
        return WebhookPolicy(allow_http=flag in _TRUE, allowed=tuple(e for e in entries if e))
    except ConfigError as exc:
        raise ConfigError(f"NBCAST_WEBHOOK_ALLOWED_HOSTS: {exc}") from None


def check_webhook_url(url: str, policy: WebhookPolicy, *, resolve: bool) -> None:
    """Refuse ``url`` with a one-line :class:`~nbcast.errors.ConfigError` unless
    ``policy`` lets a webhook reach it (module docstring). ``resolve=True`` also looks
    the host name up and judges every address it has."""
    host, port = _parts(url, policy)
    if resolve:
        try:
            resolve_webhook_host(host, port, policy)
        except OSError as exc:
            raise ConfigError(f"webhook host {host[:80]!r} does not resolve: {exc}") from None
    else:
        _check_static(host, policy)


def resolve_webhook_host(
    host: str, port: int, policy: WebhookPolicy, *, resolver: Resolver = socket.getaddrinfo
) -> list[IPAddress]:
    """Every address of ``host`` (resolved once), each judged by ``policy``: the
    addresses a connection may use, in the resolver's order.

    A literal address is judged as it is. A name the allow-list names is not judged
    (its addresses are what the operator allowed). Raises
    :class:`~nbcast.errors.ConfigError` if any address is refused, and
    :class:`OSError` (:class:`socket.gaierror`) if the name does not resolve.
    """
    literal = _literal_address(host)
    if literal is not None:
        _check_address(host, literal, policy)
        return [literal]
    named = policy.names_host(host)
    if not named:
        _check_static(host, policy)
    found: list[IPAddress] = []
    for *_, sockaddr in resolver(host, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
        if address not in found:
            found.append(address)
    if not found:
        raise socket.gaierror(f"{host} has no address")
    if not named:
        for address in found:
            _check_address(host, address, policy)
    return found


# -- helpers -------------------------------------------------------------------------


def _parts(url: str, policy: WebhookPolicy) -> tuple[str, int]:
    """The host and port of ``url``, after the checks that need no address."""
    if not isinstance(url, str) or not url:
        raise ConfigError("a webhook URL is required")
    if len(url) > MAX_URL_LENGTH:
        raise ConfigError(f"a webhook URL is at most {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise ConfigError("a webhook URL may not contain spaces or control characters")
    shown = url if len(url) <= 80 else url[:77] + "..."
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"webhook URL {_masked(shown)!r} is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in policy.schemes:
        allowed = " or ".join(f"{s}://" for s in policy.schemes)
        hint = "" if policy.allow_http else " (http:// needs NBCAST_WEBHOOK_ALLOW_HTTP=1)"
        raise ConfigError(f"webhook URL {_masked(shown)!r} must start with {allowed}{hint}")
    if "@" in parts.netloc:
        raise ConfigError("a webhook URL may not carry a user name or password")
    host = parts.hostname or ""
    if not host:
        raise ConfigError(f"webhook URL {shown!r} has no host")
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"webhook URL {shown!r}: the port must be in 1..65535")
    return host, port or (443 if scheme == "https" else 80)


def _check_static(host: str, policy: WebhookPolicy) -> None:
    """What can be judged without a lookup: a literal address, a ``localhost`` name."""
    if policy.names_host(host):
        return
    literal = _literal_address(host)
    if literal is not None:
        _check_address(host, literal, policy)
        return
    name = _normal_host(host)
    if name == "localhost" or name.endswith(".localhost"):
        loopback = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
        if not any(policy.allows_address(address) for address in loopback):
            raise ConfigError(
                f"webhook host {name!r} is a loopback address; "
                "allow it with NBCAST_WEBHOOK_ALLOWED_HOSTS"
            )


def _check_address(host: str, address: IPAddress, policy: WebhookPolicy) -> None:
    reason = policy.refusal(address)
    if reason is not None:
        shown = _normal_host(host)[:80]
        # An IPv6 literal is shown as written; a name or an old numeric form with its address.
        where = shown if ":" in shown or shown == str(address) else f"{shown!r} ({address})"
        raise ConfigError(
            f"webhook host {where} is {reason}; allow it with NBCAST_WEBHOOK_ALLOWED_HOSTS"
        )


def _non_public(address: IPAddress) -> str | None:
    """Why ``address`` is not a public one, or None."""
    if address in _METADATA:
        return "a cloud metadata address"
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.version == 4 and address in _SHARED, "a shared (CGNAT) address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a public address"),
    )
    return next((reason for flagged, reason in checks if flagged), None)


def _embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses carried inside an IPv6 one (mapped, 6to4, Teredo, NAT64)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _literal_address(host: str) -> IPAddress | None:
    """``host`` as an IP address, if it is one — including the old numeric IPv4 forms
    (``2130706433``, ``0x7f.1``, ``127.1``) that resolvers still accept."""
    text = host.strip("[]").partition("%")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(text) and any(ch.isdigit() for ch in text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").lower().removesuffix(".")


def _allowed_entry(entry: str | IPAddress | IPNetwork) -> str | IPNetwork:
    """One allow-list entry as a host name or a network."""
    if isinstance(entry, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return ipaddress.ip_network(entry)
    if isinstance(entry, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return entry
    if not isinstance(entry, str):
        raise ConfigError(f"{entry!r} is not a host name, IP address or network")
    text = entry.strip()
    bare = text.strip("[]")
    try:
        return ipaddress.ip_network(bare, strict=True)
    except ValueError as exc:
        if "/" in bare:
            raise ConfigError(f"{text[:80]!r} is not a network: {exc}") from None
    name = _normal_host(text)
    if not _HOST_NAME.fullmatch(name):
        raise ConfigError(f"{text[:80]!r} is not a host name, IP address or CIDR network")
    return name


def _masked(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    userinfo, _, host = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"
