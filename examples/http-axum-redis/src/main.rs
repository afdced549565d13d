//! The orders service on `PORT` (default 3000), answers kept in Valkey/Redis at `REDIS_URL`.

use std::sync::Arc;

use effectively_once_redis::RedisStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6380".into());
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let store = RedisStore::connect(&url, "orders-api").await?;
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    let app = http_axum_redis::app(store, Arc::default());
    // Runs until the process is stopped; a test passes its own shutdown signal instead.
    http_axum_redis::serve(listener, app, std::future::pending()).await?;
    Ok(())
}
