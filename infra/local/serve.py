"""Serve moto as the project's local AWS, one request at a time.

Stock `moto_server` runs each request on its own thread with no lock around a
conditional write's check and its write, so two concurrent `PutItem`s with an
`attribute_not_exists(...) OR ...` condition can both succeed. DynamoDB never
lets that happen, and our concurrency tests depend on it, so this wrapper keeps
werkzeug's threaded connection handling but runs the moto application under one
process-wide lock, and drains the response body inside it.

Connections are kept alive (HTTP/1.1), as DynamoDB's endpoints keep them: werkzeug's server
answers every request with `Connection: close`, so each SDK request paid a TCP handshake, a
thread start and a 10 ms drain of the socket, distorting every latency and throughput figure.

It keeps to this machine's programs: moto's allow-all CORS off, loopback Host names only, and
the one route that changes state (the counters' reset) POST only (docs/local.md).
"""

import argparse
import io
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from urllib.parse import parse_qs

from werkzeug.serving import ThreadedWSGIServer, run_simple

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


# Modelled DynamoDB write units, by operation, from the requests themselves (moto reports no
# consumed capacity), as docs/cost-model.md models them: a put costs its item's size in 1 KB
# units, an update, a delete or a condition check 1 unit (the items these workloads update are
# under 1 KB); every action of a TransactWriteItems twice that (prepare and commit), once (the
# prepare phase) when the transaction is cancelled; a failed conditional write still costs its
# units.
WRITE_UNITS = {}


def item_size(item):
    """DynamoDB's item size: attribute names plus values (numbers about 1 byte per 2 digits)."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def value_size(value):
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return len(v.lstrip("-").replace(".", "")) // 2 + 1
    if kind == "B":
        return len(v) * 3 // 4
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + value_size(x) for k, x in v.items())
    if kind == "L":
        return 3 + sum(1 + value_size(x) for x in v)
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: x}) for x in v)
    return 0


def write_units_of(op, body, cancelled=False):
    """Modelled write units of one DynamoDB request (0 for reads and control calls)."""
    try:
        request = json.loads(body or b"{}")
        if op == "dynamodb:PutItem":
            return -(-item_size(request["Item"]) // 1024) or 1
        if op in ("dynamodb:UpdateItem", "dynamodb:DeleteItem"):
            return 1
        if op == "dynamodb:BatchWriteItem":
            return sum(
                (-(-item_size(w["PutRequest"]["Item"]) // 1024) or 1) if "PutRequest" in w else 1
                for writes in request["RequestItems"].values()
                for w in writes
            )
        if op == "dynamodb:TransactWriteItems":
            return sum(
                (1 if cancelled else 2) * ((-(-item_size(a["Put"]["Item"]) // 1024) or 1) if "Put" in a else 1)
                for a in request["TransactItems"]
            )
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return 0


def reset_requests(_environ):
    REQUESTS.clear()
    WRITE_UNITS.clear()
    return {"reset": True}


# Milliseconds every DynamoDB request waits before it is served (0: none), set by POST
# /_local-aws/latency?ms=N. A local server answers in a fraction of a millisecond, so a client
# that burns CPU while a request is outstanding (a timer waking it, say) shows nothing here and
# pays it in production, where DynamoDB answers in milliseconds: the bench's latency rows
# (docs/bench.md) set it to see that CPU.
LATENCY = {"dynamodb_ms": 0}


def set_latency(environ):
    """POST /_local-aws/latency?ms=N: every DynamoDB request from now on waits N ms."""
    value = parse_qs(environ.get("QUERY_STRING", "")).get("ms", [""])[0]
    if not value.isdigit() or int(value) > 60_000:
        raise ValueError("expected ms=N, 0 to 60000")
    LATENCY["dynamodb_ms"] = int(value)
    return {"dynamodb_latency_ms": LATENCY["dynamodb_ms"]}


# The project's own routes, beside moto's, by path: the method each takes and its answer.
# moto's /moto-api/data.json serialises every model of every service (a megabyte after a test
# run), too slow to poll for one mailbox. The reset and the latency change state, so they take
# POST only: a GET is what a link or an <img> on any web page can send.
LOCAL_ROUTES = {
    "/_local-aws/health": ("GET", lambda _: {"server": "moto", "serialized": True}),
    "/_local-aws/ses/messages": ("GET", lambda _: {"messages": sent_emails()}),
    "/_local-aws/requests": ("GET", lambda _: {
        "requests": dict(sorted(REQUESTS.items())),
        "write_units": dict(sorted(WRITE_UNITS.items())),
    }),
    "/_local-aws/requests/reset": ("POST", reset_requests),
    "/_local-aws/latency": ("POST", set_latency),
}


def answer(start_response, status, body, headers=()):
    """A whole answer of our own (JSON when `body` is not bytes)."""
    if not isinstance(body, bytes):
        body, headers = json.dumps(body).encode(), [("Content-Type", "application/json"), *headers]
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]


# The Host names a request may carry: this machine's loopback ones. A web page whose name an
# attacker re-points at 127.0.0.1 (DNS rebinding) reaches this port from the browser with its own
# name in Host, and is refused. Any port: the fault proxy of tools/local-aws listens on a port of
# its own and forwards the Host it was sent.
LOOPBACK_HOST = re.compile(r"(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?", re.IGNORECASE)


class LoopbackHostOnly:
    """WSGI middleware: a request whose Host is not a loopback name gets 403, unserved."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if not LOOPBACK_HOST.fullmatch(environ.get("HTTP_HOST", "")):
            return answer(start_response, "403 Forbidden", b"the local AWS serves Host 127.0.0.1 or localhost only\n",
                          [("Content-Type", "text/plain")])
        return self.app(environ, start_response)


