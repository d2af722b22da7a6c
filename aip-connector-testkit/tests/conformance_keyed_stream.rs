//! A streaming capability that takes an idempotency key passes `collision_rejected`: the suite
//! resends the key streamed, as a client of such a capability must. A warehouse trial's keyed,
//! streamed query failed it, because the colliding calls went through `Host::invoke`, which the
//! mode check refuses (`execution.mode_unsupported`) before the key is looked at.

mod common;

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceSuite, Scenario};
use serde_json::Value;

#[derive(Deserialize, JsonSchema)]
struct Count {
    /// How far to count.
    #[schemars(range(min = 2, max = 10))]
    to: u32,
}

#[derive(Serialize, JsonSchema)]
struct Counted {
    /// How many numbers were sent.
    sent: u32,
}

struct Counter {
    api: ProviderClient,
}

#[connector(id = "counter")]
impl Counter {
    /// Counts, one chunk per number, after asking the provider.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        examples = [r#"{"to": 3}"#, r#"{"to": 4}"#],
    )]
    async fn count(
        &self,
        input: Count,
        key: IdempotencyKey,
        sink: StreamSink<u32>,
    ) -> Result<Counted, ConnectorFailure> {
        let _: Value = self.api.get("/count").idempotency(&key).send_json().await?;
        for n in 0..input.to {
            sink.send(n).await?;
        }
        Ok(Counted { sent: input.to })
    }
}

#[test]
fn a_keyed_streaming_capability_has_its_key_collisions_sent_streamed() {
    let report = ConformanceSuite::new(|env| Counter {
        api: common::double_client(env.provider_url()),
    })
    .run();
    let check = report
        .check(&Scenario::IdempotencyDuplicates.check_name())
        .expect("the idempotency scenario ran");
    assert_eq!(
        check.assertions.get("collision_rejected"),
        Some(&true),
        "{}",
        check.detail
    );
    assert!(report.passed(), "{report}");
}
