//! What the projection refuses itself before rmcp reads a message, on HTTP and on byte pipes
//! alike, and the line pumps that put that check in front of rmcp on a pipe.
//!
//! rmcp reads a message with serde_json, which keeps the last of two repeated keys, and answers
//! some malformed messages in ways a client cannot act on: over HTTP a body it cannot read is a
//! plain-text `415`, and a `tools/call` whose params do not read as `{name, arguments}` is
//! "method not found" (it falls through to the custom-request case). Each refusal here is a
//! JSON-RPC error that carries the request's `id` when it is certain (found by a hostile-input
//! review); on a pipe a refused notification or response gets no answer.

use rmcp::model::{CallToolRequestParams, ClientJsonRpcMessage};
use serde::Deserializer as _;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// JSON-RPC 2.0: the message is not JSON, or repeats a key.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0: JSON, but not a message MCP reads.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0: a known method with parameters of the wrong shape.
pub(crate) const INVALID_PARAMS: i64 = -32602;

/// A message the projection answers itself: the JSON-RPC error response, and the request's id
/// when the message is a request whose id is certain.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) id: Option<Value>,
}

impl Refusal {
    pub(crate) fn new(code: i64, message: impl Into<String>, id: Option<Value>) -> Self {
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

/// Where a message arrived: over HTTP every request body gets an answer; on a pipe only a
/// request does (JSON-RPC 2.0: a notification is never answered, nor a response), and text
/// that is not JSON is left to rmcp, which ignores it (as every official MCP SDK does: there
/// is no id to answer, and answering garbage can start an error storm between two peers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    Http,
    Pipe,
}

/// What becomes of one message.
#[derive(Debug)]
pub(crate) enum Screened {
    /// rmcp reads it.
    Pass,
    /// Nobody reads it and nobody is answered: a notification or a response on a pipe that
    /// the projection refuses.
    Drop(Refusal),
    /// The projection answers it with this error.
    Refuse(Refusal),
}

/// What the projection does with `bytes` (one JSON-RPC message) before rmcp reads it:
/// - a repeated key anywhere: `-32700` (parsers disagree on which value wins);
/// - over HTTP, text that is not JSON (too deep, a lone surrogate, truncated): `-32700`;
/// - a `tools/call` request whose `params` are not `{name, arguments}` of the right types
///   (`arguments` not an object, no `name`): `-32602`;
/// - JSON that is not a message rmcp reads (a batch, `params` of the wrong type): `-32600`.
///
/// The id is the request's only when the message is a request and its top level names one id
/// (a repeated `id` is ambiguous, so `null`). On a pipe a refused notification or response
/// is dropped unanswered.
pub(crate) fn screen(bytes: &[u8], arrival: Arrival) -> Screened {
    // rmcp's pipe reader drops a leading byte-order mark before it parses a line, so the check
    // must too, or a marked line would pass it unread.
    let bytes = match arrival {
        Arrival::Pipe => bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes),
        Arrival::Http => bytes,
    };
    let refused = |refusal: Refusal, request: bool| match (arrival, request) {
        (Arrival::Pipe, false) => Screened::Drop(refusal),
        _ => Screened::Refuse(refusal),
    };
    if let Err(error) = crate::serve::unique_keys::check(bytes) {
        if error.is_data() {
            let head = top_level(bytes);
            let request = head.as_ref().is_some_and(|h| h.is_request());
            let id = head.and_then(|h| h.request_id());
            return refused(Refusal::new(PARSE_ERROR, error.to_string(), id), request);
        }
        return match arrival {
            Arrival::Http => Screened::Refuse(Refusal::new(
                PARSE_ERROR,
                format!("the request body is not JSON: {error}"),
                None,
            )),
            Arrival::Pipe => Screened::Pass,
        };
    }
    // `check` read the whole text as JSON, so this parse succeeds.
    let Ok(message) = serde_json::from_slice::<Value>(bytes) else {
        return Screened::Pass;
    };
    let head = TopLevel::of(&message);
    let request = head.is_request();
    let id = head.request_id();
    if request && message.get("method").and_then(Value::as_str) == Some("tools/call") {
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        if let Err(error) = serde_json::from_value::<CallToolRequestParams>(params) {
            return Screened::Refuse(Refusal::new(
                INVALID_PARAMS,
                format!(
                    "tools/call takes params `{{\"name\": string, \"arguments\": object}}`: {error}"
                ),
                id,
            ));
        }
    }
    if let Err(error) = serde_json::from_value::<ClientJsonRpcMessage>(message) {
        return refused(
            Refusal::new(
                INVALID_REQUEST,
                format!("not a JSON-RPC 2.0 message this MCP server reads: {error}"),
                id,
            ),
            request,
        );
    }
    Screened::Pass
}

/// What the top level of a message says about answering it: whether it is a request (a
/// `method` and an `id`), and its id when it names exactly one.
struct TopLevel {
    method: bool,
    ids: Vec<Value>,
}

impl TopLevel {
    fn of(message: &Value) -> Self {
        Self {
            method: message.get("method").is_some_and(Value::is_string),
            ids: message.get("id").cloned().into_iter().collect(),
        }
    }