def disable_cors():
    """No CORS headers: moto's server answers every origin's preflight with allow-all, so any web
    page open in a browser here could read and write the local AWS. No client of it is a page."""
    import moto.moto_server.werkzeug_app as werkzeug_app

    werkzeug_app.DISABLE_GLOBAL_CORS = True


def make_app():
    """The local AWS's WSGI application: moto, without CORS, one request at a time, loopback
    Host names only."""
    disable_cors()
    return LoopbackHostOnly(Serialized(DomainDispatcherApplication(create_backend_app)))


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


def install_query_by_partition():
    """Make a Query on a table's key cost what its partition holds, not what the table holds.

    moto 5.2.5 answers every Query by sorting every item of the table, then keeping those of the
    asked partition: reading back the ledger account by account costs O(accounts x items log
    items). Without an index name, only the partition's items are handed to moto's own query
    code, which filters, sorts, pages and projects them as before.
    """
    from moto.dynamodb.models.table import Table

    original = Table.query

    def query(self, hash_key, *args, **kwargs):
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name or hash_key is None:
            return original(self, hash_key, *args, **kwargs)
        partition = self.items.get(hash_key)

        def one_partition():
            if partition is None:
                return []
            return list(partition.values()) if self.range_key_attr else [partition]

        # Requests are served one at a time, so shadowing the method for this call is safe.
        self.all_items = one_partition
        try:
            return original(self, hash_key, *args, **kwargs)
        finally:
            del self.all_items

    Table.query = query


