"""Model traffic of an evaluation, at the HTTP transport: counted, recorded, or replayed.

The real ``openai.OpenAI`` client is used unchanged; it is given an HTTP client whose
transport is a :class:`ModelTraffic`:

    live    forward to the endpoint; count tokens per case
    record  the same, and save every answer to DIR as one readable JSON file
    replay  answer from DIR only, never the network; a request without a recording fails

An answer is keyed by a hash of the request: method, path below the base URL and the
canonical JSON body — which holds the model and the whole prompt, so a changed prompt or
model finds no recording and says so, rather than passing on an old answer. Transient
failures (429, 5xx) are not recorded: a replay must not reproduce an outage.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2

from agents.errors import EvaluationError
from agents.evaluation.cases import slug


class Mode(StrEnum):
    LIVE = "live"
    RECORD = "record"
    REPLAY = "replay"


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


class NoRecording(httpx2.TransportError):
    """A replayed request has no recorded answer (the openai client sees a failed request)."""


class ModelTraffic(httpx2.BaseTransport):
    """The transport under one planner configuration's openai client, case by case."""

    def __init__(self, mode: Mode, *, base_url: str, model: str, directory: Path | None = None,
                 forward: httpx2.BaseTransport | None = None,
                 redact: Callable[[str], str] = lambda text: text):
        """
        Args:
            mode: live, record or replay.
            base_url: the client's base URL; keys use paths below it, so a recording made
                against one host replays against another.
            model: the model asked (names the recording files).
            directory: where recordings are written (record) or read (replay).
            forward: the transport to the endpoint (live, record); a default one if None.
            redact: masks secrets in what is written to a recording.
        """
        self.mode, self.directory, self.redact, self.model = mode, directory, redact, model
        self.base_path = urlsplit(base_url).path.rstrip("/")
        self.forward = forward or (None if mode is Mode.REPLAY else httpx2.HTTPTransport())
        self.case = ""
        self.usage: dict[str, Usage] = {}
        self.misses: dict[str, str] = {}
        self.saved: dict[str, int] = {}
        self.recorded = _load(directory) if mode is Mode.REPLAY and directory else {}
        if mode is Mode.RECORD and directory is not None:
            _writable(directory)

    def begin(self, case: str) -> None:
        """Attribute the requests that follow to ``case``."""
        self.case = case
        self.usage[case] = Usage()
        self.misses.pop(case, None)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        body = _json_or_text(request.read())
        path = request.url.path.removeprefix(self.base_path)
        key = request_key(request.method, path, body)
        if self.mode is Mode.REPLAY:
            return self._replay(key, body)
        assert self.forward is not None
        response = self.forward.handle_request(request)
        content = response.read()
        response.close()
        answer = httpx2.Response(response.status_code, headers=_kept_headers(response),
                                 content=content, request=request)
        self._count(answer)
        if self.mode is Mode.RECORD and not _transient(answer.status_code):
            self._save(key, request.method, path, body, answer)
        return answer

    def close(self) -> None:
        """Close the endpoint transport; after recording, drop this model's older files for
        the cases recorded (a case that now needs fewer requests leaves none behind)."""
        if self.forward is not None:
            self.forward.close()
        for case, count in self.saved.items():
            for stale in self._files(case, start=count):
                stale.unlink()

    def _files(self, case: str, *, start: int) -> list[Path]:
        assert self.directory is not None
        found = self.directory.glob(f"{case}.{slug(self.model)}.*.json")
        return [f for f in found if f.stem.rpartition(".")[2].isdigit()
                and int(f.stem.rpartition(".")[2]) >= start]

    # -- replay -----------------------------------------------------------------------------

    def _replay(self, key: str, body: Any) -> httpx2.Response:
        found = self.recorded.get(key)
        if found is None:
            self.misses[self.case] = self._miss_message(body)
            raise NoRecording(self.misses[self.case])
        answer = found["response"]
        content = (json.dumps(answer["body"]).encode() if answer.get("json", True)
                   else str(answer["body"]).encode())
        response = httpx2.Response(int(answer["status"]), content=content,
                                   headers={"content-type": answer.get("content_type", "")})
        self._count(response)
        return response

    def _miss_message(self, body: Any) -> str:
        model = body.get("model") if isinstance(body, dict) else None
        others = sorted({str(r.get("model")) for r in self.recorded.values()
                         if r.get("case") == self.case})
        where = f" in {self.directory}" if self.directory else ""
        if not others:
            return f"no recording for case {self.case}{where}; record it with --record DIR"
        return (f"no recording for case {self.case} (prompt or model changed): this request "
                f"to {model} matches none of the case's {len(others)} recorded model(s) "
                f"({', '.join(others)}); re-record with --record DIR")

    # -- record -----------------------------------------------------------------------------

    def _save(self, key: str, method: str, path: str, body: Any,
              response: httpx2.Response) -> None:
        assert self.directory is not None
        parsed, is_json = _body(response)
        record = {"case": self.case, "model": body.get("model") if isinstance(body, dict)
                  else None, "key": key, "request": {"method": method, "path": path,
                                                     "body": body},
                  "response": {"status": response.status_code, "json": is_json,
                               "content_type": response.headers.get("content-type", ""),
                               "body": parsed}}
        index = self.saved.get(self.case, 0)
        self.saved[self.case] = index + 1
        # The same name for the same case, model and turn: a changed prompt is a diff of the
        # file, not a new file next to a stale one.
        name = f"{self.case or 'request'}.{slug(self.model)}.{index}.json"
        text = self.redact(json.dumps(record, indent=2, ensure_ascii=False))
        (self.directory / name).write_text(text + "\n", encoding="utf-8")

    def _count(self, response: httpx2.Response) -> None:
        parsed, is_json = _body(response)
        usage = parsed.get("usage") if is_json and isinstance(parsed, dict) else None
        if not isinstance(usage, dict):
            return
        mine = self.usage.setdefault(self.case, Usage())
        mine.input_tokens += int(usage.get("prompt_tokens") or 0)
        mine.output_tokens += int(usage.get("completion_tokens") or 0)


