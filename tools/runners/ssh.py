"""Run commands on remote hosts over SSH (paramiko), one pooled connection per host.

How a command runs
    One paramiko Transport per host is opened on first use and reused by every later
    command, with keepalive; a connection found dropped is reopened once. Each command
    gets its own session channel, always closed afterwards (sshd allows 10 per connection).
    stdout and stderr are read in turn, a chunk of each, by one select() loop in the
    caller's thread, so a command that fills one stream never stalls on the other, and
    the deadline is checked between chunks.

How a command starts
    Given a start gate (``on_start``), the wrapper prints its pid and then waits for one
    line on stdin: the gate records the pid (a run makes that record durable) and answers
    GO, and only then does the command run; any other answer and nothing runs. So a
    process that could outlive its worker always has a record that lets a takeover stop it.

How a command is stopped
    Closing a channel does not stop the remote process: sshd leaves it running until it
    next writes. So the command is wrapped to print its pid first; sshd starts every
    session as a new session and process group, so that pid names the group of everything
    the command started. On the deadline or a cancel, a second channel sends the group
    SIGTERM, then SIGKILL after a grace period.

Connection setup
    Paced and retried by the pool's HandshakePacer (tools.runners.pacing): a bounded number
    of setups at once, and a setup the server dropped before login (sshd's MaxStartups) is
    tried again with backoff. An unused connection is closed by the pool after its idle time.

Host keys
    Checked against the inventory's known_hosts (tools.runners.known_hosts, parsed once and
    shared) before we authenticate. An unknown or changed key is refused, with a message
    saying how to trust the host. Nothing is ever added on its own.

Errors
    paramiko and socket exceptions are translated at this border (``_translate``) into
    SSHConnectError (SSHSetupDropped: dropped before login), SSHAuthError and HostKeyError,
    always ``from`` the original; none leaks out of this module. A deadline is not an
    error: it is ``CommandResult.timed_out``.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import paramiko

from tools.errors import (
    CommandInterrupted,
    CommandRefused,
    RunnerError,
    SSHAuthError,
    SSHConnectError,
    SSHError,
    SSHSetupDropped,
)
from tools.inventory import Host
from tools.runners.base import (
    GATE,
    GO,
    NO,
    CancelToken,
    CommandResult,
    OutputCollector,
    OutputSink,
    PidSink,
)
from tools.runners.known_hosts import HostKeyInfo, KnownHosts
from tools.runners.pacing import HandshakePacer

log = logging.getLogger("deckhand.ssh")
# paramiko logs every failed handshake at ERROR with a traceback. A dropped setup is retried
# and every failure reaches the caller as an SSHError, so its own lines are kept for
# debugging only (lower this logger's level to see them).
TRANSPORT_LOG = "deckhand.ssh.paramiko"
logging.getLogger(TRANSPORT_LOG).setLevel(logging.CRITICAL)

T = TypeVar("T")
_POLL_SECONDS = 1.0

DEFAULT_KEY_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
PASSPHRASE_ENV = "DECKHAND_SSH_KEY_PASSPHRASE"
"""For an encrypted key_file (ssh-agent is the better place for one)."""

# The login shell may be anything (bash, zsh, fish): it only runs `exec`. A POSIX sh then
# prints its pid (= the session's process group, see the module docstring) and evals the
# command, which reaches it as one quoted argument, like `sh -c COMMAND` would run it.
# stdin is /dev/null, as with the local runner. (Not an EOF over SSH: a fast command's
# channel can be closed by the time it is sent, and sshd drops the connection for that.)
_WRAPPER = ("exec /bin/sh -c 'echo DECKHAND_PID=$$; __deckhand_cmd=$1; shift; "
            "eval \"$__deckhand_cmd\"' deckhand {command} </dev/null")
# Gated (a run's commands): stdin stays the channel until the wrapper has read GO, sent
# once the start gate has recorded the pid; anything else and it exits, running nothing.
_GATED_WRAPPER = ("exec /bin/sh -c 'echo DECKHAND_PID=$$; " + GATE + "__deckhand_cmd=$1; "
                  "shift; eval \"$__deckhand_cmd\"' deckhand {command}")
_PID_LINE = re.compile(rb"DECKHAND_PID=(\d+)\r?")
_PID_SEARCH_LIMIT = 65536
# Exits 0 only once the group is gone (or was already), 3 if it outlived SIGKILL. A member
# that is a zombie has ended (its parent, e.g. a frozen sshd, has not reaped it): with ps,
# only live members count.
_KILL_SCRIPT = (
    "alive() {{ kill -s 0 -- -{pid} 2>/dev/null || return 1; "
    "command -v ps >/dev/null 2>&1 || return 0; ps -A -o pgid= -o stat= | "
    "awk -v g={pid} '$1 == g && $2 !~ /^Z/ {{f = 1}} END {{exit !f}}'; }}; "
    "kill -s TERM -- -{pid} 2>/dev/null || exit 0; i=0; "
    "while alive; do "
    "if [ $i -ge {ticks} ]; then kill -s KILL -- -{pid} 2>/dev/null; sleep 0.2; "
    "alive && exit 3; exit 0; fi; "
    "sleep 0.1; i=$((i+1)); done"
)
_CHUNK = 1 << 20
"""Bytes read from a stream at once: what has arrived, up to this (a flood of output then
costs few reads; the channel's window, 2 MB, bounds what waits in memory)."""
_KILL_ANSWER = 1.0
"""Seconds past the grace the pooled connection has to answer a kill before a fresh
connection is tried (a frozen sshd session keeps TCP open but answers nothing)."""


@dataclass(frozen=True)
class SSHOptions:
    """Connection tuning. The defaults suit a deploy bot on an ordinary network."""

    connect_timeout: float = 10.0
    keepalive: int = 15
    kill_grace: float = 2.0
    max_sessions: int = 5
    """Commands at once per host: half sshd's MaxSessions (10), so each can still be killed."""


class SSHRunner:
    """Runs commands on one host over a pooled SSH connection (a tools.runners.base.Runner).

    Thread-safe: steps running in parallel share the connection, each on its own channel.
    ``via`` is the runner of the jump host, when the inventory names one.
    """

    def __init__(self, host: Host, *, known_hosts: str | Path | KnownHosts | None = None,
                 via: SSHRunner | None = None, options: SSHOptions | None = None,
                 pacer: HandshakePacer | None = None):
        self.host = host
        self.known_hosts = known_hosts if isinstance(known_hosts, KnownHosts) \
            else KnownHosts(known_hosts)
        self.via = via
        self.options = options or SSHOptions()
        self.pacer = pacer or HandshakePacer()
        self.user = host.user or getpass.getuser()
        self.connects = 0
        """How many times a connection was opened (1 while the pooled one stays up)."""
        self.last_used = time.monotonic()
        self._transport: paramiko.Transport | None = None
        self._lock = threading.Lock()
        self._sessions = threading.BoundedSemaphore(self.options.max_sessions)
        self._use_lock = threading.Lock()
        self._users = 0

    @property
    def target(self) -> str:
        """``user@address:port``, plus the jump host: how errors name this host."""
        jump = f" via {self.via.target}" if self.via else ""
        return f"{self.user}@{self.host.address}:{self.host.port}{jump}"

    @property
    def server(self) -> str:
        """The sshd this runner's setups count against (its MaxStartups), for pacing."""
        jump = f" via {self.via.host.name}" if self.via else ""
        return f"{self.host.address}:{self.host.port}{jump}"

    @property
    def connected(self) -> bool:
        transport = self._transport
        return transport is not None and transport.is_active()

    def connect(self) -> None:
        """Open the pooled connection now, if it is not open; raises SSHError subclasses."""
        with self._in_use():
            self._connection()

    def close(self) -> None:
        """Close the connection; the next command opens a new one."""
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    def close_if_idle(self, now: float, idle: float) -> bool:
        """Close the connection if nothing used it for ``idle`` seconds; True if it did."""
        with self._use_lock:
            if self._users or not self.connected or now - self.last_used < idle:
                return False
            self.close()  # nothing can start meanwhile: starting needs _use_lock first
        return True

    def run(self, command: str, *, timeout: float, on_output: OutputSink | None = None,
            cancel: CancelToken | None = None, on_start: PidSink | None = None) -> CommandResult:
        """Run ``command`` on the host until it ends, its deadline, or ``cancel``.

        Raises SSHError subclasses when it could not be started (or the connection dropped
        while it ran); a failing or killed command is reported in the result.
        """
        started = time.monotonic()
        if cancel is not None and cancel.cancelled:
            return CommandResult(None, "", 0.0, cancelled=True)
        if not self._sessions.acquire(timeout=timeout):
            raise RunnerError(f"{self.target}: no free SSH session within {timeout:g}s "
                              f"({self.options.max_sessions} commands already running)")
        try:
            with self._in_use():
                wrapped = _wrap(command, gated=on_start is not None)
                channel = self._with_connection(lambda t: self._exec(t, wrapped))
                try:
                    return self._follow(channel, on_output, started, timeout, cancel,
                                        on_start)
                except SSHConnectError as exc:  # after the command was sent: it may have run
                    raise CommandInterrupted(str(exc)) from exc
                finally:
                    channel.close()
        finally:
            self._sessions.release()

    def check_ready(self) -> None:
        """Connect (host key verified, login accepted) unless the pooled connection is up."""
        self.connect()

    def host_key(self) -> HostKeyInfo:
        """Connect only far enough to read the host's key (no login), paced like any setup."""
        transport = self._paced(self._handshake)
        try:
            return HostKeyInfo.of(transport.get_remote_server_key())
        finally:
            transport.close()

    def open_tunnel(self, address: str, port: int) -> paramiko.Channel:
        """A TCP stream to ``address:port`` as seen from this host (for hosts behind it)."""
        with self._in_use():
            return self._with_connection(lambda t: self._direct_tcpip(t, address, port))

    @contextmanager
    def _in_use(self) -> Iterator[None]:
        """Marks the connection busy, so the idle reaper leaves it open."""
        with self._use_lock:
            self._users += 1
        try:
            yield
        finally:
            with self._use_lock:
                self._users -= 1
                self.last_used = time.monotonic()

    # -- the connection ------------------------------------------------------------------

    def _with_connection(self, action: Callable[[paramiko.Transport], T]) -> T:
        """Do ``action`` on the pooled connection; if it had dropped, reconnect once."""
        transport = self._connection()
        try:
            return action(transport)
        except SSHConnectError:
            if transport.is_active():
                raise
            log.info("%s: connection dropped, reconnecting once", self.host.name)
            return action(self._connection(stale=transport))

    def _connection(self, stale: paramiko.Transport | None = None) -> paramiko.Transport:
        with self._lock:
            current = self._transport
            if current is not None and current is not stale and current.is_active():
                return current
            if current is not None:
                current.close()
            self._transport = None
            self._transport = self._open()
            self.connects += 1
            return self._transport

    def _open(self) -> paramiko.Transport:
        return self._paced(self._setup)

    def _paced(self, setup: Callable[[], T]) -> T:
        if self.via is not None:  # the jump host's own setup first, in a slot of its own
            self._through_jump(self.via, lambda jump: jump.connect())
        return self.pacer.open(self.server, setup)

    def _through_jump(self, via: SSHRunner, action: Callable[[SSHRunner], T]) -> T:
        try:
            return action(via)
        except SSHError as exc:
            raise SSHConnectError(f"cannot reach {self.target}: jump host "
                                  f"{via.host.name}: {exc}") from exc

    def _setup(self) -> paramiko.Transport:
        """One attempt: handshake, host key, login. SSHSetupDropped if the server dropped
        it before login (the pacer retries that); anything else is final."""
        transport = self._handshake()
        try:
            key = HostKeyInfo.of(transport.get_remote_server_key())
            self.known_hosts.verify(self.host, key)
            _authenticate(transport, self.host, self.user, self.target)
            transport.set_keepalive(self.options.keepalive)
            # paramiko's thread wakes every 0.1 s to see whether it should stop: 6 % of a
            # core for 200 idle connections. Once a second is enough (it only delays the
            # thread's exit after close, and keepalives are 15 s apart).
            transport.sock.settimeout(_POLL_SECONDS)
        except BaseException:
            transport.close()
            raise
        return transport

    def _handshake(self) -> paramiko.Transport:
        with _translate(self.target, "connecting to"):
            transport = paramiko.Transport(self._dial())
        transport.set_log_channel(TRANSPORT_LOG)
        try:
            self.known_hosts.prefer_known_types(transport, self.host)
            with _dropped_in_setup(self.target):
                transport.start_client(timeout=self.options.connect_timeout)
                done = transport.completion_event
                if done is None or not done.is_set():  # start_client stopped waiting
                    raise TimeoutError(f"no SSH handshake within "
                                       f"{self.options.connect_timeout:g}s")
        except BaseException:
            transport.close()
            raise
        return transport

    def _dial(self) -> socket.socket | paramiko.Channel:
        if self.via is not None:
            return self._through_jump(
                self.via, lambda jump: jump.open_tunnel(self.host.address, self.host.port))
        sock = socket.create_connection((self.host.address, self.host.port),
                                        timeout=self.options.connect_timeout)
        # Commands are small request/response exchanges: without this, Nagle's algorithm
        # meets delayed ACKs and every channel open waits ~40 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _direct_tcpip(self, transport: paramiko.Transport, address: str,
                      port: int) -> paramiko.Channel:
        with _translate(f"{address}:{port} via {self.target}", "opening a tunnel to"):
            return _open_channel(transport, lambda: transport.open_channel(
                "direct-tcpip", (address, port), ("127.0.0.1", 0),
                timeout=self.options.connect_timeout))

    def _exec(self, transport: paramiko.Transport, command: str, *,
              timeout: float | None = None) -> paramiko.Channel:
        with _translate(self.target, "starting a command on"):
            channel = _open_channel(transport, lambda: transport.open_session(
                timeout=timeout or self.options.connect_timeout))
        try:
            with _translate(self.target, "starting a command on"):
                channel.exec_command(command)
        except SSHConnectError as exc:
            channel.close()
            # The request may have reached the host: never retried, counted as a change.
            raise CommandInterrupted(f"{exc}; the command may have started") from exc
        except BaseException:
            channel.close()
            raise
        return channel

    # -- one command ---------------------------------------------------------------------

    def _follow(self, channel: paramiko.Channel, on_output: OutputSink | None, started: float,
                timeout: float, cancel: CancelToken | None,
                on_start: PidSink | None = None) -> CommandResult:
        output = OutputCollector(on_output)
        pid = _PidLine(output, on_start, _Reply(channel, self.target))
        ready = _Ready(channel)
        killer = _Killer(self, pid, ready)
        unregister = cancel.on_cancel(killer.fire) if cancel else (lambda: None)
        try:
            ended = _pump(channel, pid, output, ready, started + timeout, stop_on_kill=True)
            timed_out = not ended and not killer.fired
            # the command ended, but something it started keeps its output open
            held_open = timed_out and channel.exit_status_ready()
            if not ended:
                killer.fire()
                # The killed process closes its output. If it cannot be killed (kill
                # channel refused, host gone), stop reading after the grace period anyway.
                grace = time.monotonic() + self.options.kill_grace + 2.0
                _pump(channel, pid, output, ready, grace, stop_on_kill=False)
            pid.flush()
            output.close()
            if pid.refusal is not None:  # the wrapper exited without running the command
                raise CommandRefused(f"not started: {pid.refusal}")
            code = self._exit_code(channel, killed=killer.fired)
            unconfirmed = killer.outcome() if killer.fired else None
        except CommandRefused:
            raise
        except BaseException:
            # The output sink raised, or the connection dropped: the command may still
            # be running on the host, unobserved. Kill it (reconnecting if need be).
            killer.fire()
            raise
        finally:
            unregister()
        return CommandResult(code, output.tail(), time.monotonic() - started,
                             timed_out=timed_out, cancelled=killer.fired and not timed_out,
                             unconfirmed_kill=unconfirmed, output_held_open=held_open)

    def _exit_code(self, channel: paramiko.Channel, *, killed: bool) -> int | None:
        if killed:
            return None
        # exit-status can arrive just after the streams' EOF; it is never long after.
        channel.status_event.wait(self.options.connect_timeout)
        if channel.exit_status >= 0:
            return int(channel.exit_status)
        transport = channel.get_transport()
        if transport is None or not transport.is_active():
            raise SSHConnectError(f"the connection to {self.target} dropped while the "
                                  f"command was running; it may have partly run (deckhand "
                                  f"tries to kill what is left of it)")
        return None  # killed by a signal on the host: sshd sends no exit status then

    def kill_group(self, pid: int) -> None:
        """SIGTERM then SIGKILL the remote process group ``pid`` (waits for the grace), over
        the pooled connection, or a fresh one if that does not answer in time. RunnerError
        unless the host confirms the group is gone."""
        ticks = max(1, int(self.options.kill_grace * 10))
        script = _wrap(_KILL_SCRIPT.format(pid=int(pid), ticks=ticks))
        answer = self.options.kill_grace + _KILL_ANSWER
        with self._in_use():
            pooled = self._connection()
            try:
                if self._kill_over(pooled, script, answer, pid):
                    return
            except SSHError as exc:
                log.warning("%s: killing process group %d over the pooled connection: %s",
                            self.host.name, pid, exc)
            # no answer: the connection (or the sshd serving it) is stuck; drop it
            self._drop(pooled)
            fresh = self._open()
            try:
                if self._kill_over(fresh, script, answer + self.options.connect_timeout, pid):
                    return
            finally:
                fresh.close()
        raise RunnerError(f"{self.host.name}: no answer to the kill of process group {pid}, "
                          f"even over a new connection")

    def _kill_over(self, transport: paramiko.Transport, script: str, answer: float,
                   pid: int) -> bool:
        """Whether the host confirmed the group gone; False if it did not answer in time."""
        channel = self._exec(transport, script, timeout=answer)
        try:
            if not channel.status_event.wait(answer):
                return False
            if channel.exit_status != 0:
                raise RunnerError(f"{self.host.name}: process group {pid} outlived SIGKILL")
            return True
        finally:
            channel.close()

    def _drop(self, transport: paramiko.Transport) -> None:
        """Close ``transport`` and forget it if it is the pooled one (the next command
        opens a new connection)."""
        with self._lock:
            if self._transport is transport:
                self._transport = None
        transport.close()