def install_kinesis_resharding():
    """Reshard a Kinesis stream as Kinesis does.

    moto 5.2.5's SplitShard empties the parent and puts its records again, through the key
    routing, which still picks the closed parent: every record gets a new sequence number (a
    checkpointed record is delivered again) and no write ever reaches a child. MergeShards copies
    the parents' records into the child under new numbers. Kinesis closes a parent with its
    records and sequence numbers (readable until retention ends, so a consumer finishes it before
    its children) and routes new records by hash key to the open shards only.
    """
    from moto.kinesis.exceptions import InvalidArgumentError
    from moto.kinesis.models import Stream
    from moto.utilities.utils import md5_hash

    def get_shard_for_key(self, partition_key, explicit_hash_key):
        if not isinstance(partition_key, str) or len(partition_key) > 256:
            raise InvalidArgumentError("partition_key")
        if explicit_hash_key:
            if not isinstance(explicit_hash_key, str) or int(explicit_hash_key) >= 2**128:
                raise InvalidArgumentError("explicit_hash_key")
            key = int(explicit_hash_key)
        else:
            key = int(md5_hash(partition_key.encode("utf-8")).hexdigest(), 16)
        # A child's range ends at its EndingHashKey inclusive (moto's own check leaves it out).
        for shard in self.shards.values():
            if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
                return shard
        return None

    def keeping_records(original, *positions):
        """`original` with the records of the shards named at `positions` left where they are."""

        def call(self, *args):
            parents = [self.shards.get(args[i]) for i in positions]
            kept = [(shard, shard.records) for shard in parents if shard is not None]
            for shard, _ in kept:
                shard.records = type(shard.records)()
            try:
                return original(self, *args)
            finally:
                for shard, records in kept:
                    shard.records = records

        return call

    Stream.get_shard_for_key = get_shard_for_key
    Stream.split_shard = keeping_records(Stream.split_shard, 0)
    Stream.merge_shards = keeping_records(Stream.merge_shards, 0, 1)


