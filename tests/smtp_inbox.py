"""A real SMTP server for alert tests (aiosmtpd on a loopback port), and the Airflow connection
that points the SMTP notifier at it."""

from __future__ import annotations

import contextlib
import email
import json
import socket
import time


class Inbox:
    """What the server received: one dict per message (to, from, subject, html body)."""

    def __init__(self):
        self.messages: list[dict] = []

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content)
        body = "".join(part.get_payload(decode=True).decode() for part in msg.walk()
                       if part.get_content_type() == "text/html")
        self.messages.append({"to": envelope.rcpt_tos, "from": envelope.mail_from, "subject": msg["Subject"],
                              "body": body})
        return "250 OK"

    def wait_for(self, needle: str, timeout_s: float = 60) -> dict:
        """The first message whose subject holds `needle`, waiting for it to arrive."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [m for m in self.messages if needle in m["subject"]]
            if found:
                return found[0]
            assert time.monotonic() < deadline, f"no message {needle!r}; got {[m['subject'] for m in self.messages]}"
            time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connection(port: int) -> str:
    """An AIRFLOW_CONN_<ID> value: plain SMTP on loopback, no TLS, no retries."""
    return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": port,
                       "extra": {"disable_ssl": True, "disable_tls": True, "retry_limit": 0, "timeout": 10}})


@contextlib.contextmanager
def serve():
    """Yields (inbox, port) while the server runs."""
    from aiosmtpd.controller import Controller

    inbox, port = Inbox(), free_port()
    server = Controller(inbox, hostname="127.0.0.1", port=port)
    server.start()
    try:
        yield inbox, port
    finally:
        server.stop()
