//! What the native AIP HTTP binding costs over a plain axum JSON endpoint, over loopback.
//!
//! Both servers run in this process on one multi-thread runtime and are called by the same
//! keep-alive reqwest client, which sends a body and reads the answer's bytes:
//!
//! - `http/plain_axum_echo`: `POST /echo` on a bare axum router whose handler is a JSON echo
//!   (`Json<Value>` in, the same `Json<Value>` out), sent the very envelope the governed case
//!   sends, so both move the same bytes and the ratio is the cost of governing the call;
//! - `http/aip_governed_action`: `POST /aip/v1/messages` on [`AipServer`] with an
//!   `aip.core.v1.action` envelope for a capability doing the same work: bearer authentication,
//!   envelope parsing and validation, the concurrency slot, the action's own task, the whole
//!   host pipeline (input and output schema validation included) on a [`MemoryStore`], and the
//!   `aip.core.v1.action_result` envelope.
//!
//! Criterion reports each; the summary then times both again in interleaved rounds with a fixed
//! call count and prints the median ratio and its target (at most 1.5×). Run with
//! `cargo bench -p aip-connector --features http --bench serve_http`; `docs/performance.md`
//! records the figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aip_connector::host::{Host, TrustedContext};
use aip_connector::model::{Action, Envelope, MessageBody, Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::serve::{AipServer, BearerTokens, ServerConfig};
use aip_connector::store::MemoryStore;
use axum::Json;
use axum::routing::post;
use criterion::Criterion;
use serde_json::json;
use tokio::runtime::Runtime;

const TOKEN: &str = "bench-token";
/// Calls per interleaved round of the summary.
const ROUND_CALLS: usize = 2_000;
/// Interleaved rounds of the summary.
const ROUNDS: usize = 7;
/// The ratio target of the issue.
const TARGET: f64 = 1.5;

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    name: String,
    limit: u32,
}

#[derive(Serialize, JsonSchema)]
struct Found {
    name: String,
    matches: u32,
}

/// The capability's work.
fn lookup(input: Lookup) -> Found {
    Found {
        matches: input.limit.min(3),
        name: input.name,
    }
}

struct Directory;

#[connector(id = "directory")]
impl Directory {
    /// Looks a name up.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn lookup(&self, input: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(lookup(input))
    }
}

async fn plain_echo(Json(body): Json<serde_json::Value>) -> Json<serde_json::Value> {
    Json(body)
}

struct Servers {
    client: reqwest::Client,
    plain_url: String,
    aip_url: String,
}

impl Servers {
    async fn start() -> Self {
        let plain = axum::Router::new().route("/echo", post(plain_echo));
        let plain_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain_url = format!("http://{}/echo", plain_listener.local_addr().unwrap());
        // With TCP_NODELAY, as `AipServer::serve`'s accept loop sets it: the two differ in what
        // they do per request, not in how their answers reach the socket.
        let plain_listener = axum::serve::ListenerExt::tap_io(plain_listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(plain_listener, plain).await });

        let host = Host::builder()
            .connector(Directory)
            .store(Arc::new(MemoryStore::default()))
            .build()
            .expect("host builds");
        let caller =
            TrustedContext::new(Principal::new("agent:bench", PrincipalKind::Agent), "bench");
        let server = AipServer::new(
            host,
            BearerTokens::new().with(TOKEN, caller),
            ServerConfig::default(),
        );
        let aip_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let aip_url = format!(
            "http://{}{}",
            aip_listener.local_addr().unwrap(),
            aip_connector::serve::server::MESSAGES_PATH
        );
        tokio::spawn(server.serve(aip_listener, std::future::pending()));

