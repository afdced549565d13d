//! One HTTP/1.1 exchange on a connection of its own, through hyper (the AWS SDK's own HTTP
//! stack): the fault proxy forwards with it and the invoke client calls with it. hyper frames
//! the request and reads the answer whole, chunked or not.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::{Result, ResultExt};

/// A body held whole in memory.
pub type Body = Full<Bytes>;

/// Sends `request` to `addr` (`127.0.0.1:4566`) on a new connection and returns the answer with
/// its body read whole.
pub async fn exchange(addr: &str, request: Request<Body>) -> Result<Response<Bytes>> {
    let stream = TcpStream::connect(addr).await.context(format!("connect to {addr}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // Ends once the answer is read and the sender dropped.
        let _ = connection.await;
    });
    let response = sender.send_request(request).await.context(format!("request to {addr}"))?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.context(format!("answer from {addr}"))?.to_bytes();
    Ok(Response::from_parts(parts, body))
}
