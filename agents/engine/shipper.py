"""The audit sink's shipper: sends every audit entry, in order, to the configured sink
(``audit.sink``) so a SIEM holds a copy deckhand cannot rewrite.

It reads the stream through the store's ``feed`` (a consumer group: the durable cursor is in
Redis), sends a batch, and acknowledges it only once the sink took it. A shipper killed in
between leaves the batch pending; the next one sends it again before anything newer:
at-least-once, in order, each line carrying its ``stream_id`` and ``hash`` (the idempotency
key; the webhook's ``Idempotency-Key`` header is the batch's). Failures are retried with
doubling backoff, honouring ``Retry-After``; nothing is ever skipped, so a sink that refuses
for good shows as a growing lag (``deckhand_audit_sink_lag``), not as a gap.

Audit writers never wait for it: they append to the stream as always, and the shipper runs
in its own thread (``deckhand worker``) or process (``deckhand audit ship``). One process
ships at a time across replicas (the ``audit-sink`` job lease); the others stand by and
take over when the holder's lease lapses. A process restarted under the same name takes its
lease back at once.

Each line passes the sink's door, the redactor (config and environment secrets, the sink's
own header values): the store already redacted the entry when it was written, so this
changes something only for a secret learned since; such a line is marked ``masked`` (its
content no longer matches its hash; ``deckhand audit verify --copy`` still checks its links).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable

from agents.errors import StoreError
from agents.services import Services
from agents.store import AuditFeed, Locks
from agents.store.feed import SINK_JOB
from tools.errors import SinkError
from tools.redact import Redactor, redact_text
from tools.sinks import Sink, SinkSettings, open_sink

JOB = SINK_JOB
LEASE = 30.0
BLOCK = 2.0
"""Seconds one read waits for a new entry (under the store client's 5 s socket timeout)."""
log = logging.getLogger("deckhand.audit.sink")


class _Interrupted(Exception):
    """Stopped, or the lease went to another process: the batch stays pending."""


class Shipper:
    """Ships the audit stream to one sink, one batch at a time, oldest first."""

    def __init__(self, sink: Sink, settings: SinkSettings, *, feed: AuditFeed, locks: Locks,
                 owner: str, redact: Callable[[str], str], lease: float = LEASE):
        self.feed, self.locks = feed, locks
        self.sink, self.settings = sink, settings
        self.owner, self.redact, self.lease = owner, redact, lease
        self.shipped = 0
        self._grouped = False

    def serve(self, stop: threading.Event) -> None:
        """Ship until ``stop`` is set; stand by while another process holds the lease."""
        log.info("audit sink: shipping to %s as %s", self.sink.describe(), self.owner)
        try:
            while not stop.is_set():
                try:
                    if not self._hold():
                        stop.wait(self.lease / 3)
                        continue
                    self.ship_once(stop, block=BLOCK)
                except StoreError as exc:
                    log.error("audit sink: %s", exc)
                    stop.wait(1.0)
                except _Interrupted:
                    continue
                except Exception:  # a bug: keep the thread alive; the batch stays pending
                    log.exception("audit sink: shipping a batch failed")
                    stop.wait(self.settings.max_backoff)
        finally:
            self._release()

    def drain(self, stop: threading.Event) -> int:
        """Ship everything there is now, then return how many entries (``--once``)."""
        if not self._hold():
            holder = self.locks.job(JOB)
            raise StoreError(f"another process ships the audit stream "
                             f"({holder.worker if holder else 'just finished'}); "
                             f"nothing was sent")
        before = self.shipped
        try:
            while self.ship_once(stop, block=0):
                pass
        except _Interrupted:
            pass
        finally:
            self._release()
        return self.shipped - before

    def ship_once(self, stop: threading.Event, *, block: float) -> int:
        """One batch: a pending one first (sent before, never acknowledged), else new
        entries. How many entries were acknowledged (0: nothing to ship)."""
        if not self._grouped:
            self.feed.ensure_group()
            self._grouped = True
        batch = (self.feed.pending(self.settings.batch)
                 or self.feed.fresh(self.settings.batch, block=block))
        lines = [self.line(i, f) for i, f in batch if f is not None]
        gone = [i for i, f in batch if f is None]
        if gone:
            log.warning("audit sink: %d entries were deleted before they were shipped "
                        "(first %s); the sink's copy has a gap there", len(gone), gone[0])
        if lines:
            self._deliver(lines, stop)
        self.feed.ack([i for i, _ in batch])
        self.shipped += len(lines)
        return len(batch)

    def line(self, stream_id: str, fields: dict[str, str]) -> str:
        """The JSON line the sink receives: the entry's fields as stored (so its hash can be
        checked) and its stream id, through the redactor."""
        clean = {k: redact_text(self.redact, v) for k, v in fields.items()}
        line: dict[str, object] = {"stream_id": stream_id, **clean}
        if any(clean[k] is not v for k, v in fields.items()):
            line["masked"] = True
        return json.dumps(line, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    def _deliver(self, lines: list[str], stop: threading.Event) -> None:
        """Send until the sink takes the batch: ``retries`` attempts a round with doubling
        backoff (or the receiver's Retry-After), then an error logged and another round."""
        attempt = 0
        while True:
            try:
                self.sink.send(lines)
                return
            except SinkError as exc:
                attempt += 1
                wait = exc.retry_after if exc.retry_after is not None else self._backoff(attempt)
                if attempt >= self.settings.retries:
                    log.error("audit sink: %s; %d attempts failed, %s; trying again in %.1f s "
                              "(nothing is dropped)", exc, attempt, self._lag_text(), wait)
                    attempt = 0
                else:
                    log.warning("audit sink: %s; retry %d in %.1f s", exc, attempt, wait)
            self._wait(wait, stop)

    def _backoff(self, attempt: int) -> float:
        return float(min(self.settings.backoff * 2 ** (attempt - 1), self.settings.max_backoff))

    def _wait(self, seconds: float, stop: threading.Event) -> None:
        """Wait, renewing the lease; _Interrupted if stopped or the lease is lost."""
        remaining = seconds
        while True:
            if not self._hold():
                raise _Interrupted
            if remaining <= 0:
                return
            step = min(remaining, self.lease / 3)
            if stop.wait(step):
                raise _Interrupted
            remaining -= step

    def _hold(self) -> bool:
        """Take or renew the lease; a restart under the same name takes its own back."""
        if self.locks.hold_job(JOB, owner=self.owner, ttl=self.lease):
            return True
        return self.locks.take_job(JOB, owner=self.owner, ttl=self.lease)

    def _release(self) -> None:
        with contextlib.suppress(StoreError):  # else it lapses by itself
            self.locks.release_job(JOB, owner=self.owner)

    def _lag_text(self) -> str:
        try:
            return f"{self.feed.lag()} entries waiting"
        except StoreError:
            return "the store is unreachable too"


def shipper_for(services: Services, *, owner: str, lease: float = LEASE) -> Shipper | None:
    """The shipper ``audit.sink`` configures (None without one); SinkError if a header's
    secret cannot be read."""
    settings = services.common.audit.sink  # organisation-wide
    if settings is None:
        return None
    sink = open_sink(settings)
    own = Redactor(sink.secrets)
    store = services.store
    return Shipper(sink, settings, feed=store.feed, locks=store.locks, owner=owner, lease=lease,
                   redact=lambda text: own(services.redact(text)))


def start_in_thread(shipper: Shipper, stop: threading.Event) -> threading.Thread:
    """The shipper on a daemon thread of its own (inside ``deckhand worker``): a slow or
    refusing sink never holds up a run."""
    thread = threading.Thread(target=shipper.serve, args=(stop,), daemon=True,
                              name="audit-sink")
    thread.start()
    return thread