def _wrap(command: str, *, gated: bool = False) -> str:
    return (_GATED_WRAPPER if gated else _WRAPPER).format(command=shlex.quote(command))


def _open_channel(transport: paramiko.Transport,
                  open_: Callable[[], paramiko.Channel]) -> paramiko.Channel:
    """Open a channel. A refusal leaves the connection usable; any other failure means it
    is broken, so it is closed and the caller's reconnect-once can replace it."""
    try:
        return open_()
    except paramiko.ChannelException:
        raise
    except BaseException:
        transport.close()
        raise


class _PidLine:
    """Takes the wrapper's ``DECKHAND_PID=`` line out of stdout and remembers the pid.

    Lines a login script printed before it are passed through as ordinary output.
    """

    def __init__(self, output: OutputCollector, on_pid: PidSink | None = None,
                 reply: _Reply | None = None):
        self.output = output
        self.on_pid = on_pid
        self.reply = reply
        self.pid: int | None = None
        self.refusal: str | None = None
        """Why the start gate refused the command (it then never ran)."""
        self.known = threading.Event()
        self._buffer = b""

    def feed(self, chunk: bytes) -> None:
        if self.known.is_set():
            self.output.feed(chunk)
            return
        self._buffer += chunk
        while not self.known.is_set():
            line, newline, rest = self._buffer.partition(b"\n")
            if not newline:
                if len(self._buffer) > _PID_SEARCH_LIMIT:
                    self.flush()
                return
            found = _PID_LINE.fullmatch(line)
            if found:
                self.pid = int(found.group(1))
                self._buffer = b""
                self.known.set()
                self._gate(self.pid)
                if rest:
                    self.output.feed(rest)
                return
            self.output.feed(line + newline)
            self._buffer = rest

    def flush(self) -> None:
        buffer, self._buffer = self._buffer, b""
        if not self.known.is_set() and self.on_pid is not None:
            # no pid: nothing could stop it after a takeover, so a gated command never runs
            self.refusal = "its process id never came back from the host"
            if self.reply is not None:
                self.reply.send(NO)
        self.known.set()
        if buffer:
            self.output.feed(buffer)

    def _gate(self, pid: int) -> None:
        """Ask the start gate, then tell a gated wrapper to run the command or not."""
        if self.on_pid is None:
            return
        self.refusal = self.on_pid(pid)
        if self.reply is not None:
            self.reply.send(GO if self.refusal is None else NO)


