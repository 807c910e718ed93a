"""The ``email`` channel: one SMTP session reused across sends.

Each message is an :class:`email.message.EmailMessage`: the report's HTML with a
``text/plain`` alternative, the rendered files as attachments (unless ``attach=False``,
for subscriptions that get signed links instead), and these headers:

- ``Message-ID: <{key}.{random}@{sender domain}>`` — the ledger key lets a bounce, a
  complaint or an audit be traced to its delivery; the random part keeps every
  attempt's id unique, as RFC 5322 wants.
- ``X-Nbcast-Delivery: {key}``, and ``Auto-Submitted: auto-generated`` (RFC 3834, so
  vacation responders stay quiet).
- ``List-Unsubscribe: <https://…>`` and ``List-Unsubscribe-Post:
  List-Unsubscribe=One-Click`` (RFC 8058) when the message has an unsubscribe URL.
  (RFC 8058 also wants a DKIM signature covering them: that is the relay's job.)

The receipt records the server's final reply to DATA (``"250 2.0.0 Ok: queued as
…"``), the Message-ID and any recipients refused while others were accepted (a
recipient string may list several addresses). Every server reply kept, there or in
an error, is cut to a few hundred characters.

Error mapping (what the ledger is told):

==========================================================  ===========================
What happened                                               Raised
==========================================================  ===========================
connection refused or timed out, TLS failure, dropped       TransientChannelError
before DATA was answered with 354
4xx reply to MAIL, RCPT or DATA (451 try later, 452 full)   TransientChannelError
5xx reply to MAIL, RCPT (all recipients) or DATA            PermanentChannelError
(550 unknown mailbox, 552 too big, 554 rejected)
5xx while opening the session: greeting, EHLO, STARTTLS,    TransientChannelError
AUTH (535 bad credentials, 530 STARTTLS required)           (message says "configuration")
timeout or disconnect after the payload was sent, before    OutcomeUnknownError
the server's reply (or any other failure in DATA)
503 to MAIL (the session is out of step): reconnect         TransientChannelError
a non-ASCII address (SMTPUTF8 is not used)                  PermanentChannelError
==========================================================  ===========================

Session errors are transient on purpose: they say nothing about the message or the
recipient but about our configuration or the relay's state, and failing every pending
delivery at once because a password was rotated a minute early would be worse than a
few retries while an operator fixes it (the ledger still gives up after
:attr:`~nbcast.delivery.channels.base.Channel.max_attempts`).

Connection reuse: the first send connects (and runs STARTTLS / AUTH); later sends run
MAIL/RCPT/DATA on the same session — four round trips per message instead of eight
plus a TLS handshake. A session the server dropped while idle is noticed at MAIL
(a disconnect or a 421) and reopened once, which is safe because nothing of the
message was sent yet. After an unknown outcome the session is closed (its state is
unknown too); after a refusal it is ``RSET`` and kept. :meth:`EmailChannel.close`
sends QUIT.

Thread-safety: a channel holds one SMTP session, which carries one transaction at a
time, so sends through one channel are serialised by a lock. Give each delivery worker
thread its own channel: that is what makes sends run in parallel.
"""

from __future__ import annotations

import logging
import re
import smtplib
import ssl
import threading
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from email.headerregistry import BaseHeader, HeaderRegistry
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import format_datetime, getaddresses, parseaddr
from secrets import token_hex
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from nbcast.delivery.channels._peer import peer_text
from nbcast.delivery.channels.base import Attachment, Channel, Message, Receipt
from nbcast.errors import (
    ConfigError,
    OutcomeUnknownError,
    PermanentChannelError,
    TransientChannelError,
)
from nbcast.limits import clip

if TYPE_CHECKING:
    from nbcast.delivery.settings import DeliverySettings

__all__ = ["EmailChannel"]

log = logging.getLogger(__name__)

Security = Literal["none", "starttls", "ssl"]
_SECURITIES: tuple[str, ...] = ("none", "starttls", "ssl")
_LEADING_DOT = re.compile(rb"(?m)^\.")
_BODY_CACHE_SIZE = 8
_MAX_LINE = 998  # RFC 5322 2.1.1
_ADDRESS = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
"""What a subscription's ``to`` must look like: one address, with a dot in its domain."""


class _HeaderClasses(HeaderRegistry):
    """The standard header registry, remembering the class it makes for each name
    (the stock one creates a new class on every lookup: most of a header's cost)."""

    def __init__(self) -> None:
        super().__init__()
        self._made: dict[str, type[BaseHeader]] = {}

    def __getitem__(self, name: str) -> type[BaseHeader]:
        key = name.lower()
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = super().__getitem__(name)
        return made


