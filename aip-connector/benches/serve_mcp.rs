//! What the MCP projection costs on top of a plain rmcp server, over loopback HTTP.
//!
//! One trivial operation — add two integers — is served two ways in the same run, on the same
//! runtime, with the same rmcp streamable HTTP configuration (rmcp's default: sessions, SSE
//! responses), and called by the same rmcp client over `127.0.0.1`:
//!
//! - `mcp/plain_rmcp`: an rmcp `#[tool]` server (`#[tool_router]` in a field, `#[tool_handler]`):
//!   deserialize `Parameters<Add>`, add, return `Json<Sum>` (structured content plus a text
//!   copy);
//! - `mcp/projection`: `McpProjection` of a `Host` hosting the same operation as a capability
//!   (`risk = low, side_effects = [read]`): bearer authentication, the host pipeline with input
//!   and output schema validation, and the same structured result.
//!
//! Criterion reports each case; a summary at the end times both again in interleaved rounds
//! with a fixed call count (so a slow moment of the machine hits both alike) and prints the
//! ratio of median per-call times, projection over plain, against its target (<= 1.2x). Run with
//! `cargo bench -p aip-connector --bench serve_mcp --features mcp`; `docs/mcp.md` records the
//! figures.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aip_connector::host::{Host, TrustedContext};
use aip_connector::model::{Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::serve::BearerTokens;
use aip_connector::serve::mcp::McpProjection;
use aip_connector::store::MemoryStore;
use criterion::{Criterion, Throughput};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{
    StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{ErrorData, Json, RoleClient, ServiceExt, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

/// The token both clients send (the plain server ignores it).
const TOKEN: &str = "bench-token";
/// Calls per side per summary round.
const SUMMARY_CALLS: usize = 300;
/// Summary rounds.
const SUMMARY_ROUNDS: usize = 5;
/// The target: the projection's median call at most this many times the plain server's.
const TARGET: f64 = 1.2;

/// Two integers to add.
#[derive(Deserialize, JsonSchema)]
struct Add {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

/// Their sum.
#[derive(Serialize, JsonSchema)]
struct Sum {
    /// `a + b`.
    sum: i64,
}

// ---- The governed capability ------------------------------------------------------------------

struct Calculator;

#[connector(id = "calc")]
impl Calculator {
    /// Adds two integers.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn add(&self, input: Add) -> Result<Sum, ConnectorFailure> {
        Ok(Sum {
            sum: input.a.wrapping_add(input.b),
        })
    }
}

// ---- The plain rmcp server ---------------------------------------------------------------------

#[derive(Clone)]
struct Plain {
    tool_router: ToolRouter<Plain>,
}

#[tool_router]
impl Plain {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    /// Adds two integers.
    #[tool(name = "add", description = "Adds two integers.")]
    async fn add(&self, Parameters(input): Parameters<Add>) -> Result<Json<Sum>, ErrorData> {
        Ok(Json(Sum {
            sum: input.a.wrapping_add(input.b),
        }))
    }
}

#[tool_handler(router = self.tool_router)]
impl rmcp::ServerHandler for Plain {}

// ---- Serving and calling -----------------------------------------------------------------------

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

async fn listener() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    (listener, address)
}

async fn serve_plain() -> SocketAddr {
    let (listener, address) = listener().await;
    let service = StreamableHttpService::new(
        || Ok(Plain::new()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().route_service("/mcp", service);
    // With TCP_NODELAY, as the projection's `serve_http` sets it: the two differ in what they do
    // per request, not in how their answers reach the socket.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

async fn serve_projection() -> SocketAddr {
    let host = Host::builder()
        .connector(Calculator)
        .store(Arc::new(MemoryStore::default()))
        .build()
        .expect("the host");
    let projection = McpProjection::new(host).expect("the projection");
    let caller = TrustedContext::new(Principal::new("bench", PrincipalKind::Agent), "bench");
    let tokens = BearerTokens::new().with(TOKEN, caller);
    let (listener, address) = listener().await;
    tokio::spawn(projection.serve_http(
        listener,
        Arc::new(tokens),
        StreamableHttpServerConfig::default(),
        std::future::pending(),
    ));
    address
}

/// One connected client and the tool it calls.
struct Side {
    client: RunningService<RoleClient, ()>,
    tool: &'static str,
}

impl Side {
    async fn connect(address: SocketAddr, tool: &'static str) -> Self {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{address}/mcp"))
                .auth_header(TOKEN),
        );
        let client = ().serve(transport).await.expect("an MCP session");
        Self { client, tool }
    }

    async fn call(&self, a: i64) -> CallToolResult {
        let Value::Object(arguments) = json!({ "a": a, "b": 2 }) else {
            unreachable!("an object literal")
        };
        self.client
            .call_tool(CallToolRequestParams::new(self.tool).with_arguments(arguments))
            .await
            .expect("the call")
    }

    /// `calls` sequential calls; their wall time.
    async fn time(&self, calls: usize) -> Duration {
        let start = Instant::now();
        for i in 0..calls {
            black_box(self.call(i as i64).await);
        }
        start.elapsed()
    }
}

/// Both sides, connected, after checking that they answer alike.
fn sides(runtime: &Runtime) -> (Side, Side) {
    runtime.block_on(async {
        let plain = Side::connect(serve_plain().await, "add").await;
        let ours = Side::connect(serve_projection().await, "cap_calc_add").await;
        for side in [&plain, &ours] {
            let result = side.call(40).await;
            assert_eq!(result.is_error, Some(false), "{result:?}");
            assert_eq!(result.structured_content, Some(json!({ "sum": 42 })));
        }
        // The projection really runs the governed pipeline: a schema violation is refused.
        let Value::Object(bad) = json!({ "a": "forty", "b": 2 }) else {
            unreachable!("an object literal")
        };
        let refused = ours
            .client
            .call_tool(CallToolRequestParams::new(ours.tool).with_arguments(bad))
            .await
            .expect("the call");
        assert_eq!(refused.is_error, Some(true), "{refused:?}");
        (plain, ours)
    })
}

fn bench(c: &mut Criterion, runtime: &Runtime, plain: &Side, ours: &Side) {
    let mut group = c.benchmark_group("mcp");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    group.bench_function("plain_rmcp", |b| {
        b.iter_custom(|iters| runtime.block_on(plain.time(iters as usize)));
    });
    group.bench_function("projection", |b| {
        b.iter_custom(|iters| runtime.block_on(ours.time(iters as usize)));
    });
    group.finish();
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

/// Interleaved rounds of single timed calls; prints medians and the ratio.
fn summary(runtime: &Runtime, plain: &Side, ours: &Side) {
    let (mut plain_calls, mut our_calls, mut round_ratios) = (Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        for _ in 0..SUMMARY_ROUNDS {
            let (mut plain_round, mut our_round) = (Vec::new(), Vec::new());
            for i in 0..SUMMARY_CALLS {
                // Alternate which side goes first, so neither always follows the other.
                let order: [(&Side, bool); 2] = if i.is_multiple_of(2) {
                    [(plain, false), (ours, true)]
                } else {
                    [(ours, true), (plain, false)]
                };
                for (side, is_ours) in order {
                    let micros = side.time(1).await.as_secs_f64() * 1e6;
                    if is_ours {
                        our_round.push(micros);
                    } else {
                        plain_round.push(micros);
                    }
                }
            }
            round_ratios.push(median(our_round.clone()) / median(plain_round.clone()));
            plain_calls.extend(plain_round);
            our_calls.extend(our_round);
        }
    });
    let mean = |values: &[f64]| values.iter().sum::<f64>() / values.len() as f64;
    let (plain_median, our_median) = (median(plain_calls.clone()), median(our_calls.clone()));
    let ratio = our_median / plain_median;
    let low = round_ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = round_ratios
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    println!();
    println!(
        "MCP tools/call over loopback HTTP: {SUMMARY_ROUNDS} rounds of {SUMMARY_CALLS} calls per \
         side, interleaved"
    );
    println!(
        "  plain rmcp #[tool]    median {plain_median:>8.1} us   mean {:>8.1} us",
        mean(&plain_calls)
    );
    println!(
        "  McpProjection + Host  median {our_median:>8.1} us   mean {:>8.1} us",
        mean(&our_calls)
    );
    println!(
        "  ratio (projection / plain)  {ratio:>5.2}x  target <= {TARGET:.1}x  {}  \
         (per-round {low:.2}x..{high:.2}x; ratio of means {:.2}x)",
        if ratio <= TARGET { "met" } else { "MISSED" },
        mean(&our_calls) / mean(&plain_calls)
    );
}

fn main() {
    let runtime = runtime();
    let (plain, ours) = sides(&runtime);
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, &runtime, &plain, &ours);
    criterion.final_summary();
    // `cargo test --benches` runs this binary without `--bench`: criterion then runs each case
    // once as a smoke test, and the timed summary would only slow the test run down.
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench")
        && !args
            .iter()
            .any(|a| a == "--test" || a == "--list" || a.starts_with("--profile-time"));
    if benchmarking {
        summary(&runtime, &plain, &ours);
    }
    runtime.block_on(async {
        let _ = plain.client.cancel().await;
        let _ = ours.client.cancel().await;
    });
}
