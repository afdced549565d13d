"""A minimal Lambda Runtime API on 127.0.0.1, so both implementations are driven the same way."""

import json
import queue
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .common import ACCOUNT, REGION, BenchError, tail

API = "/2018-06-01/runtime"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:"


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A function killed mid-request (the end of its sandbox) resets its connection: expected.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class RuntimeApi:
    """A minimal Lambda Runtime API: one function instance, invocations one at a time."""

    def __init__(self, function_name):
        self.function_name = function_name
        self.invocations = queue.Queue()
        self.lock = threading.Condition()
        self.results = {}
        self.init_error = None
        self.first_next_at = None
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Head and body leave in one segment, now: written apart, Nagle held the body back
            # until the function's delayed ACK of the head (up to 40 ms an answer, both sides).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def reply(self, status, body=b"", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self._headers_buffer.append(b"\r\n")
                self._headers_buffer.append(body)
                self.flush_headers()

            def do_GET(self):
                if self.path != f"{API}/invocation/next":
                    return self.reply(404, b'{"errorMessage":"not found"}')
                now = time.monotonic()
                with api.lock:
                    if api.first_next_at is None:
                        api.first_next_at = now
                        api.lock.notify_all()
                item = api.invocations.get()
                if item is None:  # shutting down
                    self.close_connection = True
                    return
                request_id, body = item
                deadline_ms = int(time.time() * 1000) + 300_000
                self.reply(
                    200,
                    body,
                    [
                        ("Lambda-Runtime-Aws-Request-Id", request_id),
                        ("Lambda-Runtime-Deadline-Ms", str(deadline_ms)),
                        ("Lambda-Runtime-Invoked-Function-Arn", FUNCTION_ARN + api.function_name),
                        ("Lambda-Runtime-Trace-Id", f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]}"),
                    ],
                )

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = self.path.split("/")
                # /2018-06-01/runtime/invocation/{id}/response|error, /2018-06-01/runtime/init/error
                with api.lock:
                    if self.path == f"{API}/init/error":
                        api.init_error = body.decode(errors="replace")
                    elif len(parts) == 6 and parts[3] == "invocation" and parts[5] in ("response", "error"):
                        api.results[parts[4]] = (parts[5], body)
                    else:
                        return self.reply(404, b'{"errorMessage":"not found"}')
                    api.lock.notify_all()
                self.reply(202, b'{"status":"OK"}')

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self):
        return f"127.0.0.1:{self.server.server_address[1]}"

    def wait_ready(self, proc, log_path, timeout=120.0):
        """Waits for the first GET /next; returns its monotonic time."""
        end = time.monotonic() + timeout
        with self.lock:
            while self.first_next_at is None:
                if self.init_error is not None:
                    raise BenchError(f"{self.function_name}: init error: {self.init_error}\n{tail(log_path)}")
                if proc.poll() is not None:
                    raise BenchError(f"{self.function_name} exited during init ({proc.returncode})\n{tail(log_path)}")
                if time.monotonic() > end:
                    raise BenchError(f"{self.function_name} did not ask for an invocation in {timeout} s")
                self.lock.wait(0.01)
            return self.first_next_at

    def invoke(self, body, proc, log_path, timeout=300.0):
        request_id = str(uuid.uuid4())
        self.invocations.put((request_id, body))
        end = time.monotonic() + timeout
        with self.lock:
            while request_id not in self.results:
                if proc.poll() is not None:
                    raise BenchError(f"{self.function_name} exited ({proc.returncode})\n{tail(log_path)}")
                if time.monotonic() > end:
                    raise BenchError(f"{self.function_name}: no response in {timeout} s")
                self.lock.wait(0.5)
            kind, result = self.results.pop(request_id)
        if kind == "error":
            raise BenchError(f"{self.function_name}: invocation error: {result.decode(errors='replace')}")
        return json.loads(result)

    def close(self):
        self.invocations.put(None)
        self.server.shutdown()
        self.server.server_close()
