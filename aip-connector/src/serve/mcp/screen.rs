//! What the projection refuses itself before rmcp reads a message, on HTTP and on byte pipes
//! alike, and the line pumps that put that check in front of rmcp on a pipe.
//!
//! rmcp reads a message with serde_json, which keeps the last of two repeated keys, and answers
//! some malformed messages in ways a client cannot act on: over HTTP a body it cannot read is a
//! plain-text `415`, and a `tools/call` whose `arguments` is not an object is "method not found"
//! (it falls through to the custom-request case). Each refusal here is a JSON-RPC error that
//! carries the request's `id` when the message has one (found by a hostile-input review).

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// JSON-RPC 2.0: the message is not JSON, or repeats a key.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0: JSON, but not a message MCP reads.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0: a known method with parameters of the wrong shape.
pub(crate) const INVALID_PARAMS: i64 = -32602;

/// A message the projection answers itself: the JSON-RPC error response, and the request's id
/// when the message had one.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) id: Option<Value>,
}

impl Refusal {
    fn new(code: i64, message: impl Into<String>, id: Option<Value>) -> Self {
        Self {
            code,
            message: message.into(),
            id,
        }
    }

    /// The JSON-RPC error response (`id: null` when the request's id is unknown).
    pub(crate) fn response(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id.clone().unwrap_or(Value::Null),
            "error": { "code": self.code, "message": self.message },
        })
    }
}

/// Where a message arrived: over HTTP every request is answered; on a pipe, text that is not
/// JSON is left to rmcp, which ignores it (as every official MCP SDK does: there is no id to
/// answer, and answering garbage can start an error storm between two peers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    Http,
    Pipe,
}

/// `Err` when the projection refuses `bytes` (one JSON-RPC message) before rmcp reads it:
/// - a repeated key anywhere: `-32700` (parsers disagree on which value wins);
/// - over HTTP, text that is not JSON (too deep, a lone surrogate, truncated): `-32700`;
/// - a `tools/call` whose `params` is not an object or whose `arguments` is neither absent nor
///   an object: `-32602`;
/// - JSON that is not a message rmcp reads (a batch, `params` of the wrong type): `-32600`,
///   over a pipe only for a request (a message with an `id`), which rmcp would otherwise answer
///   without it; a notification is never answered.
pub(crate) fn screen(bytes: &[u8], arrival: Arrival) -> Result<(), Refusal> {
    // rmcp's pipe reader drops a leading byte-order mark before it parses a line, so the check
    // must too, or a marked line would pass it unread.
    let bytes = match arrival {
        Arrival::Pipe => bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes),
        Arrival::Http => bytes,
    };
    if let Err(error) = crate::serve::unique_keys::check(bytes) {
        if error.is_data() {
            let id = serde_json::from_slice::<Value>(bytes)
                .ok()
                .and_then(|message| request_id(&message));
            return Err(Refusal::new(PARSE_ERROR, error.to_string(), id));
        }
        return match arrival {
            Arrival::Http => Err(Refusal::new(
                PARSE_ERROR,
                format!("the request body is not JSON: {error}"),
                None,
            )),
            Arrival::Pipe => Ok(()),
        };
    }
    let Ok(message) = serde_json::from_slice::<Value>(bytes) else {
        // `check` read it; a number beyond serde_json's range would land here. rmcp's call.
        return Ok(());
    };
    let id = request_id(&message);
    if message.get("method").and_then(Value::as_str) == Some("tools/call") {
        let params = message.get("params");
        let arguments = params.and_then(|p| p.get("arguments"));
        if !params.is_some_and(Value::is_object) {
            return Err(Refusal::new(
                INVALID_PARAMS,
                "tools/call takes an object of params: `name` and `arguments`",
                id,
            ));
        }
        if arguments.is_some_and(|a| !a.is_object() && !a.is_null()) {
            return Err(Refusal::new(
                INVALID_PARAMS,
                "tools/call `arguments` must be a JSON object",
                id,
            ));
        }
    }
    if let Err(error) = serde_json::from_value::<ClientJsonRpcMessage>(message) {
        let unanswerable = arrival == Arrival::Pipe && id.is_none();
        if !unanswerable {
            return Err(Refusal::new(
                INVALID_REQUEST,
                format!("not a JSON-RPC 2.0 message this MCP server reads: {error}"),
                id,
            ));
        }
    }
    Ok(())
}