class _Reply:
    """Sends the start gate's answer to the waiting wrapper on the channel's stdin."""

    def __init__(self, channel: paramiko.Channel, target: str):
        self.channel, self.target = channel, target

    def send(self, answer: bytes) -> None:
        with _translate(self.target, "starting a command on"):
            self.channel.sendall(answer)


class _Ready:
    """Wakes the reader when stdout or stderr has data (or ended), or a kill was ordered.

    paramiko's channel buffers call ``set()``/``clear()`` on the object given to their
    ``set_event``; one flag per stream is handed to them. (``Channel.fileno()`` would do
    the same with an OS pipe, but that pipe can be written by the transport thread after
    the channel closed it: its fd may by then belong to another file.)
    """

    def __init__(self, channel: paramiko.Channel):
        self._cond = threading.Condition()
        self._flags = {"stdout": False, "stderr": False, "kill": False}
        channel.in_buffer.set_event(_Flag(self, "stdout"))
        channel.in_stderr_buffer.set_event(_Flag(self, "stderr"))

    def change(self, name: str, value: bool) -> None:
        with self._cond:
            self._flags[name] = value
            if value:
                self._cond.notify_all()

    @property
    def killing(self) -> bool:
        return self._flags["kill"]

    def wait(self, timeout: float, *, kill: bool) -> None:
        """Until a stream is readable, ``timeout`` passes, or (with ``kill``) a kill."""
        with self._cond:
            self._cond.wait_for(lambda: self._flags["stdout"] or self._flags["stderr"]
                                or (kill and self._flags["kill"]), timeout)


