//! The streaming search example through a real host: hits streamed in order with one terminal
//! chunk, a consumer that stops reading holding the handler back, and cancellation of a
//! handler that waits on a full buffer.

use std::sync::Arc;
use std::time::Duration;

use aip_connector::codes;
use aip_connector::host::{CancelOutcome, Host, HostLimits, TrustedContext};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, Principal, PrincipalKind, StreamChunk,
    StreamChunkKind,
};
use aip_connector::store::MemoryStore;
use aip_connector_examples::search::{self, DocumentIndex, Search};
use serde_json::{Value, json};

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
}

fn host(stream_buffer: usize) -> Host {
    Host::builder()
        .connector(Search::sample())
        .store(Arc::new(MemoryStore::new()))
        .limits(HostLimits::default().stream_buffer(stream_buffer))
        .build()
        .unwrap()
}

fn search(query: &str, limit: u32) -> Action {
    Action::new(
        search::SEARCH_DOCUMENTS,
        json!({ "query": query, "limit": limit }),
    )
}

fn data(chunks: &[StreamChunk]) -> Vec<Value> {
    chunks
        .iter()
        .filter(|c| c.kind == StreamChunkKind::Data)
        .map(|c| c.data.clone().unwrap())
        .collect()
}

fn result_of(chunks: &[StreamChunk]) -> ActionResult {
    let last = chunks.last().expect("a terminal chunk");
    assert!(
        matches!(last.kind, StreamChunkKind::Done | StreamChunkKind::Error),
        "{last:?}"
    );
    serde_json::from_value(last.data.clone().unwrap()).unwrap()
}

#[tokio::test]
async fn hits_stream_in_index_order_up_to_the_limit_then_one_terminal_chunk() {
    let chunks = host(16)
        .invoke_stream(search("service", 40), caller())
        .collect()
        .await;
    let hits = data(&chunks);
    assert_eq!(hits.len(), 40);
    let ids: Vec<&str> = hits
        .iter()
        .map(|h| h["document_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..=40).map(|n| format!("doc-{n:03}")).collect();
    assert_eq!(ids, expected);
    for (n, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk.sequence, n as u64);
    }
    let terminals = chunks
        .iter()
        .filter(|c| matches!(c.kind, StreamChunkKind::Done | StreamChunkKind::Error))
        .count();
    assert_eq!(terminals, 1);
    let result = result_of(&chunks);
    assert_eq!(result.status, ActionResultStatus::Completed);
    assert_eq!(
        result.output,
        Some(json!({ "hits": 40, "documents_scanned": 40, "complete": false }))
    );
}

#[tokio::test]
async fn every_word_must_match_and_title_words_count_twice() {
    let chunks = host(16)
        .invoke_stream(search("Incident PAYMENTS", 20), caller())
        .collect()
        .await;
    let hits = data(&chunks);
    assert_eq!(hits.len(), 1, "{hits:?}");
    let document = DocumentIndex::sample()
        .get("doc-008")
        .cloned()
        .expect("the sample corpus has doc-008");
    assert_eq!(hits[0]["document_id"], "doc-008");
    assert_eq!(hits[0]["title"], document.title.as_str());
    // "incident" and "payments": once each in the title (2 + 2), once each in the text.
    assert_eq!(hits[0]["score"], 6);
    assert!(
        hits[0]["snippet"]
            .as_str()
            .unwrap()
            .starts_with("The payments service")
    );
    assert_eq!(
        result_of(&chunks).output,
        Some(json!({ "hits": 1, "documents_scanned": 48, "complete": true }))
    );
}

#[tokio::test]
async fn a_consumer_that_stops_reading_holds_the_scan_back_and_cancel_stops_it() {
    let host = host(4);
    let action = search("service", 100);
    let id = action.id.clone();
    let mut stream = host.invoke_stream(action, caller());
    let first = stream.next().await.unwrap();
    assert_eq!(first.kind, StreamChunkKind::Data);

    // Nobody reads: the handler fills the buffer and waits in `send`; it does not finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        host.cancel(&id),
        CancelOutcome::Cancelled,
        "the scan is still waiting for its consumer"
    );

    let mut rest = vec![first];
    while let Some(chunk) = stream.next().await {
        rest.push(chunk);
    }
    let hits = data(&rest);
    assert!(
        hits.len() <= 1 + 4 + 1,
        "at most the chunk read, a full buffer and the send in progress: {}",
        hits.len()
    );
    assert_eq!(result_of(&rest).status, ActionResultStatus::Cancelled);
}

#[tokio::test]
async fn a_search_only_streams_and_rejects_queries_without_words() {
    let host = host(16);
    let sync = host.invoke(search("service", 5), &caller()).await;
    assert_eq!(sync.error.unwrap().code, codes::EXECUTION_MODE_UNSUPPORTED);

    let blank = host.invoke_stream(search("", 5), caller()).collect().await;
    assert_eq!(
        result_of(&blank).error.unwrap().code,
        codes::ACTION_INPUT_SCHEMA_INVALID
    );
    let punctuation = host
        .invoke_stream(search("?!", 5), caller())
        .collect()
        .await;
    assert_eq!(
        result_of(&punctuation).error.unwrap().code,
        "search.query_empty"
    );
}

#[tokio::test]
async fn a_document_is_fetched_by_id() {
    let host = host(16);
    let found = host
        .invoke(
            Action::new(search::GET_DOCUMENT, json!({ "document_id": "doc-007" })),
            &caller(),
        )
        .await;
    assert_eq!(found.status, ActionResultStatus::Completed);
    assert_eq!(
        found.output.unwrap()["title"],
        "Runbook: restarting card payments"
    );
    let missing = host
        .invoke(
            Action::new(search::GET_DOCUMENT, json!({ "document_id": "doc-999" })),
            &caller(),
        )
        .await;
    assert_eq!(missing.error.unwrap().code, "search.document_not_found");
}
