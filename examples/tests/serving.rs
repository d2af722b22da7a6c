//! The served search example: the AIP binding and the MCP routes on one listener, one
//! authenticator.

use aip_connector::model::{Action, StreamChunkKind};
use aip_connector::serve::AipClient;
use aip_connector_examples::search::SEARCH_DOCUMENTS;
use aip_connector_examples::serving;
use serde_json::json;

#[tokio::test]
async fn the_aip_binding_and_the_mcp_routes_share_one_listener_and_one_token() {
    let app = serving::app(serving::host().unwrap(), "example-token").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(serving::serve(app, listener, async {
        let _ = stopped.await;
    }));

    let client = AipClient::new(&base).bearer_token("example-token");
    let manifest = client.manifest(None).await.unwrap();
    assert!(manifest.capability(SEARCH_DOCUMENTS).is_some());
    let chunks = client
        .invoke_stream(Action::new(
            SEARCH_DOCUMENTS,
            json!({ "query": "service", "limit": 2 }),
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(chunks.last().unwrap().kind, StreamChunkKind::Done);

    // The MCP endpoint is behind the same authenticator.
    let http = reqwest::Client::new();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "test", "version": "0" } }
    });
    let refused = http
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let accepted = http
        .post(format!("{base}/mcp"))
        .bearer_auth("example-token")
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert!(accepted.status().is_success(), "{}", accepted.status());
    let session = accepted
        .headers()
        .get("mcp-session-id")
        .expect("a session")
        .to_str()
        .unwrap()
        .to_owned();
    let body = accepted.text().await.unwrap();
    assert!(body.contains("serverInfo"), "{body}");
    // An open MCP event stream must not hold shutdown forever.
    let events = http
        .get(format!("{base}/mcp"))
        .bearer_auth("example-token")
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    let _ = events.status();

    stop.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), serving)
        .await
        .expect("shutdown drains within 10 s")
        .unwrap()
        .unwrap();
    drop(events);
}