class _Flag(threading.Event):
    """One ``_Ready`` flag, as the Event a paramiko buffer sets and clears."""

    def __init__(self, ready: _Ready, name: str):
        super().__init__()
        self._ready, self._name = ready, name

    def set(self) -> None:
        super().set()
        self._ready.change(self._name, True)

    def clear(self) -> None:
        super().clear()
        self._ready.change(self._name, False)


class _Killer:
    """Kills a running command's remote process group, once, without blocking the caller."""

    def __init__(self, runner: SSHRunner, pid: _PidLine, ready: _Ready):
        self.runner, self.pid, self.ready = runner, pid, ready
        self.fired = False
        self.problem: str | None = None
        """Why the kill is not confirmed (set once ``done``)."""
        self.done = threading.Event()
        self._lock = threading.Lock()

    def fire(self) -> None:
        with self._lock:
            if self.fired:
                return
            self.fired = True
        self.ready.change("kill", True)
        threading.Thread(target=self._kill, name="ssh-kill", daemon=True).start()

    def _kill(self) -> None:
        try:
            self.problem = self._confirmed_kill()
        finally:
            self.done.set()

    def _confirmed_kill(self) -> str | None:
        # Without the pid (the wrapper never got to print it) closing the channel is all
        # we can do; the runner does that after the grace period.
        if not self.pid.known.wait(self.runner.options.kill_grace) or self.pid.pid is None:
            return "its process group was never known"
        try:
            self.runner.kill_group(self.pid.pid)
        except RunnerError as exc:
            log.warning("%s: could not kill remote process group %s: %s",
                        self.runner.host.name, self.pid.pid, exc)
            return str(exc)
        return None

    def outcome(self) -> str | None:
        """Once fired: None if the kill was confirmed, else why not (waits for it)."""
        options = self.runner.options
        if not self.done.wait(2 * options.kill_grace + 2 * _KILL_ANSWER
                              + 2 * options.connect_timeout):
            return "the kill did not finish in time"
        return self.problem


