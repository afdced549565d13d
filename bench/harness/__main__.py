"""`python -m bench.harness`: the options, then warm-up, the rounds, the scenarios, the report."""

import argparse
import datetime
import json
import os
import sys

from . import __doc__
from .chart import chart_svg
from .common import ROOT, TARGET, BenchError, log
from .local_aws import LocalAws
from .report import build_report, peer_versions, scenario_table, scenario_targets
from .runs import Implementation, run_once, run_scenario, warm_up
from .sampling import cpu_model
from .workload import Scenario, Workload


def main():
    p = argparse.ArgumentParser(prog="python -m bench.harness", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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


if __name__ == "__main__":
    main()