def request_key(method: str, path: str, body: Any) -> str:
    """The hash a request's answer is filed under (canonical JSON: key order, no spaces)."""
    canonical = json.dumps({"method": method.upper(), "path": path, "body": body},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _body(response: httpx2.Response) -> tuple[Any, bool]:
    try:
        return json.loads(response.content), True
    except ValueError:
        return response.content.decode("utf-8", "replace"), False


def _json_or_text(data: bytes) -> Any:
    try:
        return json.loads(data or b"null")
    except ValueError:
        return data.decode("utf-8", "replace")


def _writable(directory: Path) -> None:
    """EvaluationError now, rather than a failed write in the middle of a model call."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".deckhand-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise EvaluationError(f"cannot record into {directory}: {exc.strerror}; choose a "
                              f"directory you can write") from exc


def _kept_headers(response: httpx2.Response) -> dict[str, str]:
    """The headers the client needs (the body is already decoded, so no content-encoding)."""
    keep = ("content-type", "retry-after", "retry-after-ms", "x-request-id")
    return {k: v for k, v in response.headers.items() if k.lower() in keep}


def _transient(status: int) -> bool:
    return status == 429 or status >= 500


def _load(directory: Path) -> dict[str, dict[str, Any]]:
    """Every recording in ``directory`` by key; EvaluationError if none or one is unreadable."""
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not files:
        raise EvaluationError(f"no recordings in {directory}; make them with --record "
                              f"{directory}")
    out: dict[str, dict[str, Any]] = {}
    for file in files:
        try:
            record = json.loads(file.read_text(encoding="utf-8"))
            out[str(record["key"])] = record
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EvaluationError(f"{file}: not a deckhand recording ({exc}); delete it or "
                                  f"record again") from exc
    return out
