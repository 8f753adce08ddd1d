"""A webhook receiver for the alert tests, as a process of its own: it appends every POST
(time, path, JSON body) to a log file and answers as its mode file says at that moment:
``ok`` (204), ``fail`` (500) or ``hang`` (holds the request for a minute, then 204).

    python -m tests.integration.webhook_receiver --port P --log FILE --mode FILE
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HANG_S = 60.0


def serve(port: int, log: Path, mode: Path) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            now = mode.read_text().strip() if mode.exists() else "ok"
            with lock, log.open("a") as out:
                line = {"at": time.time(), "path": self.path, "mode": now, "body": body}
                out.write(json.dumps(line) + "\n")
            if now == "hang":
                time.sleep(HANG_S)
            self.send_response(500 if now == "fail" else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--mode", type=Path, required=True)
    found = parser.parse_args()
    serve(found.port, found.log, found.mode)
