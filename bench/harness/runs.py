"""One implementation through one measured round of the mix (`run_round`: sandbox A, then the
other sandbox B), one batch-size scenario (`run_scenario`), or callgrind (`count_instructions`),
each in fresh processes on fresh tables."""

import glob
import os
import re
import signal
import subprocess
import time
import uuid

from .common import PROBE, REGION, ROOT, BenchError, log, tail
from .local_aws import verify_ledger
from .runtime_api import RuntimeApi
from .sampling import cpu_between, cpu_snapshot, peak_rss_mib
from .workload import expected_ledger


class Implementation:
    """A function the bench drives: its command, and whether it posts every delivery (the floor:
    no idempotency) or each event once (the contract)."""

    def __init__(self, name, label, argv, function_name, extra_env=None, cwd=ROOT, every_delivery=False):
        self.name, self.label, self.argv, self.function_name = name, label, argv, function_name
        self.extra_env, self.cwd, self.every_delivery = dict(extra_env or {}), cwd, every_delivery

    def env(self, runtime, endpoint, idem, ledger, more=None):
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
        env.update(more or {})
        return env


class Sandbox:
    """One process of an implementation behind its own Runtime API: one execution environment."""

    def __init__(self, impl, endpoint, idem, ledger, log_path, env=None, wrap=()):
        self.impl, self.log_path = impl, log_path
        self.runtime = RuntimeApi(impl.function_name)
        self.out = open(log_path, "wb")
        self.spawned = time.monotonic()
        try:
            self.proc = subprocess.Popen(list(wrap) + impl.argv, env=impl.env(self.runtime, endpoint, idem, ledger, env),
                                         cwd=impl.cwd, stdout=self.out, stderr=subprocess.STDOUT)
            self.init_ms = (self.runtime.wait_ready(self.proc, log_path, timeout=600) - self.spawned) * 1000
        except BaseException:
            self.close()
            raise
        time.sleep(0.05)  # let the process settle in its GET /next before reading its CPU

    def invoke(self, batch, what):
        response = self.runtime.invoke(batch, self.proc, self.log_path)
        if response.get("batchItemFailures"):
            raise BenchError(f"{self.impl.name}, {what}: failed records {response['batchItemFailures'][:5]}\n"
                             f"{tail(self.log_path)}")

    def run(self, batches, aws, what):
        """The batches one after another: (wall s, CPU s, requests, write units)."""
        cpu0 = cpu_snapshot(self.proc.pid)
        aws.reset()
        start = time.monotonic()
        for batch in batches:
            self.invoke(batch, what)
        elapsed = time.monotonic() - start
        cpu1 = cpu_snapshot(self.proc.pid)
        requests, units = aws.counts()
        return elapsed, cpu_between(cpu0, cpu1), requests, units

    def close(self, sig=None):
        proc = getattr(self, "proc", None)
        if sig is None:
            # SIGKILL: what the end of an execution environment does; under --perf, SIGINT, on
            # which perf writes its profile and then ends ours.
            sig = signal.SIGINT if self.impl.argv[0] == "perf" else signal.SIGKILL
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.runtime.close()
        self.out.close()


def warm_up(impl, aws, endpoint, log_dir):
    """Spawns once until the first GET /next, untimed: page cache and Python's bytecode cache
    are warm for every measured round."""
    Sandbox(impl, endpoint, "warmup-idempotency", "warmup-ledger", os.path.join(log_dir, f"{impl.name}-warmup.log")).close()


def run_round(impl, mix, aws, endpoint, tag, log_dir, env=None, other_batch_size=None):
    """The mix through sandbox A (its stream, then the probes of first deliveries and of their
    duplicates) and then through sandbox B, a second process on the same tables (the
    other-sandbox stream, in batches of `other_batch_size`, then its probe of duplicates).
    `env`: more environment for both."""
    idem, ledger = aws.create_tables(f"bench-{tag}-{impl.name}-{uuid.uuid4().hex[:6]}")
    r = {}
    a = b = None
    try:
        a = Sandbox(impl, endpoint, idem, ledger, os.path.join(log_dir, f"{impl.name}-{tag}-a.log"), env)
        r["init_ms"] = a.init_ms
        elapsed, cpu, requests, units = a.run(mix.a_batches, aws, f"{tag} A")
        n = mix.messages
        r.update(cpu_us_per_msg=cpu * 1e6 / n, throughput=n / elapsed, req_per_msg=requests / n, wcu_per_msg=units / n)
        for kind in ("first", "dup_same"):
            _, _, requests, units = a.run([mix.probes[kind]], aws, f"{tag} probe {kind}")
            r[f"req_{kind}"], r[f"wcu_{kind}"] = requests / PROBE, units / PROBE
        r["peak_rss_mib"] = peak_rss_mib(a.proc.pid)
        b = Sandbox(impl, endpoint, idem, ledger, os.path.join(log_dir, f"{impl.name}-{tag}-b.log"), env)
        r["init_b_ms"] = b.init_ms
        elapsed, cpu, requests, units = b.run(mix.b_batches(other_batch_size), aws, f"{tag} B")
        n = mix.other_messages
        r.update(other_cpu_us_per_msg=cpu * 1e6 / n, other_throughput=n / elapsed, other_req_per_msg=requests / n,
                 other_wcu_per_msg=units / n)
        _, cpu, requests, units = b.run([mix.probes["dup_other"]], aws, f"{tag} probe dup_other")
        r.update(req_dup_other=requests / PROBE, wcu_dup_other=units / PROBE, cpu_us_dup_other=cpu * 1e6 / PROBE)
    finally:
        for s in (a, b):
            if s is not None:
                s.close()
    r["ledger"] = verify_ledger(aws, ledger, expected_ledger(mix.deliveries(), impl.every_delivery), f"{impl.name}, {tag}")
    r["idempotency_items"] = len(aws.scan(idem))
    aws.delete_tables(idem, ledger)
    return r


