"""One implementation through one measured round (`run_once`) or one batch-size scenario
(`run_scenario`), in a fresh process on fresh tables."""

import os
import signal
import subprocess
import time
import uuid

from .common import PROBE, REGION, ROOT, BenchError, tail
from .runtime_api import RuntimeApi
from .sampling import cpu_between, cpu_snapshot, peak_rss_mib
from .local_aws import verify_ledger


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