/// The UTF-8 byte-order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// A message's `id`, when it is one JSON-RPC allows (a string or a number).
fn request_id(message: &Value) -> Option<Value> {
    message
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned()
}

/// Lines queued for the writer of the pipe: rmcp's output and the refusals, each whole, so no
/// refusal lands inside one of rmcp's messages.
const QUEUED_LINES: usize = 16;

/// Bytes buffered between the pumps and rmcp's side of its in-memory pipe.
const RMCP_PIPE_BYTES: usize = 64 * 1024;

/// Puts [`screen`] between a byte pipe (`reader`, `writer`) and rmcp: returns the stream rmcp
/// serves on. Three tasks end with the pipe: one reads lines from `reader` and passes each to
/// rmcp or answers its refusal; one takes rmcp's output line by line; one writes both to
/// `writer`. A line longer than `max_line_bytes` is dropped unread (rmcp's own bound,
/// logged as rmcp logs it).
pub(crate) fn screened_pipe<R, W>(
    reader: R,
    writer: W,
    max_line_bytes: usize,
) -> tokio::io::DuplexStream
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (rmcp_side, ours) = tokio::io::duplex(RMCP_PIPE_BYTES);
    let (from_rmcp, to_rmcp) = tokio::io::split(ours);
    let (lines, queued) = mpsc::channel::<Vec<u8>>(QUEUED_LINES);
    tokio::spawn(write_lines(queued, writer));
    tokio::spawn(pass_output(from_rmcp, lines.clone()));
    tokio::spawn(screen_input(reader, to_rmcp, lines, max_line_bytes));
    rmcp_side
}

async fn write_lines<W: AsyncWrite + Unpin>(mut queued: mpsc::Receiver<Vec<u8>>, mut writer: W) {
    while let Some(line) = queued.recv().await {
        if writer.write_all(&line).await.is_err() || writer.flush().await.is_err() {
            // The client is gone: dropping the receiver ends the other two pumps' sends.
            return;
        }
    }
    let _ = writer.shutdown().await;
}

