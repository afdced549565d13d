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

Run it from the repository's root as `python -m bench.harness [options]` (bench/run.sh does, in
its venv); `--help` lists the options. One module a concern:

    runtime_api.py  the Lambda Runtime API server the functions poll
    workload.py     the seeded workload: payment events, duplicates, SQS batches, scenarios
    sampling.py     CPU and peak RSS of a function process, from /proc
    local_aws.py    the local AWS: its request counters, tables, the ledger check
    runs.py         one implementation through one round or one scenario
    report.py       the tables and report.md
    chart.py        chart.svg
    __main__.py     the options and the order of the runs
"""
