"""An OpenAI-compatible chat-completions server on 127.0.0.1 for tests (offline, no API key).

``FakeOpenAI(reply)`` answers every ``POST .../chat/completions`` with ``reply(body)`` (``body`` the
request JSON: ``messages``, ``model``, sampling fields) and records the requests. It runs in a
daemon thread; ``close()`` stops it (or let it end with the test process).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    """A local chat-completions endpoint; ``url`` is its API root (with ``/v1``)."""

    def __init__(self, reply: Callable[[dict[str, Any]], str]) -> None:
        self.requests: list[dict[str, Any]] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.requests.append({"auth": self.headers.get("Authorization"), **body})
                text = reply(body)
                out = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
