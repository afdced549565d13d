"""Each published crate's rust-version against those of the crates in its dependency tree.

Reads `cargo metadata --all-features` output (infra/msrv.sh makes it from a lock file resolved
with the lowest direct dependency versions) and, for each crate named on the command line, walks
its normal and build dependencies (dev-dependencies are not a user's concern). Fails when a crate
declares a rust-version lower than a dependency's; prints the floor the tree sets, so a declared
value above it can be lowered.
"""

import json
import sys


def version(text):
    """"1.85" and "1.85.0" as comparable tuples."""
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    metadata = json.load(open(sys.argv[1]))
    crates = sys.argv[2:]
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    by_name = {p["name"]: p["id"] for p in metadata["packages"] if p["source"] is None}
    failed = False
    for crate in crates:
        root = by_name[crate]
        declared = packages[root].get("rust_version")
        if declared is None:
            print(f"{crate}: no rust-version declared")
            failed = True
            continue
        # Depth-first over normal (kind null) and build edges.
        seen, stack, floor, because = set(), [root], (0, 0, 0), None
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            package = packages[node]
            if node != root and package.get("rust_version"):
                needed = version(package["rust_version"])
                if needed > floor:
                    floor, because = needed, f'{package["name"]} {package["version"]}'
            for dep in nodes[node]["deps"]:
                if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                    stack.append(dep["pkg"])
        floor_text = ".".join(str(p) for p in floor)
        if version(declared) < floor:
            print(f"{crate}: rust-version {declared} is below {floor_text}, which {because} needs")
            failed = True
        elif because is None:
            print(f"{crate}: rust-version {declared}; no dependency declares one, its own code sets it")
        elif version(declared) > floor:
            print(f"{crate}: rust-version {declared}; its dependencies need {floor_text} ({because})")
        else:
            print(f"{crate}: rust-version {declared}, as {because} needs")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
