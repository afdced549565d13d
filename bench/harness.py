"""`make bench`: our payments consumer against the Powertools peer, one workload, one local AWS.

Both implementations are Lambda functions speaking the Lambda Runtime API; this harness is that
API (a minimal server on 127.0.0.1, on a free port), so each is driven the same way:

    ours   target/lambda/payments-consumer/bootstrap          (lambda_runtime, Rust, release)
    peer   .tools/bench-venv/bin/python bench/peer/bootstrap.py handler.lambda_handler
           (aws-lambda-powertools: idempotency + batch utilities, boto3 ledger transaction)

The workload is generated once from a seed: credits only (so order does not matter) on a few
accounts, bodies per the payment event contract, a share of duplicates (the same body re-sent
later in the stream, in a later batch, under a new message id, as a producer retry is), in SQS
batches. For each round (fresh tables, so rounds are independent; the order of the two
implementations alternates between rounds) and each implementation:

- init: from spawning the process until its first GET /next reaches the harness;
- the batch phase: every batch in turn, each answered before the next is sent; wall time gives
  the throughput; the threads' run time from /proc/<pid>/task/*/schedstat (ns), read after init
  and after the last batch, gives the handler's CPU per message (init excluded; user+sys ticks
  from /proc/<pid>/stat when a thread exited meanwhile);
- DynamoDB requests and modelled write units, counted by the local AWS itself
  (`/_local-aws/requests`) for every request it serves: reset before the batch phase and read
  after it (the whole run); then one batch of ten first deliveries alone and one batch of their
  ten duplicates alone, each between a reset and a read, give the requests per message of each
  kind of batch exactly;
- peak RSS: VmHWM from /proc/<pid>/status at the end;
- correctness: the ledger table is scanned (consistent reads) and must hold exactly one entry per
  unique event and, per account, a balance equal to the sum of its events with the right entry
  count; anything else stops the bench with an error.

Then the batch-size table (--batch-sizes, default 1, 10 and 1000 messages an invocation):
first deliveries only, spread over --accounts accounts and hot on --hot-accounts, each row one
run of each implementation in a fresh process on fresh tables: requests, write units and CPU per
message and throughput, the ledger checked after each.

Medians over the rounds, "ours / peer" and their ratio, then the batch-size table and the issue's
targets it decides, go to stdout and `target/bench/report.md`, with a chart of the ratios (log
scale) in `target/bench/chart.svg`. The local AWS keeps connections alive (HTTP/1.1), as DynamoDB
does, so neither side pays a TCP handshake per request.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import queue
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
from boto3.dynamodb.types import TypeDeserializer
from botocore.config import Config as BotoConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Cargo's target directory (bench/run.sh passes --ours and --out from `cargo metadata`).
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
API = "/2018-06-01/runtime"
REGION = "us-east-1"
ACCOUNT = "000000000000"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:payments"
PROBE = 10  # first deliveries (then their duplicates) in each probe batch
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(SystemExit):
    """Stops the bench loudly: a broken invariant, a crashed function, a failed record."""

    def __init__(self, message):
        super().__init__(f"bench: FAILED: {message}")


def log(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The workload


class Workload:
    """Deliveries in SQS batches, generated once from a seed; the same bytes for every run."""

    def __init__(self, events, duplicate_pct, accounts, batch_size, seed):
        rng = random.Random(seed)
        if not 0 <= duplicate_pct < 50:
            raise SystemExit("--duplicate-pct must be in [0, 50)")
        self.batch_size = batch_size
        self.events = [self.event(rng, f"pay-{seed}-{i:06d}", accounts) for i in range(events)]
        # Duplicates are the given share of all deliveries: D / (N + D) = pct.
        duplicates = round(events * duplicate_pct / (100 - duplicate_pct))
        messages = events + duplicates
        # Which positions of the stream carry a duplicate: any but the first batch's. A duplicate
        # re-sends the body of an event whose first delivery was in an earlier batch (a producer
        # retry arrives after the first attempt, not beside it), each event at most once, so no
        # batch holds two copies of one event and every count below is exact.
        dup_slots = set(rng.sample(range(batch_size, messages), duplicates))
        order, eligible, this_batch, next_first = [], [], [], 0
        for pos in range(messages):
            if pos % batch_size == 0:
                eligible += this_batch
                this_batch = []
            if pos in dup_slots:
                if not eligible:
                    raise SystemExit("too many duplicates for this many events")
                order.append((eligible.pop(rng.randrange(len(eligible))), True))
            else:
                order.append((next_first, False))
                this_batch.append(next_first)
                next_first += 1
        self.order = order
        self.first_deliveries = sum(1 for _, dup in order if not dup)
        self.duplicates = sum(1 for _, dup in order if dup)
        self.bodies = [json.dumps(e, separators=(",", ":")) for e in self.events]
        self.batches = [
            sqs_event([self.bodies[i] for i, _ in order[k : k + batch_size]], rng)
            for k in range(0, len(order), batch_size)
        ]
        # The probes: ten more first deliveries alone, then their ten duplicates alone.
        self.probe_events = [self.event(rng, f"pay-{seed}-probe-{k:02d}", accounts) for k in range(PROBE)]
        probe_bodies = [json.dumps(e, separators=(",", ":")) for e in self.probe_events]
        self.probe_first = sqs_event(probe_bodies, rng)
        self.probe_duplicate = sqs_event(probe_bodies, rng)

    @staticmethod
    def event(rng, event_id, accounts):
        return {
            "event_id": event_id,
            "account_id": f"acct_{rng.randrange(accounts):02d}",
            "amount_cents": rng.randint(100, 100_000),
            "currency": "USD",
        }

    @property
    def messages(self):
        return len(self.order)

    def expected(self):
        """Every unique event the ledger must hold after a run, probes included."""
        return self.events + self.probe_events


def sqs_event(bodies, rng):
    """An SQS event as Lambda's event source mapping sends it; new message ids, as retries get."""
    now_ms = str(int(time.time() * 1000))
    records = []
    for body in bodies:
        records.append(
            {
                "messageId": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "receiptHandle": f"AQEB{rng.getrandbits(64):016x}",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now_ms,
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": now_ms,
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": QUEUE_ARN,
                "awsRegion": REGION,
            }
        )
    return json.dumps({"Records": records}).encode()


