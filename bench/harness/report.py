"""The report: medians against the issue's targets, the batch-size table, every round."""

import platform
import statistics

from .common import PROBE, ROOT


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


def peer_versions():
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("aws-lambda-powertools", "boto3")) + f", Python {platform.python_version()}"
