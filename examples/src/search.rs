//! Streaming search: `cap:search:documents` streams its hits as it finds them, stops when the
//! action is cancelled, and never runs ahead of its consumer.
//!
//! - **Streaming**: the handler takes a [`StreamSink<SearchHit>`](StreamSink), so the contract
//!   says `supports_streaming` (and not `supports_sync`: there is no single answer to wait
//!   for); each hit is one data chunk, and the handler's return value (a summary) ends the
//!   stream in the host's terminal chunk.
//! - **Back-pressure**: every `send` is awaited. The host buffers a bounded number of chunks
//!   (`HostLimits::stream_buffer`); while the buffer is full the handler waits inside `send`,
//!   so the scan advances only as fast as the consumer reads.
//! - **Cancellation**: the handler takes [`Cancellation`] (so the contract says
//!   `supports_cancel`) and checks it before each document and while a `send` waits, so a
//!   cancelled search stops scanning even when the consumer has stopped reading.
//!
//! The documents live in an in-process [`DocumentIndex`]; a connector for a real search
//! service would fetch pages from it in the same loop, with the same awaits.
//!
//! `cap:search:document:get` fetches one document by id: a plain synchronous read.

use std::collections::BTreeSet;
use std::sync::Arc;

use aip_connector::model::ConnectorOperation;
use aip_connector::prelude::*;

/// The connector id.
pub const CONNECTOR_ID: &str = "search";
/// The streaming search capability.
pub const SEARCH_DOCUMENTS: &str = Search::SEARCH_DOCUMENTS_ID;
/// The document fetch capability.
pub const GET_DOCUMENT: &str = Search::GET_DOCUMENT_ID;

/// One indexed document.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// Its id, `doc-` and three digits.
    pub document_id: String,
    /// Its title.
    pub title: String,
    /// Its text.
    pub body: String,
}

/// The documents a [`Search`] connector searches, in index order.
#[derive(Clone, Debug, Default)]
pub struct DocumentIndex {
    documents: Vec<Document>,
}

/// Topics of the sample corpus: (short name, service name).
const SAMPLE_TOPICS: [(&str, &str); 8] = [
    ("calendar", "calendar sync"),
    ("payments", "card payments"),
    ("search", "document search"),
    ("storage", "object storage"),
    ("identity", "single sign-on"),
    ("network", "edge network"),
    ("email", "outbound e-mail"),
    ("billing", "invoicing"),
];

/// Kinds of document in the sample corpus: (title, body), `{topic}` and `{service}` filled in.
const SAMPLE_KINDS: [(&str, &str); 6] = [
    (
        "Runbook: restarting {service}",
        "Steps to restart the {topic} service safely. Drain traffic first, restart one node at a time, and watch the error rate before moving on.",
    ),
    (
        "Incident review: {service} outage",
        "The {topic} service was unavailable for forty minutes after a failed deploy. The incident ended with a rollback; the follow-up adds a canary stage.",
    ),
    (
        "Design note: retries in {service}",
        "How the {topic} service retries provider calls with idempotency keys, and why an unknown outcome is reconciled with the provider instead of retried.",
    ),
    (
        "FAQ: {service} for new engineers",
        "Where the {topic} service runs, who owns it, and how to request access. Start with the dashboards and the on-call rota.",
    ),
    (
        "On-call guide: {service}",
        "What pages the {topic} on-call engineer and the first three things to check: recent deploys, provider status, and queue depth of the service.",
    ),
    (
        "Capacity plan: {service}",
        "Expected load on the {topic} service for the next two quarters, the headroom we keep, and when to add nodes.",
    ),
];

impl DocumentIndex {
    /// An index of `documents`, searched in the order given.
    pub fn new(documents: Vec<Document>) -> Self {
        Self { documents }
    }

    /// A sample corpus of 48 engineering documents (`doc-001` … `doc-048`): six kinds of
    /// document (runbook, incident review, design note, FAQ, on-call guide, capacity plan) for
    /// each of eight services. Every body mentions "service".
    pub fn sample() -> Self {
        let mut documents = Vec::with_capacity(SAMPLE_TOPICS.len() * SAMPLE_KINDS.len());
        for (topic, service) in SAMPLE_TOPICS {
            for (title, body) in SAMPLE_KINDS {
                let fill =
                    |text: &str| text.replace("{topic}", topic).replace("{service}", service);
                documents.push(Document {
                    document_id: format!("doc-{:03}", documents.len() + 1),
                    title: fill(title),
                    body: fill(body),
                });
            }
        }
        Self { documents }
    }

    /// The documents, in index order.
    pub fn documents(&self) -> &[Document] {
        &self.documents
    }

    /// The document with id `document_id`.
    pub fn get(&self, document_id: &str) -> Option<&Document> {
        self.documents.iter().find(|d| d.document_id == document_id)
    }
}

/// What to search for.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    /// Words to look for. A document matches when it contains every word (case-insensitive),
    /// in its title or its text.
    #[schemars(length(min = 1, max = 200))]
    pub query: String,
    /// The most hits to stream (default 20).
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: u32,
}

fn default_limit() -> u32 {
    20
}

/// One hit, streamed as one chunk.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchHit {
    /// The matching document.
    pub document_id: String,
    /// Its title.
    pub title: String,
    /// How often the query's words occur (a title occurrence counts twice).
    pub score: u32,
    /// The first sentence of the text that contains a query word, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
}