# ---------------------------------------------------------------------------------------------
# The Lambda Runtime API


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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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


def tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Processes and the local AWS


def cpu_seconds(pid):
    """user + sys of the whole process (every thread, live or exited), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_snapshot(pid):
    """(ticks, fine): user+sys from /proc/<pid>/stat (every thread, live or exited, in 10 ms
    ticks) and the scheduler's run time of each live thread (/proc/<pid>/task/*/schedstat, ns)."""
    fine = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    fine += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        fine = None
    return cpu_seconds(pid), (None if fine is None else fine / 1e9)


def cpu_between(before, after):
    """CPU seconds between two snapshots: the scheduler's nanoseconds, unless a thread that ran
    meanwhile has exited (then its time is only in the ticks, which exceed the fine figure)."""
    ticks = after[0] - before[0]
    if before[1] is None or after[1] is None:
        return ticks
    fine = after[1] - before[1]
    return ticks if ticks - fine > 2 / CLK_TCK else fine


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no VmHWM in /proc/{pid}/status")


class LocalAws:
    def __init__(self, endpoint):
        self.endpoint = endpoint.rstrip("/")
        self.dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=BotoConfig(retries={"max_attempts": 2, "mode": "standard"}),
        )

    def route(self, path, method="GET"):
        req = urllib.request.Request(self.endpoint + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def check(self):
        try:
            self.route("/_local-aws/health")
            self.route("/_local-aws/requests")
        except Exception as e:
            raise BenchError(
                f"the local AWS at {self.endpoint} has no /_local-aws/requests route ({e}); "
                "start it with infra/local/aws.sh up"
            )

    def reset(self):
        self.route("/_local-aws/requests/reset", "POST")

    def requests(self):
        """DynamoDB requests served since the last reset, by operation."""
        counts = self.route("/_local-aws/requests")["requests"]
        return {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("dynamodb:")}

    def write_units(self):
        """Modelled DynamoDB write units of the requests served since the last reset (serve.py:
        a put its item's size in 1 KB units, an update or check 1, twice inside a transaction)."""
        units = self.route("/_local-aws/requests").get("write_units")
        if units is None:
            raise BenchError(f"the local AWS at {self.endpoint} does not model write units: restart it")
        return sum(v for k, v in units.items() if k.startswith("dynamodb:"))

    def create_tables(self, prefix):
        idem, ledger = f"{prefix}-idempotency", f"{prefix}-ledger"
        self.dynamodb.create_table(
            TableName=idem,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.dynamodb.create_table(
            TableName=ledger,
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            BillingMode="PAY_PER_REQUEST",
        )
        return idem, ledger

    def delete_tables(self, *names):
        for name in names:
            try:
                self.dynamodb.delete_table(TableName=name)
            except self.dynamodb.exceptions.ResourceNotFoundException:
                pass

    def scan(self, table):
        deserialize = TypeDeserializer().deserialize
        items, start = [], None
        while True:
            kwargs = {"TableName": table, "ConsistentRead": True}
            if start:
                kwargs["ExclusiveStartKey"] = start
            out = self.dynamodb.scan(**kwargs)
            items += [{k: deserialize(v) for k, v in item.items()} for item in out.get("Items", [])]
            start = out.get("LastEvaluatedKey")
            if not start:
                return items


def verify_ledger(aws, ledger, expected, name):
    """Exactly one entry per unique event; each balance the sum of its events. Else: fail."""
    items = aws.scan(ledger)
    entries = {i["sk"][len("entry#") :]: i for i in items if i["sk"].startswith("entry#")}
    balances = {i["pk"]: i for i in items if i["sk"] == "balance"}
    n_entries = sum(1 for i in items if i["sk"].startswith("entry#"))
    problems = []
    if n_entries != len(expected):
        problems.append(f"{n_entries} ledger entries, {len(expected)} unique events")
    sums, counts = {}, {}
    for e in expected:
        pk = f"account#{e['account_id']}"
        sums[pk] = sums.get(pk, 0) + e["amount_cents"]
        counts[pk] = counts.get(pk, 0) + 1
        entry = entries.get(e["event_id"])
        if entry is None:
            problems.append(f"no entry for {e['event_id']}")
        elif entry["pk"] != pk or int(entry["amount_cents"]) != e["amount_cents"] or entry["currency"] != "USD":
            problems.append(f"entry of {e['event_id']} is wrong: {entry}")
    if set(balances) != set(sums):
        problems.append(f"balance items for {len(balances)} accounts, {len(sums)} expected")
    wrong = 0
    for pk, total in sums.items():
        b = balances.get(pk)
        if b is None or int(b["balance_cents"]) != total or int(b["entry_count"]) != counts[pk] or b["currency"] != "USD":
            wrong += 1
            if wrong <= 5:
                problems.append(f"{pk}: balance {b and b.get('balance_cents')} count {b and b.get('entry_count')}, "
                                f"expected {total} over {counts[pk]}")
    if problems:
        raise BenchError(f"{name}: the ledger is wrong:\n  " + "\n  ".join(problems[:20]))
    return {"entries": n_entries, "accounts": len(balances), "wrong_balances": wrong}


# ---------------------------------------------------------------------------------------------
# Implementations


class Implementation:
    def __init__(self, name, label, argv, function_name, extra_env=None):
        self.name, self.label, self.argv, self.function_name = name, label, argv, function_name
        self.extra_env = extra_env or {}

    def env(self, runtime, endpoint, idem, ledger):
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "AWS_LAMBDA_RUNTIME_API": runtime.address,
            "AWS_LAMBDA_FUNCTION_NAME": self.function_name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{self.function_name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "2026/01/01/[$LATEST]bench",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "IDEMPOTENCY_TABLE": idem,
            "LEDGER_TABLE": ledger,
            "OUTBOX_TABLE": "",
        }
        env.update(self.extra_env)
        return env


def warm_up(impl, aws, endpoint, log_dir):
    """Spawns once until the first GET /next, untimed: page cache and Python's bytecode cache
    are warm for every measured round, for both."""
    runtime = RuntimeApi(impl.function_name)
    log_path = os.path.join(log_dir, f"{impl.name}-warmup.log")
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            impl.argv, env=impl.env(runtime, endpoint, "warmup-idempotency", "warmup-ledger"),
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
        try:
            runtime.wait_ready(proc, log_path)
        finally:
            stop(proc)
            runtime.close()


def stop(proc):
    if proc.poll() is None:
        if proc.args[0] == "perf":  # --perf: perf writes its profile on SIGINT, then ends ours
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
            return
        proc.send_signal(signal.SIGKILL)  # what the end of an execution environment does
    proc.wait(timeout=10)


def run_once(impl, workload, aws, endpoint, round_no, log_dir):
    prefix = f"bench-r{round_no}-{impl.name}-{uuid.uuid4().hex[:6]}"
    idem, ledger = aws.create_tables(prefix)
    runtime = RuntimeApi(impl.function_name)
    log_path = os.path.join(log_dir, f"{impl.name}-round{round_no}.log")
    out = open(log_path, "wb")
    proc = None
    try:
        env = impl.env(runtime, endpoint, idem, ledger)
        spawned = time.monotonic()
        proc = subprocess.Popen(impl.argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        ready = runtime.wait_ready(proc, log_path)
        init_ms = (ready - spawned) * 1000
        time.sleep(0.05)  # let the process settle in its GET /next before reading its CPU
        cpu0 = cpu_snapshot(proc.pid)

        aws.reset()
        start = time.monotonic()
        for batch in workload.batches:
            response = runtime.invoke(batch, proc, log_path)
            if response.get("batchItemFailures"):
                raise BenchError(f"{impl.name}: failed records {response['batchItemFailures']}\n{tail(log_path)}")
        elapsed = time.monotonic() - start
        cpu1 = cpu_snapshot(proc.pid)
        run_requests = aws.requests()
        run_units = aws.write_units()

        probes = {}
        for kind, batch in (("first", workload.probe_first), ("duplicate", workload.probe_duplicate)):
            aws.reset()
            response = runtime.invoke(batch, proc, log_path)
            if response.get("batchItemFailures"):
                raise BenchError(f"{impl.name}: failed probe records {response['batchItemFailures']}")
            probes[kind] = aws.requests()
        rss = peak_rss_mib(proc.pid)
    finally:
        if proc is not None:
            stop(proc)
        runtime.close()
        out.close()

    checked = verify_ledger(aws, ledger, workload.expected(), f"{impl.name}, round {round_no}")
    idem_items = aws.scan(idem)
    aws.delete_tables(idem, ledger)

    per_first = sum(probes["first"].values()) / PROBE
    per_dup = sum(probes["duplicate"].values()) / PROBE
    total = sum(run_requests.values())
    modelled = workload.first_deliveries * per_first + workload.duplicates * per_dup
    cpu = cpu_between(cpu0, cpu1)
    return {
        "init_ms": init_ms,
        "cpu_us_per_msg": cpu * 1e6 / workload.messages,
        "cpu_s": cpu,
        "cpu_ticks_s": cpu1[0] - cpu0[0],
        "wcu_per_msg": run_units / workload.messages,
        "throughput": workload.messages / elapsed,
        "batch_phase_s": elapsed,
        "peak_rss_mib": rss,
        "req_first": per_first,
        "req_dup": per_dup,
        "req_first_ops": {k: v / PROBE for k, v in sorted(probes["first"].items())},
        "req_dup_ops": {k: v / PROBE for k, v in sorted(probes["duplicate"].items())},
        "req_run": total,
        "req_run_ops": dict(sorted(run_requests.items())),
        "req_run_consistent": total == modelled,
        "req_per_msg": total / workload.messages,
        "ledger": checked,
        "idempotency_items": len(idem_items),
        "idempotency_completed": sum(1 for i in idem_items if i.get("status") == "COMPLETED"),
    }


class Scenario:
    """One row of the batch-size table: first deliveries only (no duplicates), in batches of one
    size, spread over many accounts or hot on a few."""

    def __init__(self, label, batch_size, accounts, events, seed):
        self.label, self.batch_size, self.accounts = label, batch_size, accounts
        self.workload = Workload(events, 0, accounts, batch_size, seed)

    @property
    def key(self):
        return f"{self.label}-{self.batch_size}"


def run_scenario(impl, scenario, aws, endpoint, log_dir):
    """One implementation through one scenario, in a fresh process on fresh tables: requests and
    write units per message, throughput, CPU per message; the ledger is checked after."""
    workload = scenario.workload
    prefix = f"bench-{scenario.key}-{impl.name}-{uuid.uuid4().hex[:6]}"
    idem, ledger = aws.create_tables(prefix)
    runtime = RuntimeApi(impl.function_name)
    log_path = os.path.join(log_dir, f"{impl.name}-{scenario.key}.log")
    out = open(log_path, "wb")
    proc = None
    try:
        proc = subprocess.Popen(impl.argv, env=impl.env(runtime, endpoint, idem, ledger), cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)
        runtime.wait_ready(proc, log_path)
        time.sleep(0.05)
        cpu0 = cpu_snapshot(proc.pid)
        aws.reset()
        start = time.monotonic()
        for batch in workload.batches:
            response = runtime.invoke(batch, proc, log_path)
            if response.get("batchItemFailures"):
                raise BenchError(f"{impl.name}, {scenario.key}: failed records "
                                 f"{response['batchItemFailures'][:5]}\n{tail(log_path)}")
        elapsed = time.monotonic() - start
        cpu1 = cpu_snapshot(proc.pid)
        requests = aws.requests()
        units = aws.write_units()
    finally:
        if proc is not None:
            stop(proc)
        runtime.close()
        out.close()
    verify_ledger(aws, ledger, workload.events, f"{impl.name}, {scenario.key}")
    aws.delete_tables(idem, ledger)
    n = workload.messages
    return {
        "messages": n,
        "req_per_msg": sum(requests.values()) / n,
        "req_ops": dict(sorted(requests.items())),
        "wcu_per_msg": units / n,
        "throughput": n / elapsed,
        "cpu_us_per_msg": cpu_between(cpu0, cpu1) * 1e6 / n,
    }


def scenario_table(scenarios, results, ours, peer):
    head = [
        "| workload | batch | requests/msg ours | peer | write units/msg ours | peer | msg/s ours | peer "
        "| ours vs peer | CPU µs/msg ours | peer |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sc in scenarios:
        o, p = results[ours].get(sc.key), results[peer].get(sc.key)
        if o is None or p is None:
            continue
        head.append(
            f"| {sc.label} ({sc.accounts} accounts) | {sc.batch_size:,} | {o['req_per_msg']:.3f} | {p['req_per_msg']:.2f} "
            f"| {o['wcu_per_msg']:.2f} | {p['wcu_per_msg']:.2f} | {o['throughput']:,.0f} | {p['throughput']:,.0f} "
            f"| {o['throughput'] / p['throughput']:.1f}x | {o['cpu_us_per_msg']:,.0f} | {p['cpu_us_per_msg']:,.0f} |"
        )
    return "\n".join(head)


def scenario_targets(scenarios, results, ours, peer, largest):
    """The issue's targets that the batch-size table decides: (text, met)."""
    o = results[ours]
    out = []
    if "spread-10" in o:
        v = o["spread-10"]["req_per_msg"]
        out.append((f"requests per message at batch 10, no duplicates: {v:.3f} (target <= 0.15)", v <= 0.15))
    if f"spread-{largest}" in o:
        v = o[f"spread-{largest}"]["req_per_msg"]
        out.append((f"requests per message at batch {largest:,}: {v:.3f} (target <= 0.05)", v <= 0.05))
    for label in ("spread", "hot"):
        one = o.get(f"{label}-1")
        if one is None:
            continue
        for sc in scenarios:
            if sc.label == label and sc.batch_size > 1 and sc.key in o:
                v = o[sc.key]["wcu_per_msg"]
                out.append((f"write units per message, {label}, batch {sc.batch_size:,}: {v:.2f} against "
                            f"{one['wcu_per_msg']:.2f} one by one (target: never above; lower when hot)",
                            v <= one["wcu_per_msg"] and (label != "hot" or v < one["wcu_per_msg"])))
    return out


# ---------------------------------------------------------------------------------------------
# The report


def fmt(v, digits):
    return f"{v:,.{digits}f}"


def build_report(args, workload, results, impls, overhead, meta):
    ours, peer = impls[0].name, impls[1].name
    med = {name: {} for name in (ours, peer)}
    for name in med:
        for key in ("init_ms", "cpu_us_per_msg", "throughput", "peak_rss_mib", "req_first", "req_dup", "req_per_msg",
                    "wcu_per_msg"):
            med[name][key] = statistics.median(r[key] for r in results[name])

    def ratio_lower(key):
        return med[peer][key] / med[ours][key] if med[ours][key] else float("inf")

    rows = []  # (metric, ours, peer, ratio, ratio_text, target, met)

    def add(metric, key, digits, target_text, met, higher_is_better=False):
        r = med[ours][key] / med[peer][key] if higher_is_better else ratio_lower(key)
        rows.append((metric, fmt(med[ours][key], digits), fmt(med[peer][key], digits), r, target_text, met))

    add(f"DynamoDB requests per message, a batch of {PROBE} first deliveries", "req_first", 2,
        "ours <= 0.15, peer ~3", med[ours]["req_first"] <= 0.15)
    add(f"DynamoDB requests per message, a batch of their {PROBE} duplicates", "req_dup", 2, "ours <= peer",
        med[ours]["req_dup"] <= med[peer]["req_dup"])
    add("DynamoDB requests per message, whole run", "req_per_msg", 2, "-", None)
    add("DynamoDB write units per message, whole run (modelled)", "wcu_per_msg", 2, "ours <= peer",
        med[ours]["wcu_per_msg"] <= med[peer]["wcu_per_msg"])
    add("handler CPU per message (µs, user+sys)", "cpu_us_per_msg", 0, "ours <= 100 µs",
        med[ours]["cpu_us_per_msg"] <= 100)
    add("init (ms, spawn to first /next)", "init_ms", 1, "ours <= 15 ms", med[ours]["init_ms"] <= 15)
    add("peak RSS (MiB, VmHWM)", "peak_rss_mib", 1, ">= 3x lower", ratio_lower("peak_rss_mib") >= 3)
    add("throughput (messages/s, batch phase)", "throughput", 0, ">= 3x the peer", ratio_lower("throughput") <= 1 / 3,
        higher_is_better=True)

    yes = lambda m: "-" if m is None else ("**yes**" if m else "**no**")
    table = [
        f"| metric (median of {args.rounds} round{'s' if args.rounds > 1 else ''}) | ours | peer | ours vs peer | target | met |",
        "|---|---:|---:|---:|---|---|",
    ]
    for metric, o, p, r, target, met in rows:
        table.append(f"| {metric} | {o} | {p} | {r:.1f}x {'better' if r > 1.0 else ('same' if r == 1.0 else 'worse')} | {target} | {yes(met)} |")
    table_text = "\n".join(table)

    consistent = {n: all(r["req_run_consistent"] for r in results[n]) for n in med}
    lines = [
        "# Benchmark: payments-consumer (Rust) against the Powertools pattern (Python)",
        "",
        f"{meta['date']}; {meta['cpu']}, {meta['cores']} cores; load average {meta['load_before']} before, "
        f"{meta['load_after']} after; local AWS {args.endpoint} (moto, one request at a time, connections kept alive).",
        "",
        f"Workload (seed {args.seed}): {len(workload.events)} payment events (credits) on {args.accounts} accounts, "
        f"{workload.duplicates} duplicates ({100 * workload.duplicates / workload.messages:.0f} % of "
        f"{workload.messages} messages, each re-sent in a later batch under a new message id), "
        f"{len(workload.batches)} SQS batches of {workload.batch_size}; then a probe batch of {PROBE} first "
        f"deliveries and one of their {PROBE} duplicates. {args.rounds} round(s), fresh tables each, "
        "the two implementations alternating which goes first.",
        "",
        f"- ours: `{rel(' '.join(impls[0].argv))}` ({meta['ours_size']})",
        f"- peer: `{rel(' '.join(impls[1].argv))}` ({meta['peer_versions']})",
        "",
        table_text,
        "",
        '"ours vs peer" is peer / ours for costs (higher is better for ours) and ours / peer for throughput.',
        "",
        "How each figure is taken:",
        "",
        "- requests: counted by the local AWS for every request it serves (`/_local-aws/requests`), the "
        "probe batches measured alone; by operation, per first delivery: ours "
        f"{ops_text(results[ours][0]['req_first_ops'])}; peer {ops_text(results[peer][0]['req_first_ops'])}; "
        f"per duplicate: ours {ops_text(results[ours][0]['req_dup_ops'])}; peer {ops_text(results[peer][0]['req_dup_ops'])}. "
        f"The whole batch phase (round 1: ours {results[ours][0]['req_run']}, peer {results[peer][0]['req_run']} "
        "requests) equals first deliveries x per first + duplicates x per duplicate for a one-message-at-a-time "
        f"consumer (peer: {'yes' if consistent[peer] else 'NO'}); ours commits a batch at once, and a batch "
        "mixing first deliveries and duplicates costs its cancelled transaction and the retry of the rest "
        f"(ours: {'yes' if consistent[ours] else 'no'});",
        "- write units: modelled by the local AWS from each DynamoDB request (moto reports no consumed "
        "capacity), as docs/cost-model.md models them: a put its item's size in 1 KB units, an update, "
        "delete or condition check 1, every action of a transaction twice, once when the transaction is "
        "cancelled (its prepare phase);",
        "- CPU: the run time of the function process's threads from `/proc/<pid>/task/*/schedstat` (ns) "
        "between its first GET /next and the last batch's response (init excluded), divided by the "
        "messages; user+sys from `/proc/<pid>/stat` (10 ms ticks, exited threads included) instead "
        "when a thread exited meanwhile;",
        "- init: from spawning the process to its first GET /next (Lambda's init phase, without the sandbox "
        "and the download of the code);",
        "- peak RSS: VmHWM of the process at the end of the round;",
        "- throughput: messages over the wall time of the batch phase, batches sent one at a time. The "
        "local AWS serves one request at a time on the same 2 cores, so this mostly measures requests "
        "per message against that server, not what DynamoDB would do;",
        "- the local AWS keeps connections alive for both (HTTP/1.1, as DynamoDB does; infra/local/serve.py), "
        "and the function's CPU is measured on this machine's cores, not on a Lambda vCPU share;",
        "- correctness, every round and both: ledger entries = unique events "
        f"({results[ours][0]['ledger']['entries']}), each of the {results[ours][0]['ledger']['accounts']} "
        "balances = the sum of its events with the right entry count. Idempotency table: ours "
        f"{results[ours][0]['idempotency_items']} items (one record per event), peer "
        f"{results[peer][0]['idempotency_items']} ({results[peer][0]['idempotency_completed']} COMPLETED).",
        "",
    ]
    if overhead:
        lines += [
            "In-process overhead of `Idempotency::run` with `InMemoryStore` (criterion, "
            "`crates/effectively-once/benches/overhead.rs`): first delivery "
            f"{overhead['first_delivery_overhead_ns'] / 1000:.2f} µs, replay {overhead['replay_overhead_ns'] / 1000:.2f} µs "
            f"per call over a bare handler call ({overhead['bare_handler_ns']:.1f} ns).",
            "",
        ]
    lines += ["## Every round", "", "| round | impl | init ms | CPU µs/msg | msg/s | peak RSS MiB | req first | req dup | req run | WCU/msg |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in (ours, peer):
        for k, r in enumerate(results[name], 1):
            lines.append(
                f"| {k} | {name} | {r['init_ms']:.1f} | {r['cpu_us_per_msg']:.0f} | {r['throughput']:.0f} | "
                f"{r['peak_rss_mib']:.1f} | {r['req_first']:g} | {r['req_dup']:g} | {r['req_run']} | {r['wcu_per_msg']:.2f} |"
            )
    lines.append("")
    return table_text, "\n".join(lines), rows


def rel(command):
    return command.replace(ROOT + "/", "")


def ops_text(ops):
    return " + ".join(f"{v:g} {k}" for k, v in ops.items()) or "none"


def chart_svg(rows, rounds):
    """Horizontal bars: ours vs peer (x better), log scale, with each target marked."""
    import math

    targets = {"peak RSS": 3, "throughput": 3}
    bars = [(metric, r, f"{r:.1f}x ({o} vs {p})") for metric, o, p, r, _, _ in rows]
    width, left, right, top, bar_h, gap = 960, 330, 40, 60, 26, 14
    height = top + len(bars) * (bar_h + gap) + 50
    lo = 0.1 if min(r for _, r, _ in bars) < 0.9 else 0.5
    hi = max(300.0, max(r for _, r, _ in bars) * 4)
    span = math.log10(hi) - math.log10(lo)
    x = lambda v: left + (width - left - right) * (math.log10(max(v, lo)) - math.log10(lo)) / span
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="13">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold">'
        f"payments-consumer (Rust) vs the Powertools pattern (Python), median of {rounds} round{'s' if rounds > 1 else ''}</text>",
        f'<text x="{width / 2}" y="44" text-anchor="middle" fill="#555">how many times better ours is '
        "(ours vs peer), log scale; 1x = equal; dashed: the issue's target</text>",
    ]
    for tick in (0.1, 0.3, 0.5, 1, 3, 10, 30, 100, 300, 1000):
        if tick > hi or tick < lo:
            continue
        tx = x(tick)
        out.append(f'<line x1="{tx:.1f}" y1="{top - 6}" x2="{tx:.1f}" y2="{height - 40}" stroke="#ddd"/>')
        out.append(f'<text x="{tx:.1f}" y="{height - 24}" text-anchor="middle" fill="#555">{tick:g}x</text>')
    out.append(f'<line x1="{x(1):.1f}" y1="{top - 6}" x2="{x(1):.1f}" y2="{height - 40}" stroke="#333"/>')
    for k, (metric, r, label) in enumerate(bars):
        y = top + k * (bar_h + gap)
        x0, x1 = x(1), x(r)
        color = "#2b8a3e" if r > 1.0 else ("#868e96" if r == 1.0 else "#c92a2a")
        out.append(f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" text-anchor="end">{esc(metric)}</text>')
        out.append(
            f'<rect x="{min(x0, x1):.1f}" y="{y}" width="{max(abs(x1 - x0), 2):.1f}" height="{bar_h}" fill="{color}"/>'
        )
        out.append(f'<text x="{max(x0, x1) + 6:.1f}" y="{y + bar_h * 0.7:.1f}">{esc(label)}</text>')
        for needle, target in targets.items():
            if needle in metric:
                tx = x(target)
                out.append(
                    f'<line x1="{tx:.1f}" y1="{y - 3}" x2="{tx:.1f}" y2="{y + bar_h + 3}" stroke="black" '
                    'stroke-width="2" stroke-dasharray="4,3"/>'
                )
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1000, help="unique payment events (default 1000)")
    p.add_argument("--duplicate-pct", type=float, default=20, help="share of messages that are duplicates")
    p.add_argument("--accounts", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"))
    p.add_argument("--ours", default=os.path.join(TARGET, "lambda/payments-consumer/bootstrap"))
    p.add_argument("--out", default=os.path.join(TARGET, "bench"))
    p.add_argument("--only", choices=("ours", "peer"), help="run one implementation, no report (for profiling)")
    p.add_argument("--perf", metavar="FILE",
                   help="with --only ours: run ours under `perf record -g -o FILE` (its CPU figures then "
                        "include perf's; read the profile with `perf report -i FILE`)")
    p.add_argument("--batch-sizes", default="1,10,1000",
                   help="the batch-size table's sizes, first deliveries only (default 1,10,1000; '' skips it)")
    p.add_argument("--scenario-events", type=int, default=1000,
                   help="messages of each batch-size row (default 1000; at least the largest size)")
    p.add_argument("--hot-accounts", type=int, default=2, help="accounts of the hot-account rows (default 2)")
    args = p.parse_args()
    if args.rounds < 1 or args.events < 2 * args.batch_size:
        raise SystemExit("need at least 1 round and two batches of events")

    aws = LocalAws(args.endpoint)
    aws.check()
    if not os.access(args.ours, os.X_OK):
        raise BenchError(f"{args.ours} is missing: infra/cargo-lambda.sh build --release --compiler cargo -p payments-consumer")
    log_dir = os.path.join(args.out, "logs")
    os.makedirs(log_dir, exist_ok=True)

    workload = Workload(args.events, args.duplicate_pct, args.accounts, args.batch_size, args.seed)
    log(f"workload: {len(workload.events)} events, {workload.duplicates} duplicates, "
        f"{workload.messages} messages in {len(workload.batches)} batches")
    impls = [
        Implementation("ours", "payments-consumer (Rust)", [args.ours], "payments-consumer"),
        Implementation(
            "peer", "Powertools (Python)",
            [sys.executable, os.path.join(ROOT, "bench/peer/bootstrap.py"), "handler.lambda_handler"],
            "payments-consumer-powertools",
            {"PYTHONUNBUFFERED": "1"},
        ),
    ]
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_before": "%.2f %.2f %.2f" % os.getloadavg(),
        "ours_size": f"{os.path.getsize(args.ours) / 2**20:.1f} MiB, release",
        "peer_versions": peer_versions(),
    }
    if args.only:
        impls = [i for i in impls if i.name == args.only]
    if args.perf:
        if args.only != "ours":
            raise SystemExit("--perf needs --only ours")
        impls[0].argv = ["perf", "record", "-q", "-F", "2999", "-g", "-o", args.perf, "--"] + impls[0].argv
    for impl in impls:
        warm_up(impl, aws, args.endpoint, log_dir)

    results = {impl.name: [] for impl in impls}
    for round_no in range(1, args.rounds + 1):
        order = impls if round_no % 2 else impls[::-1]
        for impl in order:
            r = run_once(impl, workload, aws, args.endpoint, round_no, log_dir)
            results[impl.name].append(r)
            log(f"round {round_no} {impl.name}: init {r['init_ms']:.1f} ms, CPU {r['cpu_us_per_msg']:.0f} µs/msg, "
                f"{r['throughput']:.0f} msg/s, peak RSS {r['peak_rss_mib']:.1f} MiB, requests first "
                f"{r['req_first']:g} dup {r['req_dup']:g} run {r['req_run']}"
                f", {r['wcu_per_msg']:.2f} write units/msg; ledger ok")

    sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    scenarios = [Scenario(label, b, accounts, max(args.scenario_events, b), args.seed + 1)
                 for label, accounts in (("spread", args.accounts), ("hot", args.hot_accounts)) for b in sizes]
    scenario_results = {impl.name: {} for impl in impls}
    for k, sc in enumerate(scenarios):
        for impl in (impls if k % 2 else impls[::-1]):
            r = run_scenario(impl, sc, aws, args.endpoint, log_dir)
            scenario_results[impl.name][sc.key] = r
            log(f"{sc.key} {impl.name}: {r['req_per_msg']:.3f} requests/msg, {r['wcu_per_msg']:.2f} write units/msg, "
                f"{r['throughput']:.0f} msg/s, CPU {r['cpu_us_per_msg']:.0f} µs/msg; ledger ok")
    meta["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
    if args.only:
        return

    overhead = None
    try:
        with open(os.path.join(args.out, "overhead.json")) as f:
            overhead = json.load(f)
    except (OSError, ValueError):
        pass
    table, report, rows = build_report(args, workload, results, impls, overhead, meta)
    ours, peer = impls[0].name, impls[1].name
    sizes_table = scenario_table(scenarios, scenario_results, ours, peer)
    checks = scenario_targets(scenarios, scenario_results, ours, peer, max(sizes) if sizes else 0)
    checks_text = "\n".join(f"- {text}: {'**met**' if met else '**missed**'}" for text, met in checks)
    if scenarios:
        section = (
            f"## Batch sizes\n\nFirst deliveries only ({args.scenario_events:,} messages a row, "
            f"at least one batch), one run each, fresh process and tables; 'spread' on {args.accounts} accounts, "
            f"'hot' on {args.hot_accounts}. Write units are modelled by the local AWS from each request "
            "(a put its item's size in 1 KB units, an update or condition check 1, twice in a transaction, "
            "once in a cancelled one).\n\n" + sizes_table + "\n\n" + checks_text + "\n"
        )
        report = report.replace("## Every round", section + "\n## Every round", 1)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "chart.svg"), "w") as f:
        f.write(chart_svg(rows, args.rounds))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results, "scenarios": scenario_results, "overhead": overhead}, f, indent=2)
    print(table)
    print()
    if scenarios:
        print(sizes_table)
        print()
        print(checks_text)
        print()
    print(f"report: {os.path.relpath(os.path.join(args.out, 'report.md'), ROOT)}, "
          f"chart: {os.path.relpath(os.path.join(args.out, 'chart.svg'), ROOT)}")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def peer_versions():
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("aws-lambda-powertools", "boto3")) + f", Python {platform.python_version()}"


if __name__ == "__main__":
    main()
