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

.PHONY: test lint unit demo local-aws-up local-aws-down local-aws-status doc clean-local-aws

## test: formatting, clippy, unit tests and the tests against the local AWS (installs and starts it)
test: lint local-aws-up
	cargo test --workspace

## lint: cargo fmt --check and clippy with warnings denied
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

## unit: the tests that need no AWS at all
unit:
	cargo test -p idempotency

## demo: one payment delivered three times through the idempotency layer on the local AWS
demo: local-aws-up
	cargo run -q -p idempotency-dynamodb --features test-util --example duplicates

## doc: API docs, broken intra-doc links denied
doc:
	RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" cargo doc --workspace --no-deps

## local-aws-up: install pinned moto (once) and start it on 127.0.0.1, or reuse the running one
local-aws-up:
	infra/local/aws.sh ensure

## local-aws-down: stop the local AWS this checkout started
local-aws-down:
	infra/local/aws.sh down

local-aws-status:
	infra/local/aws.sh status

clean-local-aws: local-aws-down
	rm -rf .local-aws
