"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps what it receives.

Needs the ``testing`` extra (``pip install 'nbcast[testing]'``, which brings aiosmtpd);
importing this module without it raises an :class:`ImportError` that says so.

Point nbcast's email channel at it in a test::

    from nbcast.testing.smtp import smtp_server

    with smtp_server() as server:
        channel = EmailChannel(server.host, server.port, sender="nbcast@example.com")
        ...
        server.messages[0].mail["Subject"], server.refused

or run nbcast against it as a local mailbox that writes every message it accepts to
``NNN-<recipient>.eml`` files (one per recipient, numbered in arrival order)::

    with smtp_server(folder="mailbox") as server:
        os.environ["NBCAST_SMTP_URL"] = f"smtp://{server.host}:{server.port}"
        ...
        server.files     # [Path("mailbox/001-cfo@example.com.eml"), ...]

Options (all keyword-only, all off by default):

- ``folder``: write each accepted message to that folder (created if missing), as
  above; :attr:`FakeSMTPServer.files` lists the files written.
- ``accept_reply``: what to answer an accepted message (``"250 2.0.0 Ok: queued"``).
- ``refuse_rate`` / ``refuse_reply`` / ``seed``: refuse that fraction of messages at
  the end of DATA, with ``"451 4.3.0 Try again later"`` unless told otherwise (give
  ``"550 5.7.1 Rejected"`` for a permanent refusal).
- ``refuse_recipients``: ``{address: reply}`` refused at RCPT (``"550 5.1.1 …"``).
- ``hang_after_data``: seconds to wait, after storing a message, before answering it:
  past the client's timeout this is "accepted, then the answer was lost".
- ``tls=True``: a self-signed certificate for 127.0.0.1 (made with ``cryptography``),
  offered through STARTTLS (``require_starttls=True`` insists on it) or, with
  ``implicit_tls=True``, on connect (SMTPS); ``server.client_context`` trusts it.
- ``users={"name": "password"}``: AUTH PLAIN required (after TLS, if ``tls``).

:meth:`FakeSMTPServer.refuse_next` scripts exact refusals. Every record is appended
under a lock and read as a snapshot, so tests and other threads can look while mail
arrives. The server listens on a free port chosen when it starts (a few ports are
tried if another process takes one first); ``port`` is final once started.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import os
import random
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

from nbcast.testing.http import free_port

try:
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session
except ImportError as exc:  # the optional dependency: say which extra brings it
    raise ImportError(
        "nbcast.testing.smtp needs aiosmtpd, which the testing extra installs: "
        "pip install 'nbcast[testing]'",
        name=exc.name,
    ) from exc

__all__ = ["FakeSMTPServer", "ReceivedMail", "RefusedMail", "free_port", "smtp_server"]

_START_TRIES = 5
"""Ports tried when the chosen free port is taken before the server binds it."""