    fn is_request(&self) -> bool {
        self.method && !self.ids.is_empty()
    }

    /// The request's id: one string or number (a repeated `id` is ambiguous: `None`).
    fn request_id(&self) -> Option<Value> {
        match self.ids.as_slice() {
            [id] if self.method && (id.is_string() || id.is_number()) => Some(id.clone()),
            _ => None,
        }
    }
}

/// The top level of `bytes` read with every `id` kept (serde_json's `Value` keeps the last of
/// a repeated key), or `None` when it is not a JSON object.
fn top_level(bytes: &[u8]) -> Option<TopLevel> {
    struct Members;

    impl<'de> Visitor<'de> for Members {
        type Value = TopLevel;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<TopLevel, A::Error> {
            let mut head = TopLevel {
                method: false,
                ids: Vec::new(),
            };
            while let Some(key) = members.next_key::<std::borrow::Cow<'de, str>>()? {
                match key.as_ref() {
                    "id" => head.ids.push(members.next_value()?),
                    "method" => head.method = members.next_value::<Value>()?.is_string(),
                    _ => {
                        members.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(head)
        }
    }

    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    deserializer.deserialize_map(Members).ok()
}

/// The UTF-8 byte-order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Lines queued for the writer of the pipe: rmcp's output and the refusals, each whole, so no
/// refusal lands inside one of rmcp's messages.
const QUEUED_LINES: usize = 16;

/// Bytes buffered between the pumps and rmcp's side of its in-memory pipe.
const RMCP_PIPE_BYTES: usize = 64 * 1024;

/// Puts [`screen`] between a byte pipe (`reader`, `writer`) and rmcp: returns the stream rmcp
/// serves on. Three tasks end with the pipe: one reads lines from `reader` and passes each to
/// rmcp or answers its refusal; one takes rmcp's output line by line; one writes both to
/// `writer`. A line longer than `max_line_bytes` (its newline included) is dropped unread, and
/// so is a last line without a newline, as rmcp drops them.
///
/// Whichever side ends first ends the others: the client closing `reader` ends rmcp's input,
/// so rmcp finishes its answers and ends; rmcp ending (its session cancelled) stops the read
/// of `reader` and shuts `writer`, so the client sees the end; a failed write to `writer`
/// ends rmcp's input too, while rmcp's further output is read and dropped, so its sends never
/// wait on a client that is gone.
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
    let ended = CancellationToken::new();
    tokio::spawn(write_lines(queued, writer, ended.clone()));
    tokio::spawn(pass_output(from_rmcp, lines.clone(), ended.clone()));
    tokio::spawn(screen_input(reader, to_rmcp, lines, max_line_bytes, ended));
    rmcp_side
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut queued: mpsc::Receiver<Vec<u8>>,
    mut writer: W,
    ended: CancellationToken,
) {
    while let Some(line) = queued.recv().await {
        if let Err(error) = write_line(&mut writer, &line).await {
            tracing::error!(%error, "the MCP client's pipe could not be written; ending the session");
            ended.cancel();
            return;
        }
    }
    let _ = writer.shutdown().await;
}

async fn write_line<W: AsyncWrite + Unpin>(writer: &mut W, line: &[u8]) -> std::io::Result<()> {
    writer.write_all(line).await?;
    writer.flush().await
}

async fn pass_output<R: AsyncRead + Unpin>(
    from_rmcp: R,
    lines: mpsc::Sender<Vec<u8>>,
    ended: CancellationToken,
) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    let mut lines = Some(lines);
    loop {
        let mut line = Vec::new();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                // Once the client's pipe is gone, rmcp's output is read and dropped until rmcp
                // ends, so its sends never wait.
                if let Some(sender) = &lines
                    && sender.send(line).await.is_err()
                {
                    lines = None;
                }
            }
        }
    }
    // rmcp ended: so does the session's reading of the client, and the writer shuts the pipe
    // once the last queued line is written (every sender is then gone).
    ended.cancel();
}