def _pump(channel: paramiko.Channel, pid: _PidLine, output: OutputCollector, ready: _Ready,
          deadline: float, *, stop_on_kill: bool) -> bool:
    """Feed stdout and stderr to ``output`` until both end (True), or until ``deadline``
    or, with ``stop_on_kill``, a kill order (False). Runs in the caller's thread."""
    while True:
        _read_ready(channel, pid, output)
        if channel.eof_received or channel.closed:
            while _read_ready(channel, pid, output):  # what came with the EOF
                pass
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (stop_on_kill and ready.killing):
            return False
        ready.wait(remaining, kill=stop_on_kill)


def _read_ready(channel: paramiko.Channel, pid: _PidLine, output: OutputCollector) -> bool:
    """Read one chunk of each stream that has data (at most), so neither starves the other
    and the deadline is checked between chunks; True if anything was read."""
    read = False
    if channel.recv_ready():
        pid.feed(channel.recv(_CHUNK))
        read = True
    if channel.recv_stderr_ready():
        output.feed(channel.recv_stderr(_CHUNK), "stderr")
        read = True
    return read


def _authenticate(transport: paramiko.Transport, host: Host, user: str, target: str) -> None:
    agent = _agent() if not host.key_file else None
    try:
        keys = _client_keys(host, agent)
        if not keys:
            raise SSHAuthError(f"no SSH key to offer {target}: set key_file for host "
                               f"{host.name} in the inventory, or load a key into ssh-agent")
        last: Exception | None = None
        with _translate(target, "authenticating to"):
            for key in keys:
                try:
                    transport.auth_publickey(user, key)
                except paramiko.BadAuthenticationType:
                    raise  # the server takes no keys at all: trying more is pointless
                except paramiko.AuthenticationException as exc:
                    last = exc
                    continue
                if transport.is_authenticated():
                    return
        raise SSHAuthError(f"{target} refused our key(s) for user {user!r} "
                           f"({', '.join(_key_names(keys))}); add the public key to that "
                           f"user's ~/.ssh/authorized_keys on the host") from last
    finally:
        if agent is not None:
            agent.close()


