//! Helpers for tests against a local AWS emulator or any DynamoDB-compatible endpoint.
//!
//! The endpoint is `AWS_ENDPOINT_URL`, or the project's local AWS at `http://127.0.0.1:4566`
//! (`LOCAL_AWS_PORT` moves it), started on first use when nothing answers there. Region and
//! credentials come from the environment when set, otherwise dummies the emulator accepts.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use aws_sdk_dynamodb::config::{Credentials, Region};
use aws_sdk_dynamodb::Client;

use crate::{create_table, DynamoDbStore, RequestCounter};

/// The project's local AWS endpoint on its default port.
pub const LOCAL_ENDPOINT: &str = "http://127.0.0.1:4566";

/// The endpoint tests use: `AWS_ENDPOINT_URL` as given, else the project's local AWS on
/// `127.0.0.1:$LOCAL_AWS_PORT` (4566).
///
/// When nothing answers on that port, the first call in the process starts it with the
/// checkout's `infra/local/aws.sh up` (which installs pinned moto once, and takes a lock per port
/// so test binaries running at once start one server), and leaves it running for the next test
/// binary and the next run (`make local-aws-down` stops it).
///
/// # Panics
///
/// With one line naming the command to run, when no local AWS answers and none can be started
/// (the script failed, or this crate was not built from a checkout of the project).
pub fn endpoint() -> String {
    if let Ok(url) = std::env::var("AWS_ENDPOINT_URL") {
        return url;
    }
    static LOCAL: OnceLock<Result<String, String>> = OnceLock::new();
    match LOCAL.get_or_init(start_local_aws) {
        Ok(url) => url.clone(),
        Err(line) => panic!("{line}"),
    }
}

/// The local AWS's URL once something answers on its port, starting it when nothing does.
fn start_local_aws() -> Result<String, String> {
    // Present when this crate is built from a checkout (a path dependency), not from crates.io.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/local/aws.sh");
    effectively_once::local_service::LocalService {
        name: "local AWS",
        scheme: "http://",
        port_var: "LOCAL_AWS_PORT",
        default_port: 4566,
        script: &script,
        verb: "up",
        hint: "run `make local-aws-up` in an effectively-once checkout, or set AWS_ENDPOINT_URL",
    }
    .ensure()
}

/// A loopback endpoint that answers every request with `reply` (a whole HTTP response), for
/// tests of what a store or an effect does when DynamoDB refuses or fails. Returns its port.
pub fn answering(reply: &'static [u8]) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(1..) = stream.read(&mut buf) {
                    let _ = stream.write_all(reply);
                }
            });
        }
    });
    port
}

/// SDK config for the test endpoint.
pub async fn sdk_config() -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).endpoint_url(endpoint());
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
        loader = loader.region(Region::new("us-east-1"));
    }
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        loader = loader.credentials_provider(Credentials::new("test", "test", None, None, "local-aws"));
    }
    loader.load().await
}

/// A DynamoDB client for the test endpoint, and the counter of the requests it sends.
pub async fn counted_client() -> (Client, RequestCounter) {
    let counter = RequestCounter::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await).interceptor(counter.clone()).build();
    (Client::from_conf(config), counter)
}

/// A name no other test in any process uses: tests share one emulator and run in parallel.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let sequence = NEXT.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    format!("{prefix}-{}-{nanos}-{sequence}", std::process::id())
}

/// A store on a new table of its own, with the counter of its client's requests. Panics with
/// the way out when the endpoint does not answer.
pub async fn fresh_store() -> (DynamoDbStore, RequestCounter) {
    let (client, counter) = counted_client().await;
    let table = unique_name("idem");
    if let Err(error) = create_table(&client, &table).await {
        panic!(
            "cannot create table {table} at {}: {error} (is the local AWS up? `make local-aws-up`, or set AWS_ENDPOINT_URL)",
            endpoint()
        );
    }
    counter.reset();
    (DynamoDbStore::new(client, table), counter)
}

/// [`fresh_store`], and a table of the caller's own beside it (keyed by `id`, as
/// [`create_table`] makes tables) for commit-once writes.
pub async fn fresh_store_and_table(prefix: &str) -> (DynamoDbStore, crate::Table) {
    let (store, _) = fresh_store().await;
    let name = unique_name(prefix);
    create_table(store.client(), &name).await.expect("a table of the caller's own");
    (store, crate::Table::new(name, crate::attr::ID))
}