def install_sqs_costs_by_batch():
    """Make SQS calls cost what they receive or delete, not what the queue holds.

    moto 5.2.5 makes a workload of n messages cost O(n^2) once a backlog builds up (the chaos
    scenario's producer runs a little ahead of its consumers, so the queue holds thousands):

    - ReceiveMessage builds the list of every visible message, then, for each message it hands
      out, asks `get_queue_attributes(["MessageRetentionPeriod"])`, which computes every attribute
      of the queue (the approximate counts walk all messages, with two clock reads each) three
      times: 30 walks of the queue per batch of ten;
    - DeleteMessage walks the queue twice per receipt handle, comparing it with every handle each
      message ever had;
    - GetQueueAttributes with named attributes computes all of them once per name, three times,
      and SendMessage computes all of them to read one (`ContentBasedDeduplication`).

    The replacements below give the same answers: a receive walks the queue from its head only
    until it has its batch (in-flight messages are skipped, as before), with one clock read; a
    receipt handle is found through an index; an attribute is computed when it is read.
    """
    from collections.abc import Mapping

    from moto.core.utils import camelcase_to_underscores, unix_time, unix_time_millis
    from moto.sqs import models
    from moto.sqs.exceptions import ReceiptHandleIsInvalid

    by_handle = {}
    original_mark_received = models.Message.mark_received

    def mark_received(self, visibility_timeout=None):
        original_mark_received(self, visibility_timeout)
        by_handle[self.receipt_handle] = self

    models.Message.mark_received = mark_received

    def delete_message(self, receipt_handle):
        if receipt_handle in self.deleted_messages:
            # Already deleted: SQS accepts a second delete.
            return
        message = by_handle.get(receipt_handle)
        # `in` on a list of plain objects compares identities, in C.
        if message is None or message not in self._messages:
            raise ReceiptHandleIsInvalid()
        self._messages.remove(message)
        self.pending_messages.discard(message)
        handles = message.all_receipt_handles
        self.deleted_messages.update(handles)
        for handle in handles:
            by_handle.pop(handle, None)

    models.Queue.delete_message = delete_message

    class QueueAttributes(Mapping):
        """`Queue.attributes`, each value computed when asked for: a send asks whether the queue
        deduplicates by content, and used to count every message in it to find out."""

        def __init__(self, queue):
            self.queue = queue
            names = list(queue.BASE_ATTRIBUTES)
            if queue.fifo_queue:
                names += queue.FIFO_ATTRIBUTES
            if queue.kms_master_key_id:
                names += queue.KMS_ATTRIBUTES
            self.names = list(dict.fromkeys(names))

        def __getitem__(self, name):
            # The value moto 5.2.5's `Queue.attributes` holds under `name`.
            if name not in self.names:
                raise KeyError(name)
            queue = self.queue
            if name == "Policy" and queue.policy:
                value = queue.policy
            elif name == "RedrivePolicy" and queue.redrive_policy:
                value = json.dumps(queue.redrive_policy)
            else:
                value = getattr(queue, camelcase_to_underscores(name))
            return str(value).lower() if isinstance(value, bool) else value

        def __iter__(self):
            return iter(self.names)

        def __len__(self):
            return len(self.names)

    models.Queue.attributes = property(QueueAttributes)

    def get_queue_attributes(self, queue_name, attribute_names):
        queue = self.get_queue(queue_name)
        if not attribute_names:
            return {}
        valid_names = ["All"] + queue.BASE_ATTRIBUTES + queue.FIFO_ATTRIBUTES + queue.KMS_ATTRIBUTES
        invalid_name = next((name for name in attribute_names if name not in valid_names), None)
        if invalid_name or invalid_name == "":
            raise models.InvalidAttributeName(invalid_name)
        attributes = queue.attributes
        if "All" in attribute_names:
            return dict(attributes)
        # Only the names asked for: the approximate counts walk the queue.
        named = (name for name in attribute_names if name in attributes)
        return {name: value for name in named if (value := attributes[name]) is not None}

    models.SQSBackend.get_queue_attributes = get_queue_attributes

    def receive_message(
        self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None
    ):
        # moto 5.2.5's receive_message, walking lazily and reading the clock once per pass.
        if message_attribute_names is None:
            message_attribute_names = []
        queue = self.get_queue(queue_name)
        retention_ms = int(queue.message_retention_period) * 1000
        result = []
        previous_result_count = len(result)
        polling_end = unix_time() + wait_seconds_timeout
        currently_pending_groups = models.deepcopy(queue.pending_message_groups)
        while True:
            if result or (wait_seconds_timeout and unix_time() > polling_end):
                break
            messages_to_dlq = []
            now = unix_time_millis()
            for message in queue._messages:
                # `Message.visible` and `Message.delayed`, against one clock read.
                if not now > message.visible_at or now < message.delayed_until:
                    continue
                if message in queue.pending_messages:
                    # Pending but visible again: the consumer timed out.
                    queue.pending_messages.remove(message)
                    currently_pending_groups = models.deepcopy(queue.pending_message_groups)
                if message.group_id and queue.fifo_queue:
                    if message.group_id in currently_pending_groups:
                        continue
                if (
                    queue.dead_letter_queue is not None
                    and queue.redrive_policy
                    and message.approximate_receive_count >= queue.redrive_policy["maxReceiveCount"]
                ):
                    messages_to_dlq.append(message)
                    continue
                queue.pending_messages.add(message)
                message.mark_received(visibility_timeout=visibility_timeout)
                message_copy = models.deepcopy(message)
                models._filter_message_attributes(message_copy, message_attribute_names)
                if message.sent_timestamp + retention_ms <= now:
                    # Past the retention period (moto's check, without the attribute walk).
                    break
                result.append(message_copy)
                if len(result) >= count:
                    break
            for message in messages_to_dlq:
                queue._messages.remove(message)
                queue.dead_letter_queue.add_message(message)
            if previous_result_count == len(result):
                if wait_seconds_timeout == 0:
                    break
                queue.wait_for_messages(1)
                continue
            previous_result_count = len(result)
        return result

    models.SQSBackend.receive_message = receive_message


