"""The checks and lookups of infra/lambda.sh that are easier to read in Python than in bash.

    lambda.py check [--local] [--arch ARCH] FILE...   the glibc floor of each bootstrap, its size
    lambda.py metadata [TEMPLATE]          [package.metadata.lambda.deploy] against the template
    lambda.py target-dir                   cargo metadata's target_directory
    lambda.py deploy-params CONFIG ARCH EXTRA   the `sam deploy` parameters
    lambda.py function-configuration NAME STACK GetFunctionConfiguration JSON (needs boto3)
    lambda.py function-settings NAME ARCH  <configuration.json: `cargo lambda deploy` arguments

Every failure exits non-zero with a message starting `lambda:`; nothing here builds or deploys.
"""

import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = "apps/payments/template.json"
# The newest glibc of the provided.al2023 runtime (Amazon Linux 2023 ships glibc 2.34).
GLIBC_FLOOR = "2.34"
# Version needs whose name is not GLIBC_x.y: the glibc release that added it, then what it is.
# Any other name fails the check with its name: find out what it asks of the runtime (and the
# glibc that added it) before adding it here.
GLIBC_NAMED = {
    "GLIBC_ABI_DT_RELR": ("2.36", "packed relative relocations (DT_RELR), from linking with -z pack-relative-relocs"),
}


def fail(message):
    sys.exit(f"lambda: {message}")


def readelf(*args):
    return subprocess.run(["readelf", *args], capture_output=True, text=True).stdout


def newer_than_floor(version):
    return tuple(map(int, version.split("."))) > tuple(map(int, GLIBC_FLOOR.split(".")))


def elf_arch(path):
    machine = re.search(r"^\s*Machine:\s*(.*)$", readelf("-h", path), re.M)
    if machine is None:
        return "not-elf"
    return "x86_64" if "X86-64" in machine.group(1) else "arm64" if "AArch64" in machine.group(1) else "other"


def glibc_needs(path):
    """Every GLIBC_* version a file needs: the names in its .gnu.version_r section (readelf reads
    an ELF file of any architecture)."""
    text = readelf("-V", "-W", path)
    section = re.search(r"^Version needs section.*?(?=^Version |\Z)", text, re.M | re.S)
    return sorted(set(re.findall(r"Name: (GLIBC_\S+)", section.group(0) if section else "")))


def line_of(path, arch):
    rel = path[len(ROOT) + 1:] if path.startswith(ROOT + "/") else path
    return f"{rel:<52} {arch:<7} {os.path.getsize(path) / 1048576:5.1f} MiB"


def check(args):
    """The glibc floor: every GLIBC_* version a bootstrap needs must be at most GLIBC_FLOOR. A
    GLIBC_x.y need is glibc x.y, a named one (GLIBC_NAMED) the glibc that added it; an unknown
    name fails whatever its version. --arch: each must be built for ARCH; --local: sizes only."""
    local = "--local" in args
    arch_wanted = args[args.index("--arch") + 1] if "--arch" in args else None
    files = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] != "--arch")]
    if not files:
        fail("check: no bootstrap given")
    failed, why = False, set()
    for path in files:
        if not os.path.isfile(path):
            fail(f"{path}: no such bootstrap (make build first)")
        arch = elf_arch(path)
        if arch_wanted and arch != arch_wanted:
            fail(f"{path} is {arch}, not {arch_wanted}")
        line = line_of(path, arch)
        if local:
            print(f"{line}  glibc floor not checked (--local: runs on this machine only)")
            continue
        versions, named, unknown = [], [], []
        for need in glibc_needs(path):
            if re.fullmatch(r"GLIBC_\d+(\.\d+)*", need):
                versions.append(need[len("GLIBC_"):])
            elif need in GLIBC_NAMED:
                version, what = GLIBC_NAMED[need]
                versions.append(version)
                if newer_than_floor(version):
                    named.append(f"{need}: glibc {version}, {what}")
            else:
                unknown.append(need)
        top = max(versions, key=lambda v: tuple(map(int, v.split("."))), default=None)
        if top is None and not unknown:
            print(f"{line}  no glibc version needs (static?)")
            continue
        if unknown:
            why.add("unknown")
            print(f"{line}  needs {' '.join(unknown)}: unknown to this check: FAIL")
            print(f"    version needs the check does not know (a glibc release it cannot place): {' '.join(unknown)}")
        elif newer_than_floor(top):
            print(f"{line}  needs GLIBC_{top} > {GLIBC_FLOOR}: FAIL")
        else:
            print(f"{line}  needs GLIBC_{top} <= {GLIBC_FLOOR}: ok")
            continue
        failed = True
        if named:
            why.add("named")
            print("\n".join(f"    {n}" for n in named))
        symbols = sorted({s for s in re.findall(r"[A-Za-z0-9_]+@GLIBC_[0-9.]+", readelf("--dyn-syms", "-W", path))
                          if newer_than_floor(s.split("@GLIBC_")[1])})
        if symbols:
            why.add("symbols")
            print(f"    symbols newer than GLIBC_{GLIBC_FLOOR}: {' '.join(symbols)}")
    if failed:
        sys.stdout.flush()
        explain_floor(why)
        sys.exit(1)


