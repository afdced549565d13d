"""`make bench`: our payments consumer against the floor and the Powertools peer, one workload,
one local AWS.

Every implementation is a Lambda function speaking the Lambda Runtime API; this harness is that
API (a minimal server on 127.0.0.1, on a free port, one per process), so each is driven the same
way. Four columns, all from one run:

    ours        target/lambda/payments-consumer/bootstrap      (lambda_runtime, Rust, release)
    floor       target/lambda/payments-floor/bootstrap         (bench/floor: the same ledger items,
                one TransactWriteItems per batch, no idempotency, no condition: the cost of the
                work and nothing more; it posts a duplicate again and refuses nothing)
    peer        the bench venv's python -m awslambdaric handler.lambda_handler, in bench/peer
                (aws-lambda-powertools idempotency + batch utilities, boto3 ledger transaction,
                under the runtime interface client of Lambda's Python runtime), PEER_LOCAL_CACHE=0
    peer-cache  the same with PEER_LOCAL_CACHE=1: use_local_cache=True, 10,000 items

The mix (`workload.Mix`), generated once from a seed, credits only, in SQS batches; each round
(fresh tables, the order of the implementations rotating) runs it through two sandboxes of one
implementation, two processes each behind its own runtime API, on the same tables:

- sandbox A: first deliveries and a share of duplicates re-sent to A itself, each in a later batch
  than its first copy; then probes, each a batch alone: ten first deliveries, their ten
  duplicates;
- sandbox B, the other sandbox: new first deliveries and the same share of duplicates of events A
  committed and B never saw; then a probe of ten such duplicates alone.

Duplicates alternate between a producer retry (new message id, ApproximateReceiveCount 1) and an
SQS redelivery (same message id, ApproximateReceiveCount 2), in both sandboxes. For each stream:
requests and modelled write units (counted by the local AWS itself, `/_local-aws/requests`,
between a reset and a read), CPU per message (the threads' run time from
/proc/<pid>/task/*/schedstat around the stream, init excluded; user+sys ticks when a thread exited
meanwhile), throughput; for A also init (spawn to the first GET /next) and peak RSS (VmHWM).

Then, for ours only: the mix batched (the ledger's one pre-read mode: how ours reads the batch's
records before committing), and B's stream one message an invocation (the one-by-one path, the
reference of the other-sandbox target).

Then the batch-size rows (`workload.Scenario`): first deliveries only at --batch-sizes, spread over
--accounts accounts and hot on --hot-accounts, plus two refusal rows: a batch of 100 on 3
accounts holding one other-currency event per account, and a batch of 1,000 on the hot accounts
with overdrafts and other-currency events. Each row one run of each implementation, fresh process
and tables.

Then the store latency rows (ours only, --latencies): batches of 10 over 20 accounts, 200 first
deliveries, the whole process's CPU as a harness outside sees it, with every DynamoDB request held
by the local AWS for each given number of milliseconds (its `/_local-aws/latency`): a client that
burns CPU while a request is outstanding shows it only when requests take time, as DynamoDB's do.

Then instruction counts (`runs.count_instructions`): ours and the floor under
`valgrind --tool=callgrind` at batch 10, one process through warm-up batches and two equal parts,
`callgrind_control --dump` after each (a dump zeroes the counters): init and warm-up excluded.
When the floor runs, a third count, "floor with the record" (`floor-record`): the floor with
`FLOOR_RECORD=1`, also putting each event's least record into the idempotency table in the same
transaction, the bound of a consumer that writes the record; counted, and run once more in the
batch-size row "spread" at batch 10 for its CPU there (the reason a CPU target's line gives for a
miss), never in the mix, since a duplicate cancels its batch.

Every run's ledger is scanned (consistent reads) and must equal `workload.expected_ledger`:
posting the valid events one by one in delivery order, each once, refusing an event in another
currency than its account's or a debit below zero; for the floor, every delivery posted, nothing
refused. Anything else stops the bench with an error.

The tables (a column per implementation, ours over the floor, the better peer column over ours),
the issue's targets each met or missed by how much (and why, for a miss), and every round go to stdout and
`target/bench/report.md`, a chart of ours against the better peer column to
`target/bench/chart.svg`, the raw figures to `target/bench/results.json`. The local AWS keeps
connections alive (HTTP/1.1), as DynamoDB does, so no side pays a TCP handshake per request.

Run it from the repository's root as `python -m bench.harness [options]` (bench/run.sh does, in
its venv); `--help` lists the options (`--only ours,floor`, `--rounds 1 --events 200` and
`--batch-sizes ''` shorten it for development). One module a concern:

    runtime_api.py  the Lambda Runtime API server the functions poll
    workload.py     the seeded workloads, duplicates of both kinds, refusals, the expected ledger
    sampling.py     CPU and peak RSS of a function process, from /proc
    local_aws.py    the local AWS: its request counters, tables, the ledger check
    runs.py         sandboxes, one round of the mix, one scenario, callgrind
    report.py       the tables, the targets and report.md
    chart.py        chart.svg
    __main__.py     the options and the order of the runs
"""
