"""Real local peers for testing a deployment of nbcast — no mocks.

nbcast's own tests run against these, and so can yours (the way httpx ships
``MockTransport``): each one listens on 127.0.0.1 on a free port, speaks the real
protocol, records what it received, and can be told to misbehave.

=======================================  ==============================================
:mod:`nbcast.testing.smtp`               an SMTP server (aiosmtpd): ``smtp_server()``;
                                         refusals, hangs, STARTTLS/SMTPS, AUTH, and a
                                         mailbox folder of ``.eml`` files.
                                         Needs ``pip install 'nbcast[testing]'``.
:mod:`nbcast.testing.slack_api`          the slice of Slack's Web API slack_sdk uses:
                                         ``slack_server()``; rate limits, 5xx, hangs,
                                         garbled answers
:mod:`nbcast.testing.webhook`            a webhook receiver: ``webhook_receiver()``;
                                         scripted answers, TLS, and a receiver that
                                         answers garbage
:mod:`nbcast.testing.http`               the HTTP server the two above are built on:
                                         ``LocalHTTPServer(app)``
:mod:`nbcast.testing.postgres`           a scratch PostgreSQL database, created and
                                         dropped: ``scratch_database(admin_url)``
=======================================  ==============================================

For example, a delivery end to end into a local mailbox::

    from nbcast.testing.smtp import smtp_server

    with smtp_server(folder=tmp_path / "mailbox") as mailbox:
        env = {"NBCAST_SMTP_URL": f"smtp://{mailbox.host}:{mailbox.port}", ...}
        subprocess.run(["nbcast", "delivery-worker", "--exit-when-idle"], env=env)
        print(mailbox.messages[0].mail["Subject"], mailbox.files)  # 001-cfo@example.com.eml

Importing this package, :mod:`~nbcast.testing.http`, :mod:`~nbcast.testing.slack_api`,
:mod:`~nbcast.testing.webhook` or :mod:`~nbcast.testing.postgres` needs nothing beyond
nbcast's own dependencies. Every record a peer keeps is appended under a lock and read
as a snapshot, so a test can look while traffic arrives. These are test peers: they
bind to loopback only and keep everything in memory.
"""

from __future__ import annotations

from nbcast.testing.http import HTTPReply, HTTPRequest, LocalHTTPServer, free_port

__all__ = ["HTTPReply", "HTTPRequest", "LocalHTTPServer", "free_port"]
