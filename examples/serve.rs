//! Serves the streaming search example connector to agents: the native AIP HTTP binding and the
//! MCP projection on one port, or MCP over stdio.
//!
//! ```text
//! AIP_SERVE_TOKEN=s3cret cargo run -p aip-connector-examples --example serve
//! #   GET  http://127.0.0.1:8080/aip/v1/manifest     (Authorization: Bearer s3cret)
//! #   POST http://127.0.0.1:8080/aip/v1/messages     (AIP envelopes; Accept: text/event-stream streams)
//! #   POST http://127.0.0.1:8080/mcp                 (MCP streamable HTTP)
//! cargo run -p aip-connector-examples --example serve -- --stdio   # MCP over stdin/stdout
//! ```
//!
//! `AIP_SERVE_ADDR` sets the address (default `127.0.0.1:8080`). Ctrl-C drains: in-flight calls
//! finish, new ones are refused. The wiring is `aip_connector_examples::serving`, which
//! `examples/tests/serving.rs` runs over loopback.

use std::process::ExitCode;

use aip_connector_examples::serving;

#[tokio::main]
async fn main() -> ExitCode {
    let outcome = if std::env::args().any(|arg| arg == "--stdio") {
        serving::serve_stdio().await
    } else {
        serving::serve_http_from_env().await
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("serve failed: {error}");
            ExitCode::FAILURE
        }
    }
}
