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


# Requests served, by service and operation (`DynamoDB_20120810.PutItem` is `dynamodb:PutItem`),
# for benchmarks that compare what two implementations cost against the same server.
REQUESTS = {}


def operation_of(environ):
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        service, _, op = target.partition(".")
        return f"{service.split('_')[0].lower()}:{op}"
    return f"http:{environ.get('REQUEST_METHOD', '')} {environ.get('PATH_INFO', '')}"


def reset_requests():
    REQUESTS.clear()
    return {"reset": True}


# The project's own routes, beside moto's: moto's /moto-api/data.json serialises every
# model of every service (a megabyte after a test run), too slow to poll for one mailbox.
LOCAL_ROUTES = {
    "/_local-aws/health": lambda: {"server": "moto", "serialized": True},
    "/_local-aws/ses/messages": lambda: {"messages": sent_emails()},
    "/_local-aws/requests": lambda: {"requests": dict(sorted(REQUESTS.items()))},
    "/_local-aws/requests/reset": reset_requests,
}


def install_item_level_rollback():
    """Make TransactWriteItems cost what its items cost, not what its tables hold.

    moto 5.2.5 backs up every table a transaction names with `copy.deepcopy` before applying it,
    so each transaction costs time in proportion to the table's size (70 ms at 800 items, and
    growing): a workload of thousands of events slows quadratically. With requests served one
    at a time, a backup of just the items the transaction targets, and of each stream's length,
    restores the same state on cancellation.
    """
    import copy

    import moto.dynamodb.models as models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    class TablesByReference:
        """`copy` for moto's DynamoDB module: tables are not copied, anything else is."""

        @staticmethod
        def deepcopy(value, *args, **kwargs):
            if isinstance(value, Table):
                return value
            return copy.deepcopy(value, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(copy, name)

    models.copy = TablesByReference()
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        backups, streams = [], {}
        try:
            for entry in transact_items:
                for op_type, op in entry.items():
                    table = self.tables.get(op.get("TableName"))
                    if table is None:
                        continue
                    attrs = op.get("Item") if op_type == "Put" else op.get("Key")
                    if not attrs or table.hash_key_attr not in attrs:
                        continue
                    h = DynamoType(attrs[table.hash_key_attr])
                    r = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
                    if table.range_key_attr and table.range_key_attr not in attrs:
                        continue
                    current = table.get_item(h, r)
                    backups.append((table, h, r, copy.deepcopy(current)))
                    if table.stream_shard is not None and id(table) not in streams:
                        streams[id(table)] = (table, len(table.stream_shard.items))
        except Exception:
            # Let moto report malformed requests its own way.
            backups, streams = None, None
        try:
            return original(self, transact_items)
        except Exception:
            if backups is not None:
                for table, h, r, old in reversed(backups):
                    if r is None:
                        if old is None:
                            table.items.pop(h, None)
                        else:
                            table.items[h] = old
                    else:
                        if old is None:
                            table.items[h].pop(r, None)
                        else:
                            table.items[h][r] = old
                for table, length in streams.values():
                    del table.stream_shard.items[length:]
            raise

    DynamoDBBackend.transact_write_items = transact_write_items


class Serialized:
    """WSGI middleware: one request inside the application at any time."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        route = LOCAL_ROUTES.get(environ.get("PATH_INFO", ""))
        with self.lock:
            if route is not None and environ.get("REQUEST_METHOD") in ("GET", "POST"):
                body = json.dumps(route()).encode()
                start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
                return [body]
            op = operation_of(environ)
            REQUESTS[op] = REQUESTS.get(op, 0) + 1
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
    install_item_level_rollback()
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
