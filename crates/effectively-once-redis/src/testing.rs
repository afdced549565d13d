//! Helpers for tests and benches against a real Redis: the project's local one, started on first
//! use, or `REDIS_URL`. Behind the `test-util` feature, as `effectively_once_dynamodb::testing`.

/// The URL tests and the bench use: `REDIS_URL` as given, else the project's local Redis on
/// `127.0.0.1:$LOCAL_REDIS_PORT` (6380), with its password (`infra/local/redis.sh url`).
///
/// When nothing listens on that port, the first call in the process starts it with the
/// checkout's `infra/local/redis.sh ensure` (a lock per port, so test binaries running at once
/// start one server), and leaves it running for the next test binary and the next run
/// (`make local-redis-down` stops it).
///
/// # Panics
///
/// With one line naming the command to run, when no local Redis answers and none can be
/// started (the script failed, or this crate was not built from a checkout of the project).
pub fn url() -> String {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return url;
    }
    static LOCAL: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    match LOCAL.get_or_init(start_local_redis) {
        Ok(url) => url.clone(),
        Err(line) => panic!("{line}"),
    }
}

/// The local Redis's URL once something listens on its port, starting it when nothing does.
fn start_local_redis() -> Result<String, String> {
    // Present when this crate is built from a checkout (a path dependency), not from crates.io.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/local/redis.sh");
    let hint = "run `make local-redis-up` in an effectively-once checkout, or set REDIS_URL";
    let address = effectively_once::local_service::LocalService {
        name: "local Redis",
        scheme: "redis://",
        port_var: "LOCAL_REDIS_PORT",
        default_port: 6380,
        script: &script,
        verb: "ensure",
        hint,
    }
    .ensure()?;
    // The local Redis asks for a password, which the script keeps (the same for every checkout).
    let password = std::process::Command::new(&script)
        .arg("password")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .ok_or_else(|| format!("`{} password` failed: {hint}", script.display()))?;
    Ok(address.replacen("redis://", &format!("redis://default:{}@", password.trim()), 1))
}
