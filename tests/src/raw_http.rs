//! Requests written by hand on a raw socket, for tests of what a client that misbehaves at the
//! transport level (never reads, leaves mid-stream) does to the server: an HTTP client library
//! would read, buffer or close for the test.

use aip_connector::model::{Action, Envelope, MessageBody};
use aip_connector::serve::server::MESSAGES_PATH;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Connects to `address` (`host:port`) and sends `action` for streaming (`Accept:
/// text/event-stream`) as the bearer of `token`, reading nothing: the caller decides whether
/// the client reads its response, and leaves by dropping the socket.
pub async fn send_streamed_action(address: &str, token: &str, action: Action) -> TcpStream {
    let body = serde_json::to_string(&Envelope::new(MessageBody::Action(Box::new(action))))
        .expect("an action serializes");
    let mut socket = TcpStream::connect(address)
        .await
        .expect("the server accepts");
    let request = format!(
        "POST {MESSAGES_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    socket
        .write_all(request.as_bytes())
        .await
        .expect("the request is written");
    socket
}
