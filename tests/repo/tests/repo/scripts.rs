//! infra/lambda.sh and the Makefile's deploy targets (docs/deploy.md). Nothing here builds a
//! release bootstrap or talks to AWS.

use repo_checks::root;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn lambda_sh() -> Command {
    let mut command = Command::new(root().join("infra/lambda.sh"));
    command.current_dir(root());
    command
}

/// A scratch directory of this test process, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("scripts-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A bootstrap linked with `-z pack-relative-relocs` (DT_RELR: a linker default on some
/// distributions, or a size flag in RUSTFLAGS), or `None` without a gcc and binutils that can.
fn dt_relr_bootstrap(dir: &Path) -> Option<PathBuf> {
    let (source, bootstrap) = (dir.join("main.c"), dir.join("bootstrap"));
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let built = Command::new("gcc")
        .args(["-O2", "-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&bootstrap)
        .arg(&source)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("skipped: no gcc here that links with -z pack-relative-relocs (binutils >= 2.38, glibc >= 2.36)");
        return None;
    }
    let needs = Command::new("readelf").args(["-V", "-W"]).arg(&bootstrap).output().unwrap();
    let needs = String::from_utf8_lossy(&needs.stdout);
    assert!(needs.contains("GLIBC_ABI_DT_RELR"), "the test binary should need DT_RELR:\n{needs}");
    Some(bootstrap)
}

/// A bootstrap linked with `-z pack-relative-relocs` needs `GLIBC_ABI_DT_RELR`, which glibc added
/// in 2.36. On provided.al2023 (glibc 2.34) it fails at its first start: "version
/// `GLIBC_ABI_DT_RELR' not found". The check counts it as 2.36 and names it.
#[test]
fn the_glibc_floor_check_fails_a_bootstrap_that_needs_dt_relr() {
    let dir = Scratch::new("glibc");
    let Some(bootstrap) = dt_relr_bootstrap(&dir.0) else { return };
    let check = lambda_sh().arg("check").arg(&bootstrap).output().unwrap();
    let out = text(&check);
    assert!(
        !check.status.success(),
        "a bootstrap needing GLIBC_ABI_DT_RELR (glibc >= 2.36) passed the 2.34 floor:\n{out}"
    );
    assert!(out.contains("GLIBC_ABI_DT_RELR: glibc 2.36"), "the failure should name the need:\n{out}");
}

/// A `GLIBC_*` version need the check cannot place (not `GLIBC_x.y`, not a known name) fails
/// with its name, whatever it is: the same DT_RELR bootstrap with the name rewritten in its
/// string table (readelf prints the name; nothing runs it).
#[test]
fn the_glibc_floor_check_fails_an_unknown_version_need_by_its_name() {
    let dir = Scratch::new("glibc-unknown");
    let Some(bootstrap) = dt_relr_bootstrap(&dir.0) else { return };
    let bytes = std::fs::read(&bootstrap).unwrap();
    let (from, to) = (b"GLIBC_ABI_DT_RELR", b"GLIBC_ABI_SOMEDAY");
    let at = bytes.windows(from.len()).position(|w| w == from).expect("the name in .dynstr");
    let mut renamed = bytes.clone();
    renamed[at..at + to.len()].copy_from_slice(to);
    let unknown = dir.0.join("unknown");
    std::fs::write(&unknown, renamed).unwrap();
    let check = lambda_sh().arg("check").arg(&unknown).output().unwrap();
    let out = text(&check);
    assert!(!check.status.success(), "an unknown GLIBC_* need passed:\n{out}");
    assert!(out.contains("GLIBC_ABI_SOMEDAY"), "the failure should name the unknown need:\n{out}");
}

/// The environment the tests run in (README, docs/deploy.md: the local endpoint and dummy
/// credentials, exported in the shell).
const LOCAL: [(&str, &str); 4] = [
    ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
];

/// `make deploy` drops the endpoint and credentials only when the Makefile itself set them; a
/// shell that exported them for the tests keeps them, and `sam deploy` (boto3 reads
/// `AWS_ENDPOINT_URL`) would deploy to the local emulator with the dummy keys. `make
/// deploy-function` (cargo lambda deploy, the SDK reads it too) likewise. infra/lambda.sh refuses
/// both before anything else: this runs them with an impossible ARCH, so they stop before any
/// build if the refusal does not come first.
#[test]
fn deploy_refuses_the_local_endpoint_and_dummy_credentials() {
    let dry = Command::new("make").current_dir(root()).args(["-n", "deploy"]).envs(LOCAL).output().unwrap();
    let recipe = String::from_utf8_lossy(&dry.stdout).into_owned();
    let make_unsets = recipe.contains("-u AWS_ENDPOINT_URL");
    let run = lambda_sh()
        .arg("deploy")
        .envs(LOCAL)
        .env("ARCH", "not-an-arch")
        .env_remove("DEPLOY_ALLOW_LOCAL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let script_refuses = stderr.contains("AWS_ENDPOINT_URL") || stderr.contains("127.0.0.1");
    assert!(
        make_unsets || script_refuses,
        "make deploy would run with the local endpoint:\n{recipe}\ninfra/lambda.sh deploy did not refuse it:\n{stderr}"
    );

    for verb in [&["deploy"][..], &["deploy-function", "payments-consumer"]] {
        // The endpoint alone, a service's own endpoint, the keys alone: each is refused.
        let cases: [&[(&str, &str)]; 3] = [
            &[("AWS_ENDPOINT_URL", "http://localhost:4566")],
            &[("AWS_ENDPOINT_URL_LAMBDA", "http://[::1]:4566/")],
            &[("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")],
        ];
        for case in cases {
            let run = lambda_sh()
                .args(verb)
                .env("ARCH", "not-an-arch")
                .env_remove("DEPLOY_ALLOW_LOCAL")
                .env_remove("AWS_ENDPOINT_URL")
                .envs(case.iter().copied())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
            assert!(!run.status.success());
            assert!(stderr.contains("refusing"), "{verb:?} with {case:?} was not refused:\n{stderr}");
            assert!(stderr.contains(case[0].0), "{verb:?}: the refusal should name {}:\n{stderr}", case[0].0);
        }
        // DEPLOY_ALLOW_LOCAL=1 goes ahead (and stops at the impossible ARCH).
        let run = lambda_sh()
            .args(verb)
            .envs(LOCAL)
            .env("ARCH", "not-an-arch")
            .env("DEPLOY_ALLOW_LOCAL", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(!stderr.contains("refusing"), "{verb:?} with DEPLOY_ALLOW_LOCAL=1 refused:\n{stderr}");
        assert!(stderr.contains("ARCH=not-an-arch"), "{verb:?} with DEPLOY_ALLOW_LOCAL=1 stopped elsewhere:\n{stderr}");
    }
}

/// `infra/lambda.sh function-settings NAME` with `configuration` (GetFunctionConfiguration JSON)
/// on stdin and ARCH=`arch`.
fn function_settings(configuration: &str, arch: &str) -> Output {
    let mut child = lambda_sh()
        .args(["function-settings", "shop-payments-consumer"])
        .env("ARCH", arch)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(configuration.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// A stack deployed with FunctionTimeoutSeconds=90, MetricsNamespace=Shop and Architecture=arm64:
/// `make deploy-function` keeps all three. The architecture must match (cargo lambda sets the
/// binary's), the timeout is passed as the function's own (the metadata has the parameter's
/// default), and the namespace is not in the metadata's env (merge_env keeps the function's).
#[test]
fn deploy_function_keeps_what_the_stack_parameters_set() {
    let configuration = r#"{"FunctionName": "shop-payments-consumer", "Architectures": ["arm64"], "Timeout": 90,
        "MemorySize": 128, "Environment": {"Variables": {"POWERTOOLS_METRICS_NAMESPACE": "Shop"}}}"#;

    let other_arch = function_settings(configuration, "x86_64");
    assert!(!other_arch.status.success(), "ARCH=x86_64 onto an arm64 function went ahead:\n{}", text(&other_arch));
    assert!(text(&other_arch).contains("ARCH=arm64"), "the refusal should say which ARCH:\n{}", text(&other_arch));

    let same_arch = function_settings(configuration, "arm64");
    assert!(same_arch.status.success(), "{}", text(&same_arch));
    let args: Vec<String> = String::from_utf8_lossy(&same_arch.stdout).lines().map(str::to_owned).collect();
    assert_eq!(args, ["--timeout", "90"], "the cargo lambda deploy arguments");

    for (key, dir) in [("payments-consumer", "consumer"), ("receipts-relay", "receipts-relay")] {
        let manifest = std::fs::read_to_string(root().join("apps/payments").join(dir).join("Cargo.toml")).unwrap();
        let deploy = manifest.split("[package.metadata.lambda.deploy]").nth(1).expect("the deploy metadata");
        assert!(
            !deploy.contains("POWERTOOLS_METRICS_NAMESPACE"),
            "{key}: the metadata env would overwrite the stack's namespace"
        );
    }
}

/// `infra/lambda.sh metadata` passes on the workspace, and fails when the template sets from a
/// parameter a variable that the metadata's env carries (here POWERTOOLS_SERVICE_NAME, made a
/// parameter in a copy of the template): merge_env would keep the stack's, the env overwrites it.
#[test]
fn the_deploy_metadata_leaves_parameter_derived_variables_to_merge_env() {
    let ok = lambda_sh().arg("metadata").output().unwrap();
    assert!(ok.status.success(), "{}", text(&ok));

    let template = std::fs::read_to_string(root().join("apps/payments/template.json")).unwrap();
    let mut template: serde_json::Value = serde_json::from_str(&template).unwrap();
    template["Parameters"]["ServiceName"] = serde_json::json!({"Type": "String", "Default": "payments-consumer"});
    template["Resources"]["PaymentsConsumerFunction"]["Properties"]["Environment"]["Variables"]
        ["POWERTOOLS_SERVICE_NAME"] = serde_json::json!({"Ref": "ServiceName"});
    let dir = Scratch::new("metadata");
    let copy = dir.0.join("template.json");
    std::fs::write(&copy, serde_json::to_string(&template).unwrap()).unwrap();
    let refused = lambda_sh().arg("metadata").arg(&copy).output().unwrap();
    let out = text(&refused);
    assert!(!refused.status.success(), "a parameter-derived variable in the metadata env passed:\n{out}");
    assert!(
        out.contains("env.POWERTOOLS_SERVICE_NAME comes from the parameter ServiceName"),
        "the failure should name the variable and its parameter:\n{out}"
    );
}

/// The deploy metadata check reads a workspace whose `cargo metadata` is larger than one
/// command-line argument may be (128 KiB on Linux; a checkout at a longer path grows every
/// manifest path in it): a `cargo` on the PATH pads the real metadata with 256 KiB of spaces.
#[test]
fn the_deploy_metadata_check_reads_metadata_larger_than_an_argument() {
    let dir = Scratch::new("big-metadata");
    let real = String::from_utf8(Command::new("which").arg("cargo").output().unwrap().stdout).unwrap();
    let shim = dir.0.join("cargo");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\n\"{}\" \"$@\" || exit $?\ncase \" $* \" in *\" metadata \"*) head -c 262144 /dev/zero | tr '\\0' ' ' ;; esac\n",
            real.trim()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", dir.0.display(), std::env::var("PATH").unwrap());

    let out = lambda_sh().arg("metadata").env("PATH", path).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// DEPLOY_ARGS is split as a shell splits words (quotes group) and nothing more: a `*` matches
/// no file, a `$` expands nothing, and an unclosed quote is refused, not guessed at.
#[test]
fn deploy_args_are_split_as_words_without_globs_or_expansions() {
    let dir = Scratch::new("deploy-args");
    std::fs::write(dir.0.join("matched-by-a-glob"), "").unwrap();
    let run = |args: &str| {
        Command::new(root().join("infra/lambda.sh"))
            .arg("deploy-args")
            .current_dir(&dir.0)
            .env("DEPLOY_ARGS", args)
            .output()
            .unwrap()
    };
    let split = run(r#"--region eu-west-1  --tags "team=pay ments" 'a b' * $HOME $(id)"#);
    assert!(split.status.success(), "{}", text(&split));
    let words: Vec<&str> = std::str::from_utf8(&split.stdout).unwrap().lines().collect();
    assert_eq!(words, ["--region", "eu-west-1", "--tags", "team=pay ments", "a b", "*", "$HOME", "$(id)"]);
    assert_eq!(run("").stdout, b"", "no DEPLOY_ARGS, no arguments");
    let unclosed = run(r#"--tags "team=pay"#);
    assert!(!unclosed.status.success() && text(&unclosed).contains("DEPLOY_ARGS"), "{}", text(&unclosed));
}