/// How a search ended.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchSummary {
    /// Hits streamed.
    pub hits: u32,
    /// Documents looked at.
    pub documents_scanned: u32,
    /// Whether every document was looked at (false when the limit stopped the scan first).
    pub complete: bool,
}

/// Which document to fetch.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentRef {
    /// The document's id, as a hit names it.
    #[schemars(pattern(r"^doc-[0-9]{3}$"))]
    pub document_id: String,
}

/// Documents per index page: the unit the backend is asked about.
const PAGE_SIZE: usize = 8;

/// The search connector over a [`DocumentIndex`], optionally backed by a search service.
///
/// With a backend, the connector asks it for each index page before scanning that page
/// (`GET /index/pages/{n}`, the shard's freshness check a real search connector makes) and
/// for each document it returns (`GET /documents/{id}`): provider failures reach the caller
/// classified by the `ProviderClient`, and a slow backend is where cancellation matters.
#[derive(Clone, Debug)]
pub struct Search {
    index: Arc<DocumentIndex>,
    backend: Option<ProviderClient>,
}

impl Search {
    /// A connector searching `index`.
    pub fn new(index: DocumentIndex) -> Self {
        Self {
            index: Arc::new(index),
            backend: None,
        }
    }

    /// The same connector, checking every index page and document with `backend`.
    pub fn with_backend(mut self, backend: ProviderClient) -> Self {
        self.backend = Some(backend);
        self
    }

    /// A connector searching [`DocumentIndex::sample`].
    pub fn sample() -> Self {
        Self::new(DocumentIndex::sample())
    }
}

/// Lower-cased words of `text` (runs of letters and digits).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The hit for `document`, if it contains every one of `terms`.
fn score(document: &Document, terms: &BTreeSet<String>) -> Option<SearchHit> {
    let title: Vec<String> = words(&document.title).collect();
    let body: Vec<String> = words(&document.body).collect();
    let mut total = 0_u32;
    for term in terms {
        let in_title = title.iter().filter(|w| *w == term).count() as u32;
        let in_body = body.iter().filter(|w| *w == term).count() as u32;
        if in_title + in_body == 0 {
            return None;
        }
        total += 2 * in_title + in_body;
    }
    let snippet = document
        .body
        .split_inclusive(". ")
        .find(|sentence| words(sentence).any(|w| terms.contains(&w)))
        .map(|sentence| sentence.trim().to_owned());
    Some(SearchHit {
        document_id: document.document_id.clone(),
        title: document.title.clone(),
        score: total,
        snippet,
    })
}

fn cancelled() -> ConnectorFailure {
    ConnectorFailure::new(
        "search.cancelled",
        "the search was cancelled",
        ErrorCategory::Permanent,
        ConnectorOperation::Cancellation,
        CONNECTOR_ID,
    )
}

#[connector(id = "search", name = "Document search")]
impl Search {
    /// Search the documents.
    ///
    /// Streams one chunk per matching document, in index order, as the scan finds it, up to
    /// `limit`; the result summarises the scan. Cancellable; a slow consumer slows the scan
    /// down instead of filling memory.
    #[capability(
        id = "cap:search:documents",
        name = "Search documents",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        tags = ["search"],
        examples = [r#"{"query": "service", "limit": 40}"#, r#"{"query": "incident payments"}"#],
    )]
    async fn search_documents(
        &self,
        input: SearchQuery,
        hits: StreamSink<SearchHit>,
        cancel: Cancellation,
    ) -> Result<SearchSummary, ConnectorFailure> {
        let terms: BTreeSet<String> = words(&input.query).collect();
        if terms.is_empty() {
            return Err(ConnectorFailure::permanent(
                "search.query_empty",
                "the query contains no letters or digits",
                CONNECTOR_ID,
            ));
        }
        let mut summary = SearchSummary {
            hits: 0,
            documents_scanned: 0,
            complete: false,
        };
        for (position, document) in self.index.documents().iter().enumerate() {
            if summary.hits >= input.limit {
                return Ok(summary);
            }
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            if position % PAGE_SIZE == 0
                && let Some(backend) = &self.backend
            {
                let _: serde_json::Value = backend
                    .get(&format!("/index/pages/{}", position / PAGE_SIZE))
                    .cancellation(&cancel)
                    .send_json()
                    .await?;
            }
            summary.documents_scanned += 1;
            let Some(hit) = score(document, &terms) else {
                continue;
            };
            // Back-pressure: `send` waits while the host's buffer is full. Cancellation wins
            // over a wait that may never end (a consumer that stopped reading).
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(cancelled()),
                sent = hits.send(hit) => sent?,
            }
            summary.hits += 1;
        }
        summary.complete = true;
        Ok(summary)
    }

    /// Fetch one document by id.
    #[capability(
        id = "cap:search:document:get",
        name = "Get document",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        tags = ["search"],
        examples = [r#"{"document_id": "doc-007"}"#],
    )]
    async fn get_document(&self, input: DocumentRef) -> Result<Document, ConnectorFailure> {
        if let Some(backend) = &self.backend {
            let _: serde_json::Value = backend
                .get(&format!("/documents/{}", path_segment(&input.document_id)))
                .send_json()
                .await?;
        }
        self.index.get(&input.document_id).cloned().ok_or_else(|| {
            ConnectorFailure::permanent(
                "search.document_not_found",
                "no document has this id",
                CONNECTOR_ID,
            )
        })
    }
}