def run_scenario(impl, scenario, aws, endpoint, log_dir, env=None, latency_ms=0):
    """One implementation through one scenario, in a fresh process on fresh tables: requests and
    write units per message, throughput, CPU per message; the ledger is checked after.
    `latency_ms`: every DynamoDB request of the stream held that long by the local AWS."""
    tag = f"{scenario.key}-{latency_ms}ms" if latency_ms else scenario.key
    idem, ledger = aws.create_tables(f"bench-{tag}-{impl.name}-{uuid.uuid4().hex[:6]}")
    s = Sandbox(impl, endpoint, idem, ledger, os.path.join(log_dir, f"{impl.name}-{tag}.log"), env)
    try:
        if latency_ms:
            aws.set_latency(latency_ms)
        elapsed, cpu, requests, units = s.run(scenario.batches, aws, tag)
    finally:
        if latency_ms:
            aws.set_latency(0)
        s.close()
    expected = expected_ledger(scenario.deliveries(), impl.every_delivery)
    checked = verify_ledger(aws, ledger, expected, f"{impl.name}, {scenario.key}")
    aws.delete_tables(idem, ledger)
    n = len(scenario.messages)
    return {"messages": n, "req_per_msg": requests / n, "wcu_per_msg": units / n, "throughput": n / elapsed,
            "cpu_us_per_msg": cpu * 1e6 / n, "cpu_ms_per_batch": cpu * 1e3 / len(scenario.batches),
            "refused": checked["refused"]}


def count_instructions(impl, scenario, aws, endpoint, log_dir, warm=2, n_batches=10):
    """Instructions per message under callgrind, init and warm-up excluded: one process runs
    `warm` batches, then `n_batches`, then `n_batches` more, with `callgrind_control --dump`
    after each part (a dump zeroes the counters); the figure is the last part's instructions
    over its messages, and the part before it is printed beside it as a check of the noise. The
    process gets the run's idempotency table as `IDEMPOTENCY_TABLE`, as every sandbox does; with
    `FLOOR_RECORD=1` (the floor with the record) it must hold one record per message after, or
    the build ignored the variable and the count would be the bare floor's."""
    idem, ledger = aws.create_tables(f"bench-callgrind-{impl.name}-{uuid.uuid4().hex[:6]}")
    out_dir = os.path.join(log_dir, f"callgrind-{impl.name}")
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "callgrind.out*")):
        os.remove(old)
    base = os.path.join(out_dir, "callgrind.out")
    wrap = ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={base}", "--dump-instr=no",
            "--compress-strings=no"]
    batches = scenario.batches
    if len(batches) < warm + 2 * n_batches:
        raise BenchError("callgrind: the scenario has too few batches")
    s = Sandbox(impl, endpoint, idem, ledger, os.path.join(log_dir, f"{impl.name}-callgrind.log"), wrap=wrap)
    parts = []
    try:
        pid = s.proc.pid
        for k, part in enumerate((batches[:warm], batches[warm : warm + n_batches],
                                  batches[warm + n_batches : warm + 2 * n_batches])):
            for batch in part:
                s.invoke(batch, "callgrind")
            subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True, timeout=120)
            parts.append(sum(batch.count(b'"messageId"') for batch in part))
    finally:
        s.close(signal.SIGTERM)
        records = len(aws.scan(idem))
        aws.delete_tables(idem, ledger)
    if impl.extra_env.get("FLOOR_RECORD") == "1" and records != sum(parts):
        raise BenchError(f"callgrind {impl.name}: {records} records for {sum(parts)} messages: does {impl.argv[0]} "
                         "know FLOOR_RECORD?")
    totals = []
    for path in sorted(glob.glob(base + ".*"), key=lambda p: int(re.sub(r"\D", "", p.rsplit(".", 1)[1]) or 0)):
        with open(path, errors="replace") as f:
            m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
        if m:
            totals.append(int(m.group(1)))
    if len(totals) < 3:
        raise BenchError(f"callgrind: expected 3 dumps in {out_dir}, found {len(totals)}")
    per_msg = [t / n for t, n in zip(totals[1:3], parts[1:3])]
    log(f"callgrind {impl.name}: init {totals[0]:,} instructions with warm-up; per message "
        f"{per_msg[0]:,.0f} then {per_msg[1]:,.0f}")
    return {"instr_per_msg": per_msg[1], "instr_per_msg_check": per_msg[0], "batch_size": scenario.batch_size,
            "messages": parts[2], "label": impl.label, "records": records}
