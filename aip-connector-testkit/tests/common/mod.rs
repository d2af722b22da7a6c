//! Fixtures the conformance tests share: a client of a scenario's provider double, and the
//! reconciliation of a connector whose provider is the double's generic API (its
//! `GET /operations/{id}` lookup).
//!
//! Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use aip_connector::prelude::*;
use aip_connector::provider::path_segment;
use serde_json::Value;

/// A client of the scenario's provider double at `url`. The double listens on loopback, so the
/// client ignores any proxy the environment names.
pub(crate) fn double_client(url: &str) -> ProviderClient {
    ProviderClient::builder(url)
        .proxy_from_environment(false)
        .build()
        .expect("the double's URL is valid")
}

/// Asks the double about the checkpointed operation (`GET /operations/{id}`): `committed` is
/// committed, `pending` is pending, any other state (`not_found` included) never committed. The
/// double's answer is the evidence.
pub(crate) async fn look_up_operation(
    client: &ProviderClient,
    request: Reconciliation,
) -> Result<ReconcileOutcome, ConnectorFailure> {
    let path = format!(
        "/operations/{}",
        path_segment(&request.provider_operation.operation_id)
    );
    let answer: Value = client.get(&path).send_json().await?;
    Ok(match answer["state"].as_str() {
        Some("committed") => ReconcileOutcome::Committed {
            evidence: Some(answer),
        },
        Some("pending") => ReconcileOutcome::Pending { cursor: None },
        _ => ReconcileOutcome::NotCommitted {
            evidence: Some(answer),
        },
    })
}
