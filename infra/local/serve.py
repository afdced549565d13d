"""Serve moto as the project's local AWS, one request at a time.

Stock `moto_server` runs each request on its own thread with no lock around a
conditional write's check and its write, so two concurrent `PutItem`s with an
`attribute_not_exists(...) OR ...` condition can both succeed. DynamoDB never
lets that happen, and our concurrency tests depend on it, so this wrapper keeps
werkzeug's threaded connection handling but runs the moto application under one
process-wide lock, and drains the response body inside it.
"""

import argparse
import os
import signal
import sys
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


class Serialized:
    """WSGI middleware: one request inside the application at any time."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            body = self.app(environ, start_response)
            try:
                # Materialise the body under the lock: a lazy iterator would
                # read backend state after another request had changed it.
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4566)
    args = parser.parse_args()
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("the local AWS binds loopback only")
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        Serialized(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