async fn pass_output<R: AsyncRead + Unpin>(from_rmcp: R, lines: mpsc::Sender<Vec<u8>>) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    loop {
        let mut line = Vec::new();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if lines.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn screen_input<R, T>(
    reader: R,
    mut to_rmcp: T,
    lines: mpsc::Sender<Vec<u8>>,
    max_line_bytes: usize,
) where
    R: AsyncRead + Unpin,
    T: AsyncWrite + Unpin,
{
    let mut reader = BufReader::new(reader);
    loop {
        let line = match read_bounded_line(&mut reader, max_line_bytes).await {
            Ok(Line::Whole(line)) => line,
            Ok(Line::TooLong) => {
                tracing::error!(
                    max_line_length = max_line_bytes,
                    "Incoming message exceeded the maximum line length, discarding it"
                );
                continue;
            }
            Ok(Line::End) | Err(_) => break,
        };
        let message = line.strip_suffix(b"\n").unwrap_or(&line);
        let message = message.strip_suffix(b"\r").unwrap_or(message);
        match screen(message, Arrival::Pipe) {
            Ok(()) => {
                if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
            Err(refusal) => {
                let mut answer = refusal.response().to_string().into_bytes();
                answer.push(b'\n');
                if lines.send(answer).await.is_err() {
                    break;
                }
            }
        }
    }
    // rmcp reads the end of its input and ends the session.
    let _ = to_rmcp.shutdown().await;
}

enum Line {
    /// A line with its `\n` (none at the end of the input).
    Whole(Vec<u8>),
    /// A line longer than the bound, read past without keeping it.
    TooLong,
    End,
}

/// Reads one line of at most `max_bytes` bytes, without buffering a longer one whole.
async fn read_bounded_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    max_bytes: usize,
) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                (false, false) => Line::Whole(line),
            });
        }
        let (taken, ended) = match available.iter().position(|&b| b == b'\n') {
            Some(end) => (end + 1, true),
            None => (available.len(), false),
        };
        if !too_long {
            if line.len() + taken > max_bytes.saturating_add(1) {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(&available[..taken]);
            }
        }
        reader.consume(taken);
        if ended {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Whole(line)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str, arrival: Arrival) -> Refusal {
        screen(body.as_bytes(), arrival).expect_err(body)
    }

    #[test]
    fn a_repeated_key_is_a_parse_error_with_the_request_id() {
        let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"pay","arguments":{"amount":1,"amount":999999}}}"#;
        for arrival in [Arrival::Http, Arrival::Pipe] {
            let refusal = refused(body, arrival);
            assert_eq!(refusal.code, PARSE_ERROR);
            assert_eq!(refusal.id, Some(json!(7)));
            assert!(
                refusal.message.contains("repeats the key `amount`"),
                "{refusal:?}"
            );
        }
    }

    #[test]
    fn a_byte_order_mark_does_not_hide_a_repeated_key_on_a_pipe() {
        let line = b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"pay\",\"arguments\":{\"a\":1,\"a\":2}}}";
        let refusal = screen(line, Arrival::Pipe).expect_err("a repeated key behind a mark");
        assert_eq!((refusal.code, refusal.id), (PARSE_ERROR, Some(json!(1))));
    }

    #[test]
    fn text_that_is_not_json_is_refused_over_http_and_left_to_rmcp_on_a_pipe() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call""#,
            "hello",
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"\ud800"}}"#,
            deep.as_str(),
        ] {
            let refusal = refused(body, Arrival::Http);
            assert_eq!((refusal.code, refusal.id), (PARSE_ERROR, None), "{body}");
            assert!(screen(body.as_bytes(), Arrival::Pipe).is_ok(), "{body}");
        }
    }

    #[test]
    fn tools_call_arguments_that_are_no_object_are_invalid_params() {
        for (arguments, params) in [
            ("[1,2]", None),
            (r#""x""#, None),
            ("5", None),
            ("", Some("5")),
            ("", Some("[]")),
        ] {
            let params = params.map_or_else(
                || format!(r#"{{"name":"pay","arguments":{arguments}}}"#),
                str::to_owned,
            );
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{params}}}"#);
            let refusal = refused(&body, Arrival::Pipe);
            assert_eq!(refusal.code, INVALID_PARAMS, "{body}");
            assert_eq!(refusal.id, Some(json!("r1")), "{body}");
        }
        for fine in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"a":1}}}"#,
        ] {
            screen(fine.as_bytes(), Arrival::Http).unwrap_or_else(|r| panic!("{fine}: {r:?}"));
        }
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request_unless_nobody_waits() {
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#;
        let refusal = refused(batch, Arrival::Http);
        assert_eq!((refusal.code, refusal.id), (INVALID_REQUEST, None));
        let odd = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":5}"#;
        assert_eq!(refused(odd, Arrival::Pipe).id, Some(json!(3)));
        // A notification on a pipe is never answered: rmcp decides what to do with it.
        let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#;
        assert!(screen(notification.as_bytes(), Arrival::Pipe).is_ok());
    }

    #[test]
    fn an_ordinary_request_passes() {
        let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert!(screen(list.as_bytes(), Arrival::Http).is_ok());
        assert!(screen(list.as_bytes(), Arrival::Pipe).is_ok());
    }

    #[tokio::test]
    async fn a_line_longer_than_the_bound_is_dropped_and_the_next_one_read() {
        let input = format!("{}\nshort\nlast", "x".repeat(100));
        let mut reader = BufReader::with_capacity(8, input.as_bytes());
        assert!(matches!(
            read_bounded_line(&mut reader, 50).await.unwrap(),
            Line::TooLong
        ));
        assert!(
            matches!(read_bounded_line(&mut reader, 50).await.unwrap(), Line::Whole(l) if l == b"short\n")
        );
        assert!(
            matches!(read_bounded_line(&mut reader, 50).await.unwrap(), Line::Whole(l) if l == b"last")
        );
        assert!(matches!(
            read_bounded_line(&mut reader, 50).await.unwrap(),
            Line::End
        ));
    }
}
