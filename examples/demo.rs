//! The main demo: a calendar connector declared with `#[capability]`, admitted strictly, called
//! through the generated dispatch, and a hand-built manifest that admission refuses.
//!
//! Run it with `cargo run -p aip-connector-examples --example demo`.

use std::sync::Arc;

use aip_connector::admission::{AdmissionPolicy, admit_manifest};
use aip_connector::model::{
    Action, Capability, CapabilityKind, Manifest, Principal, PrincipalKind,
};
use aip_connector::prelude::*;
use aip_connector::{CallerIdentity, InvocationContext, StaticInvocation};
use aip_connector_testkit::fixtures;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct CreateBooking {
    /// RFC 3339 start time.
    starts_at: String,
    /// Attendee e-mail.
    attendee: String,
}

#[derive(Serialize, JsonSchema)]
struct Booking {
    booking_id: String,
}

#[derive(Deserialize, JsonSchema)]
struct FindSlots {
    day: String,
}

#[derive(Serialize, JsonSchema)]
struct Slots {
    free: Vec<String>,
}

struct Calendar;

#[connector(id = "calendar", profiles = ["aip.native.http.v1", "aip.mcp.compat.v1"])]
impl Calendar {
    /// Create a booking for one attendee.
    #[capability(
        id = "cap:calendar:booking:create",
        risk = medium,
        side_effects = [write, external_network],
        idempotency(required, collision = revalidate_input_hash, scope = tenant),
        data(sensitivity = internal, pii),
        bindings(mcp(tool_name = "create_booking")),
        examples = [r#"{"starts_at": "2026-12-01T09:00:00Z", "attendee": "ada@example.com"}"#],
    )]
    async fn create_booking(
        &self,
        input: CreateBooking,
        key: IdempotencyKey,
    ) -> Result<Booking, ConnectorFailure> {
        Ok(Booking {
            booking_id: format!(
                "bk_{}_{}",
                input.starts_at.len() + input.attendee.len(),
                key.as_str()
            ),
        })
    }

    /// List free slots of a day.
    #[capability(risk = low, side_effects = [read], data(sensitivity = internal), execution(sync, cancel))]
    async fn find_slots(
        &self,
        input: FindSlots,
        cancel: Cancellation,
    ) -> Result<Slots, ConnectorFailure> {
        let free = if cancel.is_cancelled() {
            Vec::new()
        } else {
            vec![
                format!("{}T09:00", input.day),
                format!("{}T14:00", input.day),
            ]
        };
        Ok(Slots { free })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let definition = Calendar.definition();
    let manifest = definition.manifest();

    println!(
        "== Connector `{}`: {} capabilities, profiles {:?}",
        definition.id,
        manifest.capabilities.len(),
        manifest
            .profiles
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
    );
    for capability in &definition.capabilities {
        let contract = capability
            .capability
            .contract
            .as_ref()
            .expect("every capability has a contract");
        println!(
            "  {:<30} risk={:?} side_effects={:?} idempotency={:?} retry_safety={:?}",
            capability.id().as_str(),
            capability.capability.risk.expect("risk is required"),
            contract.side_effects,
            contract.idempotency.requirement,
            contract.execution.retry_safety,
        );
        println!(
            "  {:<30} support derived from the signature: {:?}",
            "",
            capability
                .support()
                .flags()
                .iter()
                .filter(|(_, on)| *on)
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
        );
    }

    println!(
        "\n== Strict admission (schemas compiled as Draft 2020-12, every rule, implementation claims required)"
    );
    match admit_manifest(
        &manifest,
        &AdmissionPolicy::strict(),
        &definition.implementation_support(),
    ) {
        Ok(admitted) => {
            println!("  admitted; projected names:");
            for ((profile, name), id) in admitted.projected_names() {
                println!("    {profile:<22} {name:<32} -> {id}");
            }
        }
        Err(report) => println!("  refused: {report}"),
    }

    println!("\n== Calling `cap:calendar:booking:create` through the generated dispatch");
    let action =
        Action::new("cap:calendar:booking:create", json!({})).with_idempotency_key("demo-key-1");
    let context: Arc<dyn InvocationContext> = Arc::new(StaticInvocation::new(
        action,
        CallerIdentity {
            principal_id: "user:ada".into(),
            issuer: "demo".into(),
        },
    ));
    let output = Calendar
        .invoke(
            "cap:calendar:booking:create",
            json!({ "starts_at": "2026-12-01T09:00:00Z", "attendee": "ada@example.com" }),
            context.clone(),
        )
        .await;
    println!(
        "  output: {}",
        json!(output.expect("the booking handler succeeds"))
    );
    let failure = Calendar
        .invoke(
            "cap:calendar:booking:create",
            json!({ "starts_at": 9 }),
            context,
        )
        .await
        .expect_err("a number is not a start time");
    println!("  bad input: {failure}");

    println!("\n== A hand-built manifest that admission refuses (every issue, in manifest order)");
    let mut broken = Manifest::new(
        Principal::new("agent:broken", PrincipalKind::Service),
        ["aip.native.http.v1".into()],
    );
    let mut refund = fixtures::governed_financial_capability(
        "cap:payments:refund",
        "Refund",
        "cap:payments:refund:reverse",
    );
    if let Some(contract) = refund.contract.as_mut() {
        contract.idempotency.ttl_ms = Some(0);
        contract.approval = None;
    }
    broken.capabilities.push(refund);
    broken.capabilities.push(Capability::new("cap:payments:refund", " ", CapabilityKind::Tool, json!({ "type": "object", "properties": { "x": { "$ref": "https://example.com/x.json" } } })));
    match admit_manifest(&broken, &AdmissionPolicy::strict(), &Default::default()) {
        Ok(_) => println!("  unexpectedly admitted"),
        Err(report) => {
            for issue in &report.issues {
                println!("  {:<44} {:<36} {}", issue.code, issue.path, issue.message);
            }
        }
    }
}
