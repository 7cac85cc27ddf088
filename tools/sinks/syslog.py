"""The syslog sink: each line one RFC 5424 message, over UDP (one datagram each, RFC 5426)
or TCP (octet-counted frames, RFC 6587, on one connection kept open).

``<PRI>1 TIMESTAMP HOST deckhand PID audit - JSON``: PRI is the facility times 8 plus
severity 6 (informational); the message is the entry's JSON line. UDP cannot tell a lost
datagram: prefer TCP where the copy must be complete.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.errors import SinkError

FACILITIES = {"kern": 0, "user": 1, "daemon": 3, "auth": 4, "syslog": 5, "authpriv": 10,
              "local0": 16, "local1": 17, "local2": 18, "local3": 19, "local4": 20,
              "local5": 21, "local6": 22, "local7": 23}
INFO = 6


class SyslogSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str = Field(description="udp://HOST:PORT or tcp://HOST:PORT")
    facility: str = Field(default="local0", description="one of " + ", ".join(FACILITIES))
    timeout: float = Field(default=10.0, gt=0, le=300)

    @field_validator("address")
    @classmethod
    def _address(cls, address: str) -> str:
        parts = urllib.parse.urlsplit(address)
        if parts.scheme not in ("udp", "tcp") or not parts.hostname or not parts.port:
            raise ValueError("must be udp://HOST:PORT or tcp://HOST:PORT")
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
        self.tcp = parts.scheme == "tcp"
        self.target = (str(parts.hostname), int(parts.port or 0))
        self.pri = FACILITIES[settings.facility] * 8 + INFO
        self.timeout = settings.timeout
        self.host = socket.gethostname()[:255] or "-"
        self.secrets: list[str] = []
        self._sock: socket.socket | None = None

    def describe(self) -> str:
        return f"syslog {'tcp' if self.tcp else 'udp'}://{self.target[0]}:{self.target[1]}"

    def send(self, lines: list[str]) -> None:
        frames = [self.message(line) for line in lines]
        try:
            if self.tcp:
                sock = self._connected()
                sock.sendall(b"".join(b"%d %s" % (len(f), f) for f in frames))
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    for frame in frames:
                        sock.sendto(frame, self.target)
        except OSError as exc:
            self.close()
            raise SinkError(f"{self.describe()}: {exc.strerror or exc}") from exc

    def message(self, line: str) -> bytes:
        stamp = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        return f"<{self.pri}>1 {stamp} {self.host} deckhand {os.getpid()} audit - {line}".encode()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connected(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.create_connection(self.target, timeout=self.timeout)
        return self._sock