def explain_floor(why):
    out = [f"""lambda: a bootstrap needs a glibc version newer than {GLIBC_FLOOR}, the newest the provided.al2023
        runtime has, or one this check cannot place: it would fail at its first start on Lambda
        ("version `GLIBC_...' not found")."""]
    if "symbols" in why:
        ldd = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        here = (re.findall(r"[0-9]+\.[0-9]+$", ldd) or ["?"])[0]
        out.append(f"""        Symbols: it was linked against this machine's glibc ({here}).
        Build it with Zig, which links against an older glibc whatever the machine has:

            LAMBDA_COMPILER=zig make build      (or make sam-build / make deploy)

        or build on a distribution whose glibc is at most {GLIBC_FLOOR} (Amazon Linux 2023 itself).""")
    if "unknown" in why:
        out.append("""        Unknown version needs: find out what the name asks of the runtime and whether the glibc of
        provided.al2023 defines it (objdump -T /lib64/libc.so.6 on Amazon Linux 2023), then add it
        to GLIBC_NAMED in infra/lambda.py with the glibc release that added it.""")
    if "named" in why:
        out.append("""        GLIBC_ABI_DT_RELR: link without packed relative relocations: drop -z pack-relative-relocs
        from RUSTFLAGS or the link arguments, or, if the linker packs them by default, add
        -C link-arg=-Wl,-z,nopack-relative-relocs.""")
    print("\n".join(out), file=sys.stderr)


def cargo_metadata():
    # Read from a pipe, not passed as an argument: the metadata outgrows one argument's 128 KiB.
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps", "--manifest-path",
                          os.path.join(ROOT, "Cargo.toml")], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"cargo metadata failed:\n{out.stderr}")
    return json.loads(out.stdout)