async fn screen_input<R, T>(
    reader: R,
    mut to_rmcp: T,
    lines: mpsc::Sender<Vec<u8>>,
    max_line_bytes: usize,
    ended: CancellationToken,
) where
    R: AsyncRead + Unpin,
    T: AsyncWrite + Unpin,
{
    let mut reader = BufReader::new(reader);
    loop {
        let read = tokio::select! {
            biased;
            () = ended.cancelled() => break,
            read = read_bounded_line(&mut reader, max_line_bytes) => read,
        };
        let line = match read {
            Ok(Line::Whole(line)) => line,
            Ok(Line::TooLong) => {
                tracing::error!(
                    max_line_length = max_line_bytes,
                    "Incoming message exceeded the maximum line length, discarding it"
                );
                continue;
            }
            Ok(Line::End) => break,
            Err(error) => {
                tracing::error!(%error, "the MCP client's pipe could not be read; ending the session");
                break;
            }
        };
        let message = line.strip_suffix(b"\n").unwrap_or(&line);
        let message = message.strip_suffix(b"\r").unwrap_or(message);
        match screen(message, Arrival::Pipe) {
            Screened::Pass => {
                if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
            Screened::Drop(refusal) => {
                tracing::debug!(
                    code = refusal.code,
                    "an MCP notification or response was refused unanswered"
                );
            }
            Screened::Refuse(refusal) => {
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
    /// A line with its `\n`.
    Whole(Vec<u8>),
    /// A line longer than the bound, read past without keeping it.
    TooLong,
    /// The end of the input; an unterminated last line is dropped with it.
    End,
}

/// Reads one line of at most `max_bytes` bytes, its `\n` included, without buffering a longer
/// one whole.
async fn read_bounded_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    max_bytes: usize,
) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if too_long { Line::TooLong } else { Line::End });
        }
        let (taken, ended) = match available.iter().position(|&b| b == b'\n') {
            Some(end) => (end + 1, true),
            None => (available.len(), false),
        };
        if !too_long {
            if line.len() + taken > max_bytes {
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
        match screen(body.as_bytes(), arrival) {
            Screened::Refuse(refusal) => refusal,
            other => panic!("{body}: {other:?}"),
        }
    }

    fn passes(body: &str, arrival: Arrival) -> bool {
        matches!(screen(body.as_bytes(), arrival), Screened::Pass)
    }

    fn dropped(body: &str) -> bool {
        matches!(screen(body.as_bytes(), Arrival::Pipe), Screened::Drop(_))
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
    fn a_repeated_id_is_answered_with_a_null_id() {
        let body = r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#;
        let refusal = refused(body, Arrival::Pipe);
        assert_eq!((refusal.code, refusal.id), (PARSE_ERROR, None));
    }

    #[test]
    fn a_refused_notification_or_response_is_never_answered_on_a_pipe() {
        for body in [
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"a":1,"a":2}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"pay","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":77,"result":{"a":1,"a":2}}"#,
        ] {
            assert!(
                dropped(body) || passes(body, Arrival::Pipe),
                "{body}: answered on a pipe"
            );
        }
        // A response's id is the client's own request's: never echoed in a refusal.
        let response = r#"{"jsonrpc":"2.0","id":77,"result":{"a":1,"a":2}}"#;
        assert!(dropped(response));
        assert_eq!(refused(response, Arrival::Http).id, None);
    }

    #[test]
    fn a_byte_order_mark_does_not_hide_a_repeated_key_on_a_pipe() {
        let line = "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"pay\",\"arguments\":{\"a\":1,\"a\":2}}}";
        let refusal = refused(line, Arrival::Pipe);
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
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":1e400}}"#,
        ] {
            let refusal = refused(body, Arrival::Http);
            assert_eq!((refusal.code, refusal.id), (PARSE_ERROR, None), "{body}");
            assert!(passes(body, Arrival::Pipe), "{body}");
        }
    }

    #[test]
    fn tools_call_params_that_are_not_name_and_arguments_are_invalid_params() {
        for params in [
            r#"{"name":"pay","arguments":[1,2]}"#,
            r#"{"name":"pay","arguments":"x"}"#,
            r#"{"name":"pay","arguments":5}"#,
            r#"{"arguments":{}}"#,
            r#"{"name":5,"arguments":{}}"#,
            "5",
            "[]",
        ] {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{params}}}"#);
            for arrival in [Arrival::Http, Arrival::Pipe] {
                let refusal = refused(&body, arrival);
                assert_eq!(refusal.code, INVALID_PARAMS, "{body}");
                assert_eq!(refusal.id, Some(json!("r1")), "{body}");
            }
        }
        for fine in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"a":1}}}"#,
        ] {
            assert!(passes(fine, Arrival::Http), "{fine}");
        }
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request_unless_nobody_waits() {
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#;
        let refusal = refused(batch, Arrival::Http);
        assert_eq!((refusal.code, refusal.id), (INVALID_REQUEST, None));
        let odd = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":5}"#;
        assert_eq!(refused(odd, Arrival::Pipe).id, Some(json!(3)));
        // A notification on a pipe is never answered.
        let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#;
        assert!(!matches!(
            screen(notification.as_bytes(), Arrival::Pipe),
            Screened::Refuse(_)
        ));
    }

    #[test]
    fn an_ordinary_request_passes() {
        let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert!(passes(list, Arrival::Http));
        assert!(passes(list, Arrival::Pipe));
    }

    #[tokio::test]
    async fn lines_are_bounded_with_their_newline_and_an_unterminated_last_line_is_dropped() {
        let input = format!("{}\n{}\nshort\nlast", "x".repeat(49), "y".repeat(50));
        let mut reader = BufReader::with_capacity(8, input.as_bytes());
        let mut next = async || read_bounded_line(&mut reader, 50).await.unwrap();
        assert!(matches!(next().await, Line::Whole(l) if l.len() == 50));
        assert!(
            matches!(next().await, Line::TooLong),
            "51 bytes with its newline"
        );
        assert!(matches!(next().await, Line::Whole(l) if l == b"short\n"));
        assert!(matches!(next().await, Line::End), "as rmcp drops it");
    }
}
