"""Process logging for ``deckhand serve`` and ``deckhand worker``: text, or JSON lines.

JSON lines (``--log-format json`` or ``DECKHAND_LOG_FORMAT=json``) carry ``run_id`` and
``plan_id`` on every line (null outside a run), from ``agents.logcontext``, so a log store
can show everything one run did across the bot, its worker and its threads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from typing import Any, Literal

from agents import logcontext

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
HANDLER_NAME = "deckhand"
ENV = "DECKHAND_LOG_FORMAT"


class RunContextFilter(logging.Filter):
    """Adds ``run_id`` and ``plan_id`` to every record (a handler filter: sees all loggers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in logcontext.current().items():
            if getattr(record, key, None) is None:  # an explicit ``extra`` wins
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, run and plan ids, traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "run_id": getattr(record, "run_id", None),
            "plan_id": getattr(record, "plan_id", None),
            "thread": record.threadName,
        }
        if record.exc_info:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _iso(created: float) -> str:
    millis = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


def add_log_format_arg(parser: argparse.ArgumentParser) -> None:
    """The ``--log-format text|json`` option of the long-running commands (serve, worker,
    audit ship): ``bot.cli.main`` sets their logging up from it before anything else."""
    parser.add_argument("--log-format", choices=["text", "json"], default=None,
                        help="log lines as text or JSON (default $DECKHAND_LOG_FORMAT or text)")


def requested_format(flag: str | None) -> LogFormat:
    """``--log-format``, else ``$DECKHAND_LOG_FORMAT``, read before the settings are: a bad
    setting (a secret file that cannot be read) is then reported in the format asked for."""
    return "json" if (flag or os.environ.get(ENV, "")) == "json" else "text"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to whatever ``sys.stderr`` is then (a guarded stream after a
    broken pipe, a test's capture), never to one that has since been replaced and closed."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always the current sys.stderr


def configure_logging(fmt: LogFormat = "text", *, level: int = logging.INFO,
                      stream: Any = None) -> logging.Handler:
    """Send the root logger's records to ``stream`` (stderr) as text or JSON lines.

    Returns:
        The handler installed. One installed earlier by this function is replaced; other
        handlers (a test runner's, say) are left alone.
    """
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.addFilter(RunContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.set_name(HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    _route_stray_output(json_lines=fmt == "json")
    # APScheduler logs two INFO lines per job run (every 10 s): quiet by default
    logging.getLogger("apscheduler").setLevel(max(level, logging.WARNING))
    return handler


def _route_stray_output(*, json_lines: bool) -> None:
    """Under JSON, what Python itself would print to stderr goes through logging too: an
    exception that ends a thread (a multi-line traceback) and ``warnings`` (a library's
    deprecation notice). Text logging leaves Python's own printing alone."""
    logging.captureWarnings(json_lines)
    threading.excepthook = _log_thread_exception if json_lines else threading.__excepthook__


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return  # as Python's own hook: a thread that exits says nothing
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("deckhand").error(
        "thread %s ended with an uncaught exception", name,
        exc_info=args.exc_value)


def json_logging() -> bool:
    """Whether ``configure_logging`` installed JSON lines (then every line must be JSON)."""
    return any(h.get_name() == HANDLER_NAME and isinstance(h.formatter, JsonFormatter)
               for h in logging.getLogger().handlers)


def announce(console: Any, message: str, *, level: int = logging.INFO) -> None:
    """A line for the operator: a JSON log line under ``--log-format json`` (so a log store
    parses every line), else one unwrapped console line."""
    if json_logging():
        logging.getLogger("deckhand").log(level, message)
    else:
        console.print(message, markup=False, highlight=False, soft_wrap=True, emoji=False,
                      style="red" if level >= logging.ERROR else None)  # `a:b:` stays text