def metadata(args):
    """[package.metadata.lambda.deploy] (what `cargo lambda deploy` applies) against the template
    (what `sam deploy` applies): a function-only update must not undo the stack's configuration.
    A variable the stack sets from a parameter or a resource stays out of the metadata's env
    (merge_env keeps the function's); the timeout is FunctionTimeoutSeconds' default, which
    deploy-function replaces with the function's own (function-settings)."""
    path = args[0] if args else TEMPLATE
    template, meta = json.load(open(path)), cargo_metadata()
    params = template.get("Parameters", {})

    def stack_source(value):
        """What a value the stack sets comes from (a parameter, a resource), or None for a literal."""
        if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in params:
            return f"the parameter {value['Ref']}"
        return "a resource or an expression of the stack" if isinstance(value, (dict, list)) else None

    stack_specific = object()  # never equal to a metadata value: the stack decides

    def resolve(value):
        """A template value with a parameter's default, or stack_specific."""
        if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in params:
            default = params[value["Ref"]].get("Default")
            return stack_specific if default is None else default
        return stack_specific if isinstance(value, (dict, list)) else value

    # Each binary target, with the package that holds it: a function may be a package's second
    # binary (the outbox sweeper is the receipts relay's).
    binaries = {t["name"]: p for p in meta["packages"] for t in p["targets"] if "bin" in t["kind"]}
    problems, checked = [], []
    for logical_id, res in template["Resources"].items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        binary = res.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
        props, pkg = res["Properties"], binaries.get(binary)
        if pkg is None:
            problems.append(f"{logical_id}: Binary {binary!r} is no binary of a workspace package")
            continue
        deploy, where = deploy_metadata(pkg, binary)
        if deploy is None:
            problems.append(f"{where}: missing")
            continue
        for key, want in (("memory", props.get("MemorySize", 128)), ("timeout", resolve(props.get("Timeout", 3))),
                          ("tracing", props.get("Tracing", "PassThrough")), ("alias", props.get("AutoPublishAlias")),
                          ("runtime", props.get("Runtime"))):
            if str(deploy.get(key)).lower() != str(want).lower():
                problems.append(f"{where}: {key} = {deploy.get(key)!r}, the template's {logical_id} has {want!r}")
        if deploy.get("merge_env") is not True:
            problems.append(f"{where}: merge_env must be true (the stack's table names and sender stay)")
        env = deploy.get("env") or {}
        tpl_env = props.get("Environment", {}).get("Variables", {})
        for key, value in tpl_env.items():
            source = stack_source(value)
            if source is not None:
                if key in env:
                    problems.append(f"{where}: env.{key} comes from {source}, which differs from stack to"
                                    " stack: leave it to merge_env, which keeps the function's")
            elif key not in env:
                problems.append(f"{where}: env.{key} missing (the template sets {value!r})")
            elif str(env[key]) != str(value):
                problems.append(f"{where}: env.{key} = {env[key]!r}, the template sets {value!r}")
        problems += [f"{where}: env.{key} is not in the template's {logical_id}" for key in env if key not in tpl_env]
        checked.append(binary)
    for p in problems:
        print(f"lambda: metadata: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"lambda: deploy metadata of {', '.join(checked)} agrees with {path}", file=sys.stderr)


def deploy_metadata(pkg, binary):
    """The deploy table cargo lambda applies to `binary` of `pkg`, and where it is: the binary's own
    ([package.metadata.lambda.bin.NAME.deploy], which cargo lambda reads first), else the package's
    for the binary named as the package. Another binary without its own table is reported missing:
    the package's table is its sibling's, whose environment it would overwrite."""
    lam = (pkg.get("metadata") or {}).get("lambda") or {}
    own = ((lam.get("bin") or {}).get(binary) or {}).get("deploy")
    if own is not None or binary != pkg["name"]:
        return own, f"{pkg['name']} [package.metadata.lambda.bin.{binary}.deploy]"
    return lam.get("deploy"), f"{binary} [package.metadata.lambda.deploy]"


def deploy_params(args):
    """The parameters for `sam deploy`: those saved in samconfig.toml by the first (guided) deploy,
    then Architecture, then DEPLOY_PARAMS. (On the command line, --parameter-overrides replaces
    the saved ones as a whole, so they are merged here.)"""
    config, arch, extra = args
    params = {}

    def add(text):
        for item in shlex.split(text):
            key, sep, value = item.partition("=")
            if not sep:
                fail(f"parameter {item!r}: expected Key=Value")
            params[key] = value

    if os.path.exists(config):
        import tomllib

        with open(config, "rb") as f:
            saved = tomllib.load(f).get("default", {}).get("deploy", {}).get("parameters", {})
        overrides = saved.get("parameter_overrides", "")
        add(" ".join(overrides) if isinstance(overrides, list) else overrides)
    params["Architecture"] = arch
    add(extra)
    print(" ".join(f'{k}="{v}"' for k, v in params.items()))


def function_configuration(args):
    """The deployed function's configuration. A missing function is refused: cargo lambda would
    create a stray one, with a role of its own."""
    import boto3
    import botocore.exceptions

    name, stack = args
    try:
        conf = boto3.client("lambda").get_function_configuration(FunctionName=name)
    except botocore.exceptions.ClientError as e:
        if e.response["Error"]["Code"] == "ResourceNotFoundException":
            fail(f"no function {name}: create the stack first (make deploy STACK={stack});"
                 " cargo lambda would create a stray function with a role of its own")
        fail(f"looking up {name}: {e}")
    except botocore.exceptions.BotoCoreError as e:
        fail(f"looking up {name}: {e}")
    conf.pop("ResponseMetadata", None)
    json.dump(conf, sys.stdout, default=str)


def function_settings(args):
    """What the stack's parameters set on the function, which a function-only update must keep,
    from its configuration (GetFunctionConfiguration JSON on stdin): the `cargo lambda deploy`
    arguments that keep them, one a line; refuses what no argument can keep.
      Architecture            cargo lambda sets the binary's: ARCH must be the function's
      FunctionTimeoutSeconds  the metadata has the default: --timeout <the function's>
      MetricsNamespace (and every parameter- or resource-derived variable): not in the metadata's
                              env (metadata), so merge_env keeps the function's"""
    name, arch = args
    try:
        conf = json.loads(sys.stdin.read())
    except ValueError as e:
        fail(f"{name}: the function configuration is no JSON: {e}")
    deployed = (conf.get("Architectures") or ["x86_64"])[0]
    if deployed != arch:
        fail(f"{name} runs on {deployed}, the stack's Architecture, and ARCH={arch}: the update would"
             f" switch the function to {arch} behind the stack's back. Build for the function:\n\n"
             f"            make deploy-function ARCH={deployed} ...\n\n"
             f"        or change the stack's architecture with make deploy ARCH={arch}.")
    timeout = conf.get("Timeout")
    if not isinstance(timeout, int) or timeout <= 0:
        fail(f"{name}: the function configuration has no Timeout ({timeout!r})")
    env = (conf.get("Environment") or {}).get("Variables") or {}
    namespace = env.get("POWERTOOLS_METRICS_NAMESPACE", "(unset)")
    print(f"lambda: {name}: {deployed}, timeout {timeout} s, metrics namespace {namespace} (kept);"
          f" role {conf.get('Role')}, last modified {conf.get('LastModified')}", file=sys.stderr)
    print(f"--timeout\n{timeout}")


COMMANDS = {
    "check": check,
    "metadata": metadata,
    "target-dir": lambda _: print(cargo_metadata()["target_directory"]),
    "deploy-params": deploy_params,
    "function-configuration": function_configuration,
    "function-settings": function_settings,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](sys.argv[2:])