def _agent() -> paramiko.Agent | None:
    # A stale SSH_AUTH_SOCK must not stop us from trying the default key files.
    try:
        return paramiko.Agent()
    except (paramiko.SSHException, OSError) as exc:
        log.warning("ssh-agent unusable (%s); trying key files only", exc)
        return None


def _client_keys(host: Host, agent: paramiko.Agent | None) -> list[paramiko.PKey]:
    if host.key_file:
        return [_load_key(Path(os.path.expanduser(host.key_file)))]
    keys: list[paramiko.PKey] = list(agent.get_keys()) if agent else []
    for name in DEFAULT_KEY_FILES:
        path = Path(os.path.expanduser(name))
        if path.exists():
            with suppress(SSHAuthError):  # an encrypted default key is for ssh-agent
                keys.append(_load_key(path))
    return keys


def _load_key(path: Path) -> paramiko.PKey:
    passphrase = os.environ.get(PASSPHRASE_ENV, "").encode() or None
    try:
        # the stubs say str, paramiko 5 wants bytes
        return paramiko.PKey.from_path(path, password=passphrase)  # type: ignore[arg-type]
    except (paramiko.PasswordRequiredException, TypeError) as exc:
        # paramiko 3 raises PasswordRequiredException, paramiko 5 a TypeError
        raise SSHAuthError(f"key file {path} is encrypted: load it into ssh-agent (and drop "
                           f"key_file from the inventory), or set {PASSPHRASE_ENV}") from exc
    except (OSError, paramiko.SSHException, ValueError) as exc:
        if passphrase is not None and _encrypted(path):  # paramiko's words are misleading
            raise SSHAuthError(f"wrong passphrase for {path}: check {PASSPHRASE_ENV}") \
                from exc
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SSHAuthError(f"cannot use key file {path}: {reason}") from exc


