"""The address a request comes from, behind a reverse proxy or not.

With ``ServerApp.trust_xheaders``, jupyter-server (tornado) takes a request's address
from its ``X-Real-Ip`` or ``X-Forwarded-For`` header whoever sent it — so a client
that talks to the server directly can claim any address: a fresh one per request
escapes the public endpoints' per-address rate limit, and the recorded opening of a
signed link names a network the reader never was on.

nbcast's public endpoints (signed links, one-click unsubscribe) therefore decide the
address themselves (:meth:`TrustedProxies.client_address`):

- the connection's own peer address is the address, unless ``trust_xheaders`` is on
  **and** that peer is one of ``NbcastApp.trusted_proxies`` (IP addresses or CIDR
  networks: the reverse proxies in front of the server);
- from a trusted proxy, ``X-Forwarded-For`` is read from the right (the hop the proxy
  itself appended) and the first address that is not itself a trusted proxy is the
  client's; ``X-Real-Ip`` is used only when there is no ``X-Forwarded-For``. This
  differs from tornado, which prefers ``X-Real-Ip``: every common proxy (nginx with
  ``$proxy_add_x_forwarded_for``, HAProxy ``option forwardfor``, Caddy, Traefik,
  cloud load balancers) appends to ``X-Forwarded-For``, while ``X-Real-Ip`` is set
  only where someone configured it — elsewhere a client's own ``X-Real-Ip`` would
  pass through the proxy untouched;
- anything that is not an IP address (a malformed header) falls back to the peer.

``trusted_proxies`` is **empty by default**: a server that trusts forwarded headers
must name its proxies (``--NbcastApp.trusted_proxies=127.0.0.1`` for a proxy on the
same machine). Loopback is not trusted implicitly, because a report's kernel runs on
the same machine as the server and could otherwise connect to it and claim any
address. With ``trust_xheaders`` on and no proxy named, the server warns at start:
forwarded addresses are ignored, so every reader behind the proxy shares one bucket.
At most :data:`MAX_TRUSTED_PROXIES` entries; at most :data:`MAX_FORWARDED_HOPS`
hops of ``X-Forwarded-For`` are looked at.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nbcast.errors import ConfigError
from nbcast.limits import clip

__all__ = ["MAX_FORWARDED_HOPS", "MAX_TRUSTED_PROXIES", "TrustedProxies"]

MAX_TRUSTED_PROXIES = 100
"""The most entries ``NbcastApp.trusted_proxies`` may have."""
MAX_FORWARDED_HOPS = 20
"""The most ``X-Forwarded-For`` hops looked at (from the right)."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    """``text`` as an IP address (IPv4-mapped IPv6 as IPv4, a zone dropped), or None."""
    try:
        ip = ipaddress.ip_address(text.strip().split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@dataclass(frozen=True)
class TrustedProxies:
    """Whether forwarded headers are trusted, and from which peers (module docstring)."""

    networks: tuple[Network, ...] = ()
    trust_xheaders: bool = False

    @classmethod
    def parse(cls, entries: Iterable[str], *, trust_xheaders: bool) -> TrustedProxies:
        """From ``NbcastApp.trusted_proxies``; :class:`ConfigError` naming a bad entry."""
        items = list(entries)
        if len(items) > MAX_TRUSTED_PROXIES:
            raise ConfigError(f"NbcastApp.trusted_proxies: at most {MAX_TRUSTED_PROXIES} entries")
        networks = []
        for item in items:
            try:
                networks.append(ipaddress.ip_network(str(item).strip(), strict=False))
            except ValueError:
                raise ConfigError(
                    f"NbcastApp.trusted_proxies: {clip(item)} is not an IP address or network"
                ) from None
        return cls(networks=tuple(networks), trust_xheaders=trust_xheaders)

    def trusts(self, address: str) -> bool:
        """Whether ``address`` is one of the trusted proxies."""
        ip = _address(address)
        return ip is not None and any(ip in network for network in self.networks)

    def client_address(self, peer: str, headers: Mapping[str, str]) -> str:
        """The client's address for a request from ``peer`` with ``headers`` (module
        docstring)."""
        if not self.trust_xheaders or not self.trusts(peer):
            return peer
        forwarded = headers.get("X-Forwarded-For")
        if forwarded:
            hops = [hop.strip() for hop in forwarded.split(",")][-MAX_FORWARDED_HOPS:]
            for hop in reversed(hops):
                ip = _address(hop)
                if ip is None:
                    return peer  # nonsense from the chain: the proxy's own address
                if not any(ip in network for network in self.networks):
                    return str(ip)
            return str(_address(hops[0]))  # every hop a proxy: the first of them
        real = _address(headers.get("X-Real-Ip") or "")
        return str(real) if real is not None else peer
