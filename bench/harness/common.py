"""What every part of the harness shares: paths, the fake account, how it fails and logs."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Cargo's target directory (bench/run.sh passes --ours and --out from `cargo metadata`).
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
REGION = "us-east-1"
ACCOUNT = "000000000000"
PROBE = 10  # first deliveries (then their duplicates) in each probe batch


class BenchError(SystemExit):
    """Stops the bench loudly: a broken invariant, a crashed function, a failed record."""

    def __init__(self, message):
        super().__init__(f"bench: FAILED: {message}")


def log(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


def tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""
