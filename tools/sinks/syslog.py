"""The syslog sink: each line one RFC 5424 message, over RELP, TCP or UDP.

``<PRI>1 TIMESTAMP HOST deckhand PID audit - JSON``: PRI is the facility times 8 plus
severity 6 (informational); the message is the entry's JSON line.

What each transport guarantees (the shipper acknowledges a batch only when ``send`` returns):

- ``relp://`` — the collector answers every message (``tools.sinks.relp``): a batch is taken
  once each of its messages is confirmed held; a collector that stops mid-batch gets the
  whole batch again on its return (repeats carry the same ``stream_id`` and ``hash``).
- ``tcp://`` — octet-counted frames (RFC 6587) on a connection per batch, half-closed when
  sent: the collector closing its end after reading everything (a clean end of stream, and
  every byte acknowledged by its host) is the receipt. A collector stopped with the batch
  unread resets the connection instead, and the batch is sent again. Plain syslog has no
  answer of its own; this is the strongest receipt it can give (a collector that keeps the
  connection open after the half-close fails every batch at ``timeout``: a growing lag).
- ``udp://`` — one datagram each (RFC 5426), no receipt: a lost datagram cannot be told.

``tls:`` encrypts RELP (rsyslog's ``imrelp`` with ``tls="on"``), verifying the collector's
certificate; a client certificate is presented when given.

Held means handed to the collector: what it does on its own crash is its queue's business
(rsyslog: a disk-assisted queue).
"""

from __future__ import annotations

import fcntl
import os
import socket
import ssl
import struct
import termios
import urllib.parse
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools.errors import SinkError
from tools.sinks.relp import RelpError, RelpSession

FACILITIES = {"kern": 0, "user": 1, "daemon": 3, "auth": 4, "syslog": 5, "authpriv": 10,
              "local0": 16, "local1": 17, "local2": 18, "local3": 19, "local4": 20,
              "local5": 21, "local6": 22, "local7": 23}
INFO = 6
SCHEMES = ("relp", "tcp", "udp")
RECEIPT_MAX = 1 << 16
"""Bytes read from a TCP collector before its end of stream (it should send none)."""


class SyslogTls(BaseModel):
    """RELP over TLS: the collector's certificate is verified (against ``ca_file``, else
    the system's CAs, and the address's host name or IP); a client certificate if asked."""

    model_config = ConfigDict(extra="forbid")

    ca_file: str | None = Field(default=None, description="PEM CA bundle the collector's "
                                                          "certificate must chain to")
    cert_file: str | None = Field(default=None, description="client certificate (PEM)")
    key_file: str | None = Field(default=None, description="its private key (PEM)")

    @model_validator(mode="after")
    def _pair(self) -> SyslogTls:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file (the client certificate it belongs to)")
        return self

    def context(self) -> ssl.SSLContext:
        """The client context; SinkError naming the file that cannot be used."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            files = ", ".join(f for f in (self.ca_file, self.cert_file, self.key_file) if f)
            reason = getattr(exc, "strerror", None) or exc
            raise SinkError(f"audit sink syslog tls: cannot use {files or 'the system CAs'} "
                            f"({reason}); fix the paths under audit.sink.syslog.tls") from exc
        return context


class SyslogSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str = Field(description="relp://HOST:PORT (acknowledged), tcp://HOST:PORT or "
                                     "udp://HOST:PORT (no receipt)")
    facility: str = Field(default="local0", description="one of " + ", ".join(FACILITIES))
    timeout: float = Field(default=10.0, gt=0, le=300)
    tls: SyslogTls | None = Field(default=None, description="RELP over TLS (relp:// only)")

    @model_validator(mode="after")
    def _tls_over_relp(self) -> SyslogSettings:
        if self.tls is not None and not self.address.startswith("relp://"):
            raise ValueError("tls is offered over relp:// (acknowledged and encrypted); "
                             "point address at the collector's RELP TLS input")
        return self

    @field_validator("address")
    @classmethod
    def _address(cls, address: str) -> str:
        parts = urllib.parse.urlsplit(address)
        if parts.scheme not in SCHEMES or not parts.hostname or not parts.port:
            raise ValueError("must be relp://HOST:PORT, tcp://HOST:PORT or udp://HOST:PORT")
        return address

    @field_validator("facility")
    @classmethod
    def _facility(cls, facility: str) -> str:
        if facility not in FACILITIES:
            raise ValueError(f"unknown facility; one of {', '.join(FACILITIES)}")
        return facility


class Syslog:
    """Sends each line as one RFC 5424 message."""

    def __init__(self, settings: SyslogSettings):
        parts = urllib.parse.urlsplit(settings.address)
        self.scheme = parts.scheme
        self.target = (str(parts.hostname), int(parts.port or 0))
        self.pri = FACILITIES[settings.facility] * 8 + INFO
        self.timeout = settings.timeout
        self.host = socket.gethostname()[:255] or "-"
        self.secrets: list[str] = []
        self._relp: RelpSession | None = None
        self._tls = settings.tls.context() if settings.tls is not None else None

    def describe(self) -> str:
        tls = " over TLS" if self._tls is not None else ""
        return f"syslog {self.scheme}://{self.target[0]}:{self.target[1]}{tls}"

    def send(self, lines: list[str]) -> None:
        frames = [self.message(line) for line in lines]
        try:
            if self.scheme == "relp":
                self._relp_session().send(frames)
            elif self.scheme == "tcp":
                self._tcp(frames)
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    for frame in frames:
                        sock.sendto(frame, self.target)
        except (OSError, RelpError) as exc:
            self.close()
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise SinkError(f"{self.describe()}: {reason}; the batch is sent again") from exc

    def message(self, line: str) -> bytes:
        stamp = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        return f"<{self.pri}>1 {stamp} {self.host} deckhand {os.getpid()} audit - {line}".encode()

    def close(self) -> None:
        if self._relp is not None:
            self._relp.close()
            self._relp = None

    def _relp_session(self) -> RelpSession:
        if self._relp is None:
            self._relp = RelpSession(self.target, timeout=self.timeout, tls=self._tls)
        return self._relp

    def _tcp(self, frames: list[bytes]) -> None:
        """One connection per batch; its clean close after our half-close is the receipt."""
        with socket.create_connection(self.target, timeout=self.timeout) as sock:
            sock.sendall(b"".join(b"%d %s" % (len(f), f) for f in frames))
            sock.shutdown(socket.SHUT_WR)
            received = 0
            while chunk := sock.recv(4096):  # until the collector closes its end
                received += len(chunk)
                if received > RECEIPT_MAX:
                    raise ConnectionError("the collector kept talking instead of closing")
            if _unacknowledged(sock):
                raise ConnectionError("the collector closed before taking the whole batch")


def _unacknowledged(sock: socket.socket) -> int:
    """Bytes sent and not yet acknowledged by the peer's host (Linux; 0 where unknown)."""
    outq = getattr(termios, "TIOCOUTQ", None)
    if outq is None:
        return 0
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), outq, b"\0" * 4))[0])