        let servers = Self {
            client: reqwest::Client::new(),
            plain_url,
            aip_url,
        };
        servers.check().await;
        servers
    }

    fn action_body() -> Vec<u8> {
        let action = Action::new(
            "cap:directory:lookup",
            json!({ "name": "ada", "limit": 10 }),
        );
        serde_json::to_vec(&Envelope::new(MessageBody::Action(Box::new(action)))).unwrap()
    }

    /// Both answer what they should before anything is timed.
    async fn check(&self) {
        let echoed: Envelope = serde_json::from_slice(&self.plain().await).unwrap();
        assert!(matches!(echoed.body, MessageBody::Action(_)), "{echoed:?}");
        let answer: Envelope = serde_json::from_slice(&self.governed().await).unwrap();
        let MessageBody::ActionResult(result) = answer.body else {
            panic!("not a result: {answer:?}");
        };
        assert_eq!(
            result.output,
            Some(json!({ "name": "ada", "matches": 3 })),
            "{result:?}"
        );
    }

    /// Posts a fresh action envelope (a new action id per call, as a real caller sends) and
    /// reads the answer's bytes.
    async fn post(&self, request: reqwest::RequestBuilder) -> bytes::Bytes {
        request
            .header("content-type", "application/json")
            .body(Self::action_body())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
    }

    async fn plain(&self) -> bytes::Bytes {
        self.post(self.client.post(&self.plain_url)).await
    }

    async fn governed(&self) -> bytes::Bytes {
        self.post(self.client.post(&self.aip_url).bearer_auth(TOKEN))
            .await
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let servers = runtime.block_on(Servers::start());
    // `AIP_BENCH_PROFILE=plain|governed` only loops that case, for a profiler.
    if let Ok(case) = std::env::var("AIP_BENCH_PROFILE") {
        let calls = 50 * ROUND_CALLS;
        let elapsed = match case.as_str() {
            "plain" => time_round_n(&runtime, calls, || servers.plain()),
            _ => time_round_n(&runtime, calls, || servers.governed()),
        };
        println!(
            "{case}: {:.1} µs/call",
            elapsed.as_secs_f64() * 1e6 / calls as f64
        );
        return;
    }
    let mut criterion = Criterion::default()
        .configure_from_args()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    {
        let mut group = criterion.benchmark_group("http");
        group.bench_function("plain_axum_echo", |b| {
            b.to_async(&runtime).iter(|| servers.plain());
        });
        group.bench_function("aip_governed_action", |b| {
            b.to_async(&runtime).iter(|| servers.governed());
        });
        group.finish();
    }
    criterion.final_summary();
    summary(&runtime, &servers);
}

fn time_round<F: std::future::Future>(runtime: &Runtime, call: impl Fn() -> F) -> Duration {
    time_round_n(runtime, ROUND_CALLS, call)
}

fn time_round_n<F: std::future::Future>(
    runtime: &Runtime,
    calls: usize,
    call: impl Fn() -> F,
) -> Duration {
    runtime.block_on(async {
        let start = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(call().await);
        }
        start.elapsed()
    })
}

fn summary(runtime: &Runtime, servers: &Servers) {
    let mut ratios = Vec::with_capacity(ROUNDS);
    let mut plain_us = Vec::with_capacity(ROUNDS);
    let mut governed_us = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let plain = time_round(runtime, || servers.plain());
        let governed = time_round(runtime, || servers.governed());
        plain_us.push(plain.as_secs_f64() * 1e6 / ROUND_CALLS as f64);
        governed_us.push(governed.as_secs_f64() * 1e6 / ROUND_CALLS as f64);
        ratios.push(governed.as_secs_f64() / plain.as_secs_f64());
    }
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let ratio = median(&mut ratios);
    println!();
    println!("serve_http summary ({ROUNDS} interleaved rounds of {ROUND_CALLS} calls, medians)");
    println!(
        "  plain axum JSON echo      {:>8.1} µs/call",
        median(&mut plain_us)
    );
    println!(
        "  AIP governed action       {:>8.1} µs/call",
        median(&mut governed_us)
    );
    println!(
        "  ratio governed / plain    {ratio:>8.2}×   target ≤ {TARGET}×   {}",
        if ratio <= TARGET { "met" } else { "MISSED" }
    );
}
