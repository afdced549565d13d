"""Serve moto as the project's local AWS, one request at a time.

Stock `moto_server` runs each request on its own thread with no lock around a
conditional write's check and its write, so two concurrent `PutItem`s with an
`attribute_not_exists(...) OR ...` condition can both succeed. DynamoDB never
lets that happen, and our concurrency tests depend on it, so this wrapper keeps
werkzeug's threaded connection handling but runs the moto application under one
process-wide lock, and drains the response body inside it.
"""

import argparse
import json
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


def sent_emails():
    """Every email SES (v1 or v2) accepted, in every account and region, oldest first."""
    from moto.ses.models import ses_backends

    emails = []
    for account_id, regions in ses_backends.items():
        for region, backend in regions.items():
            for m in backend.sent_messages:
                emails.append(
                    {
                        "id": m.id,
                        "source": getattr(m, "source", None),
                        "destinations": getattr(m, "destinations", None),
                        "subject": getattr(m, "subject", None),
                        "body": getattr(m, "body", None),
                        "account_id": account_id,
                        "region": region,
                    }
                )
    return emails


# The project's own read-only routes, beside moto's: moto's /moto-api/data.json serialises every
# model of every service (a megabyte after a test run), too slow to poll for one mailbox.
LOCAL_ROUTES = {
    "/_local-aws/health": lambda: {"server": "moto", "serialized": True},
    "/_local-aws/ses/messages": lambda: {"messages": sent_emails()},
}


class Serialized:
    """WSGI middleware: one request inside the application at any time."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        route = LOCAL_ROUTES.get(environ.get("PATH_INFO", ""))
        with self.lock:
            if route is not None and environ.get("REQUEST_METHOD") == "GET":
                body = json.dumps(route()).encode()
                start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
                return [body]
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