# 7bit: non-ASCII headers are RFC 2047-encoded and bodies quoted-printable or base64,
# so no server needs 8BITMIME or SMTPUTF8.
_POLICY = SMTP_POLICY.clone(cte_type="7bit", header_factory=_HeaderClasses())


def _header(name: str, value: str) -> bytes:
    """One header line (folded, CRLF-terminated)."""
    plain = value.isascii() and "\r" not in value and "\n" not in value
    if plain and len(name) + 2 + len(value) <= _MAX_LINE:
        return f"{name}: {value}\r\n".encode("ascii")
    # Raises ValueError for a line break in the value (header injection).
    return _POLICY.fold_binary(name, _POLICY.header_store_parse(name, value)[1])


def _fits_7bit(text: str) -> bool:
    return text.isascii() and all(len(line) <= _MAX_LINE for line in text.splitlines())


class _SessionError(Exception):
    """The session could not be opened (connect, greeting, EHLO, STARTTLS, AUTH)."""


class EmailChannel(Channel):
    """Sends reports through an SMTP relay (module docstring)."""

    configured_by = "NBCAST_SMTP_URL"

    name: ClassVar[str] = "email"
    attaches_files: ClassVar[bool] = True
    html_body: ClassVar[bool] = True
    one_click_unsubscribe: ClassVar[bool] = True

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], settings: DeliverySettings
    ) -> EmailChannel | None:
        """Configured by ``NBCAST_SMTP_URL`` and ``NBCAST_SMTP_FROM``
        (:mod:`nbcast.delivery.settings`); None without an SMTP URL."""
        if not settings.smtp_url:
            return None
        from nbcast.delivery.settings import smtp_options

        return cls(sender=settings.smtp_from, **smtp_options(settings.smtp_url))  # type: ignore[arg-type]

    @classmethod
    def check_recipient(cls, to: str) -> str | None:
        """An email address: ``local@domain.tld``, no blanks."""
        return None if _ADDRESS.fullmatch(to) else f"{clip(to)} is not an email address"

    @classmethod
    def normalize_recipient(cls, to: str) -> str:
        """Without case: ``CFO@Example.com`` and ``cfo@example.com`` are one person."""
        return to.strip().lower()

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 25,
        *,
        sender: str,
        security: Security = "none",
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        attach: bool = True,
    ) -> None:
        if security not in _SECURITIES:
            raise ConfigError(f"email security must be one of {_SECURITIES}, not {security!r}")
        if (username is None) != (password is None):
            raise ConfigError("email username and password go together")
        address = parseaddr(sender)[1]
        if "@" not in address:
            raise ConfigError(f"email sender {sender!r} has no address")
        self.host = host
        self.port = port
        self.sender = sender
        self.security: Security = security
        self.username = username
        self.password = password
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.attach = attach
        self._envelope_from = address
        self._domain = address.rpartition("@")[2]
        self._smtp: smtplib.SMTP | None = None
        self._from_header = _header("From", sender)
        self._bodies: OrderedDict[tuple[str, str, tuple[Attachment, ...]], bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.sessions_opened = 0
        """How many SMTP sessions this channel opened (reconnects included)."""

    # -- the message ---------------------------------------------------------------

    def render(self, message: Message) -> tuple[str, bytes]:
        """The Message-ID and the bytes of the message sent for ``message`` (a fresh
        Message-ID each call), dot-stuffed and ending in CRLF, ready for DATA."""
        message_id = f"<{message.key}.{token_hex(8)}@{self._domain}>"
        headers = [
            self._from_header,
            _header("To", message.recipient),
            # A line break in a header is refused; a subject is one line.
            _header("Subject", " ".join(message.subject.split())),
            _header("Date", format_datetime(datetime.now(UTC))),
            _header("Message-ID", message_id),
            _header("X-Nbcast-Delivery", message.key),
            b"Auto-Submitted: auto-generated\r\n",
        ]
        if message.unsubscribe_url:
            headers.append(_header("List-Unsubscribe", f"<{message.unsubscribe_url}>"))
            headers.append(b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n")
        return message_id, b"".join(headers) + self._body(message)

    def _body(self, message: Message) -> bytes:
        """The MIME entity (its headers, a blank line, its parts), dot-stuffed.

        Every recipient of a run gets the same report, so the entity is built once and
        only the few headers above are made per message: building MIME with the
        :mod:`email` package costs milliseconds, which would cap a channel at a few
        hundred messages a second.
        """
        attachments = message.attachments if self.attach else ()
        key = (message.html, message.text, attachments)
        body = self._bodies.get(key)
        if body is not None:
            self._bodies.move_to_end(key)
            return body
        entity = EmailMessage(policy=_POLICY)
        entity.set_content(message.text)
        # Long or non-ASCII HTML (nbconvert inlines images as base64 in very long
        # lines) goes as base64, which is fast; quoted-printable would be slow.
        entity.make_alternative(boundary=f"=_alt_{token_hex(12)}")
        html_cte = None if _fits_7bit(message.html) else "base64"
        entity.add_alternative(message.html, subtype="html", cte=html_cte)
        if attachments:
            entity.make_mixed(boundary=f"=_mix_{token_hex(12)}")
            for attachment in attachments:
                maintype, _, subtype = attachment.media_type.partition("/")
                entity.add_attachment(
                    attachment.content,
                    maintype=maintype or "application",
                    subtype=subtype or "octet-stream",
                    filename=attachment.filename,
                )
        body = _LEADING_DOT.sub(b"..", entity.as_bytes())
        if not body.endswith(b"\r\n"):
            body += b"\r\n"
        self._bodies[key] = body
        if len(self._bodies) > _BODY_CACHE_SIZE:
            self._bodies.popitem(last=False)
        return body

    # -- sending -------------------------------------------------------------------

    def send(self, message: Message) -> Receipt:
        """Send ``message`` in one SMTP transaction (error mapping: module docstring)."""
        recipients = [address for _, address in getaddresses([message.recipient]) if address]
        if not recipients:
            raise PermanentChannelError(f"no email address in {message.recipient!r}")
        if not all(address.isascii() for address in recipients):
            # smtplib would fail half-way through the envelope; SMTPUTF8 is not assumed.
            raise PermanentChannelError(
                f"{message.recipient!r}: non-ASCII addresses need SMTPUTF8, which is not used"
            )
        with self._lock:
            try:
                message_id, payload = self.render(message)
            except ValueError as exc:  # a line break in a recipient or subject
                raise PermanentChannelError(f"message cannot be sent: {exc}") from exc
            for _ in range(2):
                reused = self._smtp is not None
                smtp = self._session()
                try:
                    refused = self._envelope(smtp, recipients)
                    break
                except (TransientChannelError, PermanentChannelError):
                    raise
                except _StaleSession:
                    # An idle session the server dropped: reopen it once, as nothing of
                    # this message went out. A fresh session that drops is an outage.
                    self._drop()
                    if not reused:
                        raise TransientChannelError(
                            f"SMTP server {self.host}:{self.port} closed the session"
                        ) from None
                except Exception as exc:  # whatever it was, the session's state is unknown
                    self._drop()
                    raise TransientChannelError(
                        f"SMTP envelope failed: {peer_text(repr(exc))}"
                    ) from exc
            else:  # pragma: no cover - the second pass always uses a fresh session
                raise TransientChannelError("SMTP session could not be reopened")
            try:
                code, reply = self._data(smtp, payload)
            except (TransientChannelError, PermanentChannelError, OutcomeUnknownError):
                raise
            except Exception as exc:  # the payload may have gone out: unknown, and reconnect
                self._drop()
                raise OutcomeUnknownError(f"SMTP DATA failed: {peer_text(repr(exc))}") from exc
        detail: dict[str, Any] = {
            "smtp": f"{code} {reply}",
            "message_id": message_id,
            "refused": refused,
        }
        return Receipt(detail)

    def _session(self) -> smtplib.SMTP:
        if self._smtp is not None:
            return self._smtp
        try:
            self._smtp = self._open()
        except _SessionError as exc:
            raise TransientChannelError(f"SMTP configuration: {exc}") from exc
        except (OSError, smtplib.SMTPException) as exc:
            raise TransientChannelError(
                f"cannot reach SMTP server {self.host}:{self.port}: {peer_text(exc)}"
            ) from exc
        self.sessions_opened += 1
        return self._smtp

    def _open(self) -> smtplib.SMTP:
        context = self.ssl_context
        if context is None and self.security != "none":
            context = ssl.create_default_context()
        smtp: smtplib.SMTP
        try:
            # The constructor connects (and remembers the host name TLS checks).
            if self.security == "ssl":
                smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        except smtplib.SMTPConnectError as exc:
            raise _SessionError(f"greeting {exc.smtp_code} {_text(exc.smtp_error)}") from exc
        except ssl.SSLError as exc:
            raise _SessionError(f"TLS: {exc}") from exc
        try:
            smtp.ehlo_or_helo_if_needed()
            if self.security == "starttls":
                try:
                    code, reply = smtp.starttls(context=context)
                except smtplib.SMTPNotSupportedError as exc:
                    raise _SessionError("server does not offer STARTTLS") from exc
                if code != 220:
                    raise _SessionError(f"STARTTLS {code} {_text(reply)}")
                smtp.ehlo()
            if self.username is not None and self.password is not None:
                try:
                    smtp.login(self.username, self.password)
                except smtplib.SMTPAuthenticationError as exc:
                    raise _SessionError(f"AUTH {exc.smtp_code} {_text(exc.smtp_error)}") from exc
                except smtplib.SMTPNotSupportedError as exc:
                    raise _SessionError("server does not offer AUTH") from exc
                except smtplib.SMTPException as exc:
                    raise _SessionError(f"AUTH: {peer_text(exc)}") from exc
        except smtplib.SMTPHeloError as exc:
            smtp.close()
            raise _SessionError(f"EHLO {exc.smtp_code} {_text(exc.smtp_error)}") from exc
        except ssl.SSLError as exc:
            smtp.close()
            raise _SessionError(f"TLS: {exc}") from exc
        except BaseException:
            smtp.close()
            raise
        return smtp

    def _envelope(self, smtp: smtplib.SMTP, recipients: list[str]) -> dict[str, str]:
        """MAIL and RCPT; the recipients refused while others were accepted."""
        try:
            code, reply = smtp.mail(self._envelope_from)
            if code == 421:
                raise _StaleSession
            if code == 503:  # "bad sequence": our session is out of step, not the message
                self._drop()
                raise TransientChannelError(
                    f"SMTP MAIL FROM out of sequence: {code} {_text(reply)}"
                )
            if code != 250:
                self._reset(smtp)
                raise _refusal("MAIL FROM", code, reply)
            refused: dict[str, tuple[int, str]] = {}
            for recipient in recipients:
                code, reply = smtp.rcpt(recipient)
                if code not in (250, 251):
                    refused[recipient] = (code, _text(reply))
        except smtplib.SMTPServerDisconnected as exc:
            raise _StaleSession from exc
        except OSError as exc:
            self._drop()
            raise TransientChannelError(f"SMTP connection failed: {exc}") from exc
        if len(refused) == len(recipients):
            self._reset(smtp)
            # One temporary refusal makes the whole send worth retrying.
            replies = sorted(refused.values(), key=lambda r: not 400 <= r[0] < 500)
            raise _refusal("RCPT TO", *replies[0])
        return {address: f"{code} {reply}" for address, (code, reply) in refused.items()}

    def _data(self, smtp: smtplib.SMTP, payload: bytes) -> tuple[int, str]:
        """DATA with a dot-stuffed ``payload``, written out (not
        :meth:`smtplib.SMTP.data`) to tell apart a failure before the payload went out
        (retry) from one after it (outcome unknown)."""
        try:
            smtp.putcmd("data")
            code, reply = smtp.getreply()
        except (smtplib.SMTPServerDisconnected, OSError) as exc:
            self._drop()
            raise TransientChannelError(f"SMTP connection lost before DATA: {exc}") from exc
        if code != 354:
            self._reset(smtp)
            raise _refusal("DATA", code, reply)
        try:
            smtp.send(payload + b".\r\n")
            code, reply = smtp.getreply()
        except (smtplib.SMTPServerDisconnected, OSError) as exc:
            self._drop()
            raise OutcomeUnknownError(
                f"SMTP server {self.host}:{self.port} did not answer the message: {exc}"
            ) from exc
        if code != 250:
            self._reset(smtp)
            raise _refusal("DATA", code, reply)
        return code, _text(reply)

    def _reset(self, smtp: smtplib.SMTP) -> None:
        try:
            code, _ = smtp.rset()
        except (smtplib.SMTPException, OSError):
            code = 0
        if code != 250:
            self._drop()

    def _drop(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is not None:
            smtp.close()

    def close(self) -> None:
        """QUIT the session, if one is open."""
        with self._lock:
            smtp, self._smtp = self._smtp, None
            if smtp is None:
                return
            try:
                smtp.quit()
            except (smtplib.SMTPException, OSError):
                smtp.close()


class _StaleSession(Exception):
    """The server closed a session before this transaction began (safe to reopen)."""


def _text(reply: bytes | str) -> str:
    """A server reply as it is kept in receipts and errors: a bounded excerpt."""
    return peer_text(reply)


def _refusal(
    stage: str, code: int, reply: bytes | str
) -> TransientChannelError | PermanentChannelError:
    text = f"SMTP {stage} refused: {code} {_text(reply)}"
    if 400 <= code < 500:
        return TransientChannelError(text)
    return PermanentChannelError(text)