class Serialized:
    """WSGI middleware: one request inside the application at any time."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        route = LOCAL_ROUTES.get(environ.get("PATH_INFO", ""))
        op = operation_of(environ)
        if route is None and op.startswith("dynamodb:") and LATENCY["dynamodb_ms"]:
            # Outside the lock: a remote store's latency overlaps between concurrent requests;
            # held inside, N requests in flight would wait N times as long.
            time.sleep(LATENCY["dynamodb_ms"] / 1000)
        with self.lock:
            if route is not None:
                method, handler = route
                if environ.get("REQUEST_METHOD") != method:
                    return answer(start_response, "405 Method Not Allowed", {"allowed": method}, [("Allow", method)])
                try:
                    return answer(start_response, "200 OK", handler(environ))
                except ValueError as e:
                    return answer(start_response, "400 Bad Request", {"error": str(e)})
            REQUESTS[op] = REQUESTS.get(op, 0) + 1
            statuses = []

            def recording_start_response(status, headers, exc_info=None):
                statuses.append(status)
                return start_response(status, headers, exc_info)

            body = self.app(environ, recording_start_response)
            try:
                # Materialise the body under the lock: a lazy iterator would
                # read backend state after another request had changed it.
                data = b"".join(body)
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()
            if op.startswith("dynamodb:") and hasattr(environ["wsgi.input"], "getvalue"):
                failed = bool(statuses) and not statuses[-1].startswith("2")
                units = write_units_of(op, environ["wsgi.input"].getvalue(), cancelled=failed)
                if units:
                    WRITE_UNITS[op] = WRITE_UNITS.get(op, 0) + units
            return [data]


class KeepAliveRequestHandler(MotoRequestHandler):
    """moto's request handler, keeping the connection open between requests.

    Hand-written because werkzeug (3.1) closes every connection by design: its `run_wsgi` always
    sends `Connection: close`, then drains the socket for 10 ms, which would swallow the next
    request of a kept-alive connection. Here the request body is read whole before the
    application runs (so the stream is at the next request line afterwards), and the one body
    `Serialized` materialises is sent with its Content-Length.
    """

    protocol_version = "HTTP/1.1"
    # Headers and body leave in one write, without waiting for the client's delayed ACK.
    disable_nagle_algorithm = True

    def run_wsgi(self):
        if self.headers.get("Expect", "").lower().strip() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        environ = self.make_environ()
        if environ.get("wsgi.input_terminated"):  # chunked: werkzeug dechunks it
            raw = environ["wsgi.input"].read()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))
        environ.pop("wsgi.input_terminated", None)
        started = []

        def start_response(status, headers, exc_info=None):
            started[:] = [status, headers]
            return lambda data: started.append(data)

        try:
            chunks = self.server.app(environ, start_response)
            try:
                body = b"".join(started[2:]) + b"".join(chunks)
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
            status, headers = started[0], started[1]
        except Exception:
            logging.getLogger("werkzeug").exception("error on %s %s", self.command, self.path)
            status, headers, body = "500 INTERNAL SERVER ERROR", [("Content-Type", "text/plain")], b"error"
        code, _, message = status.partition(" ")
        self.send_response(int(code), message)
        for key, value in headers:
            if key.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(key, value)
        no_body = self.command == "HEAD" or int(code) in (204, 304) or 100 <= int(code) < 200
        if not (int(code) in (204, 304) or 100 <= int(code) < 200):
            self.send_header("Content-Length", str(len(body)))
        if "close" in environ.get("HTTP_CONNECTION", "").lower():
            self.close_connection = True
            self.send_header("Connection", "close")
        self._headers_buffer.append(b"\r\n")
        if body and not no_body:
            self._headers_buffer.append(body)
        self.flush_headers()


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
    install_sqs_costs_by_batch()
    install_query_by_partition()
    install_kinesis_resharding()
    # One log line per request is a tenth of the server's time under load; errors still log.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = make_app()
    # Kept-alive connections sit idle in their (daemon) threads: stopping must not wait for them
    # (socketserver joins every connection's thread on close by default).
    ThreadedWSGIServer.block_on_close = False
    run_simple(
        args.host,
        args.port,
        app,
        threaded=True,
        request_handler=KeepAliveRequestHandler,
    )


if __name__ == "__main__":
    main()
