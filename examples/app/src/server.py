"""The sample app: a tiny HTTP server that reports the version it was released as.

GET /version -> the release's VERSION file.  GET /health -> 200 "ok", or 500 for a
release built as broken (versions ending in "-broken"), which is how the demo shows
a bad release failing its smoke test.  GET /metrics -> Prometheus counters of requests
served and failed; a release ending in "-errors" stays healthy but fails its requests,
which only a metric gate notices.
"""

import argparse
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VERSION = (Path(__file__).parent / "VERSION").read_text().strip()
COUNTS = {"requests": 0, "errors": 0}


def serve_traffic():
    """Stand-in for real users: ten requests a second, failing in an "-errors" release."""
    while True:
        COUNTS["requests"] += 1
        COUNTS["errors"] += 1 if VERSION.endswith("-errors") else 0
        time.sleep(0.1)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's naming
        if self.path == "/version":
            self._reply(200, VERSION)
        elif self.path == "/metrics":
            self._reply(200, f"# TYPE app_requests_total counter\n"
                             f"app_requests_total {COUNTS['requests']}\n"
                             f"# TYPE app_errors_total counter\n"
                             f"app_errors_total {COUNTS['errors']}")
        elif self.path == "/health":
            healthy = not VERSION.endswith("-broken")
            self._reply(200 if healthy else 500, "ok" if healthy else "database migration failed")
        else:
            self._reply(404, "not found")

    def _reply(self, code, text):
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    threading.Thread(target=serve_traffic, daemon=True).start()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