def _encrypted(path: Path) -> bool:
    """Whether the key file needs a passphrase (loading it without one says so)."""
    try:
        paramiko.PKey.from_path(path)
    except (paramiko.PasswordRequiredException, TypeError):
        return True
    except (OSError, paramiko.SSHException, ValueError):
        return False
    return False


def _key_names(keys: list[paramiko.PKey]) -> list[str]:
    return [f"{k.get_name()} {k.fingerprint}" for k in keys]


def fetch_host_key(host: Host, *, known_hosts: KnownHosts, via: SSHRunner | None = None,
                   timeout: float = 10.0, pacer: HandshakePacer | None = None) -> HostKeyInfo:
    """Connect only far enough to read the host's key (no authentication), asking for the
    key type ``known_hosts`` already trusts first."""
    return SSHRunner(host, known_hosts=known_hosts, via=via, pacer=pacer,
                     options=SSHOptions(connect_timeout=timeout)).host_key()


_DROPPED = (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
            TimeoutError)
_NO_BANNER = "Error reading SSH protocol banner"


@contextmanager
def _dropped_in_setup(target: str) -> Iterator[None]:
    """Translate like ``_translate``; a drop before login becomes SSHSetupDropped: no banner
    (sshd past MaxStartups closes at once), a reset, EOF or a timeout in the handshake."""
    try:
        with _translate(target, "connecting to"):
            yield
    except SSHConnectError as exc:
        cause = exc.__cause__
        if isinstance(cause, _DROPPED) or (
                isinstance(cause, paramiko.SSHException) and str(cause).startswith(_NO_BANNER)):
            raise SSHSetupDropped(str(exc)) from cause
        raise


@contextmanager
def _translate(target: str, doing: str) -> Iterator[None]:
    """Turn paramiko and socket exceptions into tools.errors, ``from`` the original."""
    try:
        yield
    except paramiko.BadAuthenticationType as exc:
        allowed = ", ".join(exc.allowed_types) or "nothing"
        raise SSHAuthError(f"{target} does not accept key authentication "
                           f"(it allows: {allowed})") from exc
    except paramiko.AuthenticationException as exc:
        raise SSHAuthError(f"{target} refused authentication: {exc}") from exc
    except paramiko.ChannelException as exc:
        raise SSHConnectError(f"{doing} {target} failed: the server refused the channel "
                              f"({exc.text})") from exc
    except ConnectionRefusedError as exc:
        raise SSHConnectError(f"{target} refused the connection (is sshd running and "
                              f"listening on that port?)") from exc
    except socket.gaierror as exc:
        raise SSHConnectError(f"{doing} {target} failed: cannot resolve the address "
                              f"({exc.strerror})") from exc
    except TimeoutError as exc:
        raise SSHConnectError(f"{doing} {target} timed out") from exc
    except (paramiko.SSHException, EOFError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        raise SSHConnectError(f"{doing} {target} failed: {reason}") from exc
