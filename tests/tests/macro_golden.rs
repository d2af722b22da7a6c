//! The seed's example capability, declared with `#[capability]`, produces the seed's contract.

use aip_connector::admission::{AdmissionPolicy, admit_manifest};
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct CreateBooking {
    starts_at: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Booking {
    booking_id: String,
}

struct Calendar;

#[connector(id = "calendar", profiles = ["aip.native.http.v1"])]
impl Calendar {
    /// Create a booking.
    #[capability(
        id = "cap:calendar:booking:create",
        name = "Create booking",
        risk = medium,
        stability = stable,
        side_effects = [write, external_network],
        idempotency(required, collision = revalidate_input_hash, scope = tenant, ttl_ms = 86_400_000),
        execution(sync, retry_safety = safe_with_idempotency_key),
        data(sensitivity = internal, pii, redaction),
    )]
    async fn create_booking(
        &self,
        input: CreateBooking,
        key: IdempotencyKey,
    ) -> Result<Booking, ConnectorFailure> {
        Ok(Booking {
            booking_id: format!("bk-{}-{}", input.starts_at, key.as_str()),
        })
    }
}

#[test]
fn seed_capability_contract_matches_the_seed() {
    let definition = Calendar.definition();
    let capability = &definition.capabilities[0].capability;
    let seed = aip_connector_testkit::fixtures::seed_booking_capability_json();
    assert_eq!(
        serde_json::to_value(capability.contract.as_ref().unwrap()).unwrap(),
        seed["contract"]
    );
    for key in ["id", "name", "kind", "risk", "stability"] {
        assert_eq!(
            serde_json::to_value(capability).unwrap()[key],
            seed[key],
            "{key}"
        );
    }
}

#[test]
fn generated_manifest_passes_strict_admission() {
    let definition = Calendar.definition();
    let admitted = admit_manifest(
        &definition.manifest(),
        &AdmissionPolicy::strict(),
        &definition.implementation_support(),
    );
    assert!(admitted.is_ok(), "{}", admitted.err().unwrap());
}

#[test]
fn generated_manifest_validates_against_the_upstream_schema() {
    let Some(schema) = aip_connector_tests::upstream_schema("manifest.schema.json") else {
        return;
    };
    let manifest = serde_json::to_value(Calendar.definition().manifest()).unwrap();
    aip_connector_tests::assert_valid_against(&schema, &manifest);
}
