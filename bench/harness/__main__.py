"""`python -m bench.harness`: the options, then warm-up, the rounds of the mix, the pre-read
runs, the batch-size rows, the store latency rows, callgrind, the report."""

import argparse
import datetime
import json
import os
import shutil
import sys

from . import __doc__
from .chart import chart_svg
from .common import ROOT, TARGET, BenchError, log
from .local_aws import LocalAws
from .report import build_report, peer_versions, trigger_table
from .runs import Implementation, count_instructions, run_round, run_scenario, warm_up
from .sampling import cpu_model
from .triggers import FEW, TRIGGERS
from .workload import Mix, Scenario

NAMES = ("ours", "floor", "peer", "peer-cache")


def options():
    p = argparse.ArgumentParser(prog="python -m bench.harness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1000, help="first deliveries of sandbox A's stream (default 1000)")
    p.add_argument("--other-events", type=int, help="first deliveries of sandbox B's stream (default events / 4)")
    p.add_argument("--duplicate-pct", type=float, default=20, help="share of each stream's messages that are duplicates")
    p.add_argument("--accounts", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"))
    p.add_argument("--ours", default=os.path.join(TARGET, "lambda/payments-consumer/bootstrap"))
    p.add_argument("--floor", default=os.path.join(TARGET, "lambda/payments-floor/bootstrap"))
    p.add_argument("--ours-kafka", default=os.path.join(TARGET, "lambda/kafka-consumer/bootstrap"),
                   help="ours on Kafka (apps/payments/kafka-consumer) for the trigger rows")
    p.add_argument("--ours-kinesis", default=os.path.join(TARGET, "lambda/payments-kinesis-consumer/bootstrap"),
                   help="ours on Kinesis (payments-consumer's payments-kinesis-consumer) for the trigger rows")
    p.add_argument("--out", default=os.path.join(TARGET, "bench"))
    p.add_argument("--only", help=f"comma-separated columns to run, of {', '.join(NAMES)} (the floor brings the "
                                   "instruction count of the floor with the record); without all four, no report is "
                                   "written (for development and profiling)")
    p.add_argument("--perf", metavar="FILE",
                   help="with --only ours: run ours under `perf record -g -o FILE` (its CPU figures then "
                        "include perf's; read the profile with `perf report -i FILE`)")
    p.add_argument("--batch-sizes", default="1,10,1000",
                   help="the batch-size table's sizes, first deliveries only (default 1,10,1000; '' skips them)")
    p.add_argument("--scenario-events", type=int, default=1000,
                   help="messages of each batch-size row (default 1000; at least the largest size)")
    p.add_argument("--hot-accounts", type=int, default=2, help="accounts of the hot-account rows (default 2)")
    p.add_argument("--no-refusals", action="store_true",
                   help="leave out the refusal rows (batch 100 on 3 accounts, batch 1000 hot with refusals)")
    p.add_argument("--preread", default="on",
                   help="run ours on the other-sandbox mix batched (its one pre-read mode) and one by one "
                        "('' skips them)")
    p.add_argument("--latencies", default="0,100,500",
                   help="the store latency rows: ours on SQS (and on Kafka with the trigger rows), batches of 10 on 20 accounts, 200 messages, each DynamoDB "
                        "request held this many ms by the local AWS (default 0,100,500; '' skips them)")
    p.add_argument("--triggers", default=",".join(TRIGGERS),
                   help=f"the trigger rows: ours on each of {', '.join(TRIGGERS)} (sqs: the standard queue), first "
                        "deliveries spread and hot at --trigger-sizes ('' skips them)")
    p.add_argument("--trigger-sizes", default="10,100", help="the trigger rows' batch sizes (default 10,100)")
    p.add_argument("--callgrind-batches", type=int, default=10,
                   help="batches of 10 in each counted part under callgrind (default 10; 0 skips callgrind)")
    return p.parse_args()


# What apps/payments/template.json sets for payments-consumer, given to the floor too so ours / floor
# credits neither the allocator nor its setting: mimalloc keeps freed pages instead of returning
# them to the OS a second after, which made every batch fault them in again (docs/profile.md).
RUST_ENV = {"MIMALLOC_PURGE_DELAY": "-1"}


def implementations(args):
    peer = [sys.executable, "-m", "awslambdaric", "handler.lambda_handler"]
    peer_dir = os.path.join(ROOT, "bench/peer")
    # What Lambda's Python 3.11 runtime sets; 3.12 and later would turn on awslambdaric's thread polling.
    peer_env = {"AWS_EXECUTION_ENV": f"AWS_Lambda_python{sys.version_info[0]}.{sys.version_info[1]}",
                "LAMBDA_TASK_ROOT": peer_dir}
    return [
        Implementation("ours", "ours", [args.ours], "payments-consumer", RUST_ENV),
        Implementation("floor", "floor", [args.floor], "payments-floor", RUST_ENV, every_delivery=True),
        Implementation("peer", "Powertools, cache off", peer, "payments-consumer-powertools",
                       {**peer_env, "PEER_LOCAL_CACHE": "0"}, cwd=peer_dir),
        Implementation("peer-cache", "Powertools, cache on", peer, "payments-consumer-powertools",
                       {**peer_env, "PEER_LOCAL_CACHE": "1"}, cwd=peer_dir),
    ]


def on_trigger(args, trigger, park_queue_url):
    """Ours on `trigger`: payments-consumer on the SQS queues, kafka-consumer on Kafka,
    payments-kinesis-consumer on Kinesis; the stream functions park poison in `park_queue_url`."""
    if trigger in ("sqs", "fifo"):
        return Implementation(f"ours-{trigger}", f"ours, {trigger}", [args.ours], "payments-consumer", RUST_ENV)
    argv, function = {"kafka": (args.ours_kafka, "kafka-consumer"),
                      "kinesis": (args.ours_kinesis, "payments-kinesis-consumer")}[trigger]
    return Implementation(f"ours-{trigger}", f"ours, {trigger}", [argv], function,
                          {**RUST_ENV, "PARK_QUEUE_URL": park_queue_url})


def floor_with_the_record(args):
    """The floor writing each event's least record too (`FLOOR_RECORD=1`, into the run's
    idempotency table): for the instruction count and the CPU of the batch-10 spread row (first
    deliveries) only, since a duplicate cancels its batch."""
    return Implementation("floor-record", "floor with the record", [args.floor], "payments-floor",
                          {**RUST_ENV, "FLOOR_RECORD": "1"}, every_delivery=True)


ABOUT = {
    "ours": "payments-consumer, release, its defaults (one pre-read mode); `MIMALLOC_PURGE_DELAY=-1`, as the "
            "template deploys it (the floor gets it too)",
    "floor": "bench/floor (`payments-floor`), release: the same ledger items in one TransactWriteItems per "
             "batch, no idempotency, no condition, so it posts every duplicate again and refuses nothing",
    "floor-record": "the floor with `FLOOR_RECORD=1`: per event also the least record duplicate detection needs "
                    "(`id`, `status`, `payload_hash`, `response`, condition `attribute_not_exists(#i)`) in the same "
                    "transaction, so most of ours' request size without the rest of its logic; instruction count, and CPU "
                    "in the batch-10 spread row (the reason the targets' lines give for a CPU miss)",
    "peer": "aws-lambda-powertools under awslambdaric: `IdempotencyConfig(event_key_jmespath=\"event_id\")`, every "
            "other option at its default (use_local_cache=False, expires_after_seconds=3600, no payload "
            "validation), `BatchProcessor(EventType.SQS)`, `DynamoDBPersistenceLayer` defaults",
    "peer-cache": "the same with `use_local_cache=True, local_cache_max_items=10_000` (as many answers as ours "
                  "remembers)",
}


def main():
    args = options()
    if args.rounds < 1 or args.events < 2 * args.batch_size:
        raise SystemExit("need at least 1 round and two batches of events")
    aws = LocalAws(args.endpoint)
    aws.check()
    impls = implementations(args)
    only = [x.strip() for x in args.only.split(",")] if args.only else list(NAMES)
    if set(only) - set(NAMES):
        raise SystemExit(f"--only: expected some of {', '.join(NAMES)}")
    impls = [i for i in impls if i.name in only]
    for i in impls:
        if i.argv[0] != sys.executable and not os.access(i.argv[0], os.X_OK):
            raise BenchError(f"{i.argv[0]} is missing: infra/lambda.sh build --local {i.function_name}")
    if args.perf:
        if only != ["ours"]:
            raise SystemExit("--perf needs --only ours")
        impls[0].argv = ["perf", "record", "-q", "-F", "2999", "-g", "-o", args.perf, "--"] + impls[0].argv
    log_dir = os.path.join(args.out, "logs")
    os.makedirs(log_dir, exist_ok=True)
    by_name = {i.name: i for i in impls}

    mix = Mix(args.events, args.duplicate_pct, args.accounts, args.batch_size, args.seed, args.other_events)
    log(f"mix: A {mix.messages} messages ({mix.duplicates} duplicates) in {len(mix.a_batches)} batches; "
        f"B {mix.other_messages} messages ({mix.other_duplicates} duplicates of A's events)")
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_before": "%.2f %.2f %.2f" % os.getloadavg(),
        # The peer's versions only when it runs: `--only ours,floor` needs no bench venv.
        "about": dict(ABOUT, peer=ABOUT["peer"] + f" ({peer_versions()})") if "peer" in only else ABOUT,
    }
    log(f"load average {meta['load_before']}")
    for impl in impls:
        warm_up(impl, aws, args.endpoint, log_dir)

    results = {impl.name: [] for impl in impls}
    for round_no in range(1, args.rounds + 1):
        k = (round_no - 1) % len(impls)
        for impl in impls[k:] + impls[:k]:
            r = run_round(impl, mix, aws, args.endpoint, f"r{round_no}", log_dir)
            results[impl.name].append(r)
            log(f"round {round_no} {impl.name}: init {r['init_ms']:.1f} ms; A: CPU {r['cpu_us_per_msg']:.0f} µs/msg, "
                f"{r['throughput']:.0f} msg/s, {r['req_per_msg']:.3f} req/msg, {r['wcu_per_msg']:.2f} WU/msg; probes: "
                f"first {r['req_first']:g} req, dup same {r['req_dup_same']:g} req {r['wcu_dup_same']:.2f} WU, dup other "
                f"{r['req_dup_other']:g} req {r['wcu_dup_other']:.2f} WU; B: {r['other_req_per_msg']:.3f} req/msg, "
                f"{r['other_wcu_per_msg']:.2f} WU/msg, CPU {r['other_cpu_us_per_msg']:.0f} µs/msg; ledger ok")

    preread, onebyone = {}, None
    if "ours" in by_name:
        if args.preread.strip():
            r = run_round(by_name["ours"], mix, aws, args.endpoint, "preread", log_dir)
            preread["batched"] = r
            log(f"pre-read: B {r['other_req_per_msg']:.3f} req/msg, {r['other_wcu_per_msg']:.2f} WU/msg, "
                f"CPU {r['other_cpu_us_per_msg']:.0f} µs/msg; dup other {r['req_dup_other']:g} req "
                f"{r['wcu_dup_other']:.2f} WU; ledger ok")
            onebyone = run_round(by_name["ours"], mix, aws, args.endpoint, "onebyone", log_dir, other_batch_size=1)
            log(f"one by one: B {onebyone['other_req_per_msg']:.3f} req/msg, {onebyone['other_wcu_per_msg']:.2f} WU/msg")

    sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    seed = args.seed + 1
    scenarios = [Scenario(label, b, accounts, max(args.scenario_events, b), seed)
                 for label, accounts in (("spread", args.accounts), ("hot", args.hot_accounts)) for b in sizes]
    if not args.no_refusals:
        scenarios += [Scenario("refusals", 100, 3, max(args.scenario_events, 100), seed, refusals="currency"),
                      Scenario("refusals", 1000, args.hot_accounts, max(args.scenario_events, 1000), seed, refusals="mixed")]
    scenario_results = {impl.name: {} for impl in impls}
    for k, sc in enumerate(scenarios):
        j = k % len(impls)
        for impl in impls[j:] + impls[:j]:
            r = run_scenario(impl, sc, aws, args.endpoint, log_dir)
            scenario_results[impl.name][sc.key] = r
            log(f"{sc.key} {impl.name}: {r['req_per_msg']:.3f} requests/msg, {r['wcu_per_msg']:.2f} write units/msg, "
                f"{r['throughput']:.0f} msg/s, CPU {r['cpu_us_per_msg']:.0f} µs/msg, {r['refused']} refused; ledger ok")
        if "floor" in by_name and sc.label == "spread" and sc.batch_size == 10:
            # The floor with the record beside them in this one row: what the record costs the
            # floor natively, which the CPU targets' line gives as the reason of a miss.
            fr = floor_with_the_record(args)
            r = run_scenario(fr, sc, aws, args.endpoint, log_dir)
            scenario_results.setdefault(fr.name, {})[sc.key] = r
            log(f"{sc.key} {fr.name}: {r['req_per_msg']:.3f} requests/msg, CPU {r['cpu_us_per_msg']:.0f} µs/msg; ledger ok")

    trigger_rows = {}
    triggers = [t.strip() for t in args.triggers.split(",") if t.strip()]
    if set(triggers) - set(TRIGGERS):
        raise SystemExit(f"--triggers: expected some of {', '.join(TRIGGERS)}")
    if "ours" in by_name and triggers:
        # Issue 38: ours on each trigger, the ordered ones on their ordered path, the same payments.
        park = aws.create_queue("bench-park")
        for size in [int(x) for x in args.trigger_sizes.split(",") if x.strip()]:
            for label, accounts in (("spread", args.accounts), ("few", FEW), ("hot", args.hot_accounts)):
                for trigger in triggers:
                    impl = on_trigger(args, trigger, park)
                    if not os.access(impl.argv[0], os.X_OK):
                        raise BenchError(f"{impl.argv[0]} is missing: infra/lambda.sh build --local {impl.function_name}")
                    sc = Scenario(label, size, accounts, max(args.scenario_events, size), seed + 3, trigger=trigger)
                    r = run_scenario(impl, sc, aws, args.endpoint, log_dir)
                    trigger_rows[(trigger, label, size)] = dict(r, accounts=accounts)
                    log(f"trigger {sc.key}, ours: {r['req_per_msg']:.3f} requests/msg, {r['wcu_per_msg']:.2f} write "
                        f"units/msg, CPU {r['cpu_us_per_msg']:.0f} µs/msg, {r['throughput']:.0f} msg/s; ledger ok")
        if aws.queue_depth(park):
            raise BenchError(f"the trigger rows parked {aws.queue_depth(park)} records: every payment is valid")
        log("by trigger:\n" + trigger_table(trigger_rows))

    latency = {}
    if "ours" in by_name:
        # As an outside harness drives it (issue 38): the whole process's CPU, batches of 10 over
        # 20 accounts, against a store that answers in `ms`, not in the local AWS's fraction of one;
        # the SQS consumer, and the Kafka one when the trigger rows run it.
        park = aws.create_queue("bench-park")
        for trigger in [t for t in ("sqs", "kafka") if t == "sqs" or t in triggers]:
            sc = Scenario("latency", 10, 20, 200, seed + 2, trigger=trigger)
            impl = on_trigger(args, trigger, park)
            for ms in [int(x) for x in args.latencies.split(",") if x.strip()]:
                r = run_scenario(impl, sc, aws, args.endpoint, log_dir, latency_ms=ms)
                latency.setdefault(trigger, {})[ms] = r
                log(f"store latency {ms} ms, {impl.function_name}: CPU {r['cpu_us_per_msg']:.0f} µs/msg "
                    f"({r['cpu_ms_per_batch']:.2f} ms an invocation), {r['req_per_msg']:.3f} requests/msg, "
                    f"{r['throughput']:.0f} msg/s; ledger ok")

    instructions = {}
    if args.callgrind_batches:
        if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
            log("no valgrind on PATH (apt-get install valgrind): instruction counts left out")
        else:
            sc = Scenario("callgrind", 10, args.accounts, (2 + 2 * args.callgrind_batches) * 10, seed + 1)
            counted = dict(by_name)
            if "floor" in by_name:
                counted["floor-record"] = floor_with_the_record(args)
            for name in ("ours", "floor", "floor-record"):
                if name in counted:
                    instructions[name] = count_instructions(counted[name], sc, aws, args.endpoint, log_dir,
                                                            n_batches=args.callgrind_batches)
    meta["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
    log(f"load average {meta['load_after']}")
    raw = {"meta": meta, "results": results, "scenarios": scenario_results, "preread": preread,
           "onebyone": onebyone, "instructions": instructions, "latency": {t: {str(ms): r for ms, r in rows.items()} for t, rows in latency.items()},
           "triggers": {"-".join(map(str, k)): v for k, v in trigger_rows.items()}}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(raw, f, indent=2)
    if len(impls) < len(NAMES):
        log(f"--only: no report; figures in {os.path.join(args.out, 'results.json')}")
        return

    overhead = None
    try:
        with open(os.path.join(args.out, "overhead.json")) as f:
            overhead = json.load(f)
    except (OSError, ValueError):
        pass
    terminal, report, chart_rows = build_report(args, mix, impls, results, scenarios, scenario_results, preread,
                                                onebyone, instructions, overhead, meta, latency,
                                                trigger_rows)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "chart.svg"), "w") as f:
        f.write(chart_svg(chart_rows, args.rounds))
    print(terminal)
    print()
    print(f"report: {os.path.relpath(os.path.join(args.out, 'report.md'), ROOT)}, "
          f"chart: {os.path.relpath(os.path.join(args.out, 'chart.svg'), ROOT)}")


if __name__ == "__main__":
    main()