@dataclass(frozen=True)
class ReceivedMail:
    """A message the server accepted (or stored before hanging)."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    raw: bytes
    session: int
    """Which SMTP session carried it (1, 2, … in the order sessions sent mail)."""

    @property
    def mail(self) -> EmailMessage:
        """The message, parsed with the modern policy (``get_body``, ``iter_attachments``)."""
        parsed = message_from_bytes(self.raw, policy=default_policy)
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass(frozen=True)
class RefusedMail:
    """A transaction the server refused, and what it answered."""

    stage: str
    """``"RCPT"`` or ``"DATA"``."""
    mail_from: str
    rcpt_tos: tuple[str, ...]
    reply: str


@dataclass
class _Handler:
    refuse_rate: float
    refuse_reply: str
    refuse_recipients: dict[str, str]
    hang_after_data: float | None
    rng: random.Random
    accept_reply: str
    folder: Path | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    messages: list[ReceivedMail] = field(default_factory=list)
    refused: list[RefusedMail] = field(default_factory=list)
    sessions: dict[int, Session] = field(default_factory=dict)
    servers: dict[int, Any] = field(default_factory=dict)
    scripted: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    async def handle_RCPT(
        self,
        server: Any,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        reply = self.refuse_recipients.get(address)
        if reply is not None:
            with self.lock:
                self.refused.append(
                    RefusedMail(
                        stage="RCPT",
                        mail_from=envelope.mail_from or "",
                        rcpt_tos=(address,),
                        reply=reply,
                    )
                )
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        with self.lock:
            # Sessions are kept (not just their ids) so an id is never reused.
            number = next(
                (n for n, s in self.sessions.items() if s is session), len(self.sessions) + 1
            )
            self.sessions[number] = session
            self.servers[number] = server
            reply = self.scripted.pop(0) if self.scripted else None
            if reply is None and self.refuse_rate and self.rng.random() < self.refuse_rate:
                reply = self.refuse_reply
            if reply is not None:
                self.refused.append(
                    RefusedMail(
                        stage="DATA",
                        mail_from=envelope.mail_from or "",
                        rcpt_tos=tuple(envelope.rcpt_tos),
                        reply=reply,
                    )
                )
                return reply
            self.messages.append(
                ReceivedMail(
                    mail_from=envelope.mail_from or "",
                    rcpt_tos=tuple(envelope.rcpt_tos),
                    raw=raw,
                    session=number,
                )
            )
            if self.folder is not None:
                self._write(raw, envelope.rcpt_tos)
        if self.hang_after_data is not None:
            await asyncio.sleep(self.hang_after_data)
        return self.accept_reply

    def _write(self, raw: bytes, recipients: list[str]) -> None:
        """One ``NNN-<recipient>.eml`` per recipient (under ``lock``)."""
        assert self.folder is not None
        for recipient in recipients:
            safe = re.sub(r"[^A-Za-z0-9@._+-]", "_", recipient)[:100]
            path = self.folder / f"{len(self.files) + 1:03d}-{safe}.eml"
            path.write_bytes(raw)
            self.files.append(path)


class FakeSMTPServer:
    """A running fake SMTP server; see the module docstring and :func:`smtp_server`."""

    def __init__(
        self,
        *,
        refuse_rate: float = 0.0,
        refuse_reply: str = "451 4.3.0 Try again later",
        refuse_recipients: dict[str, str] | None = None,
        hang_after_data: float | None = None,
        tls: bool = False,
        implicit_tls: bool = False,
        require_starttls: bool = False,
        users: dict[str, str] | None = None,
        seed: int | None = None,
        folder: str | os.PathLike[str] | None = None,
        accept_reply: str = "250 2.0.0 Ok: queued",
    ) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.folder = None if folder is None else Path(folder)
        self._handler = _Handler(
            refuse_rate=refuse_rate,
            refuse_reply=refuse_reply,
            refuse_recipients=dict(refuse_recipients or {}),
            hang_after_data=hang_after_data,
            rng=random.Random(seed),
            accept_reply=accept_reply,
            folder=self.folder,
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="nbcast-smtp-")
        self.client_context: ssl.SSLContext | None = None
        kwargs: dict[str, Any] = {"server_hostname": "fake-smtp.test", "ident": "nbcast fake"}
        if tls or implicit_tls:
            server_context, self.client_context = _self_signed_contexts(Path(self._tmp.name))
            if implicit_tls:
                kwargs["ssl_context"] = server_context
            else:
                kwargs["tls_context"] = server_context
                kwargs["require_starttls"] = require_starttls
        if users is not None:
            accounts = dict(users)

            def authenticate(
                server: Any, session: Session, envelope: Envelope, mechanism: str, data: Any
            ) -> AuthResult:
                ok = (
                    isinstance(data, LoginPassword)
                    and accounts.get(data.login.decode()) == data.password.decode()
                )
                return AuthResult(success=ok, handled=False)

            kwargs["authenticator"] = authenticate
            kwargs["auth_required"] = True
            kwargs["auth_require_tls"] = tls or implicit_tls
            # PLAIN only: one mechanism, so a wrong password gets one clean 535.
            kwargs["auth_exclude_mechanism"] = ["LOGIN"]
        self._kwargs = kwargs
        self._controller: Controller | None = None

    def start(self) -> FakeSMTPServer:
        """Start serving on a free port (in aiosmtpd's thread)."""
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
        error: Exception | None = None
        for _ in range(_START_TRIES):  # the port is free when chosen; someone may take it
            port = free_port()
            controller = Controller(self._handler, hostname=self.host, port=port, **self._kwargs)
            try:
                controller.start()
            except (OSError, RuntimeError) as exc:
                error = exc
                with contextlib.suppress(Exception):
                    controller.stop(no_assert=True)
                continue
            self._controller, self.port = controller, port
            return self
        self._tmp.cleanup()
        raise RuntimeError(f"the fake SMTP server could not start: {error}") from error

    def stop(self) -> None:
        """Stop serving; hanging replies are cancelled."""
        try:
            if self._controller is not None:
                self._controller.stop()
                self._controller = None
        finally:
            self._tmp.cleanup()

    def __enter__(self) -> FakeSMTPServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def messages(self) -> list[ReceivedMail]:
        """Messages stored so far (a snapshot)."""
        with self._handler.lock:
            return list(self._handler.messages)

    @property
    def refused(self) -> list[RefusedMail]:
        """Transactions refused so far (a snapshot)."""
        with self._handler.lock:
            return list(self._handler.refused)

    @property
    def files(self) -> list[Path]:
        """The ``.eml`` files written so far, in order (a snapshot; empty without ``folder``)."""
        with self._handler.lock:
            return list(self._handler.files)

    @property
    def sessions(self) -> int:
        """How many SMTP sessions reached DATA."""
        with self._handler.lock:
            return len(self._handler.sessions)

    def refuse_next(self, *replies: str) -> None:
        """Answer the next messages' DATA with these replies, in order."""
        with self._handler.lock:
            self._handler.scripted.extend(replies)

    def drop_connections(self) -> None:
        """Close every session that sent mail, as a server's idle timeout would;
        returns once they are closed."""
        with self._handler.lock:
            servers = list(self._handler.servers.values())

        async def close_all() -> None:
            for server in servers:
                if server.transport is not None:
                    server.transport.close()

        assert self._controller is not None, "the server is not running"
        asyncio.run_coroutine_threadsafe(close_all(), self._controller.loop).result(5)
        time.sleep(0.05)  # let the FIN reach the client

    def set_hang_after_data(self, seconds: float | None) -> None:
        """Change how long the server waits before answering a stored message."""
        self._handler.hang_after_data = seconds


@contextlib.contextmanager
def smtp_server(**options: Any) -> Iterator[FakeSMTPServer]:
    """A started :class:`FakeSMTPServer`, stopped on exit (options: module docstring)."""
    with FakeSMTPServer(**options) as server:
        yield server


def _self_signed_contexts(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh self-signed certificate for 127.0.0.1, and a
    client context that trusts exactly that certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file = folder / "cert.pem"
    key_file = folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client
