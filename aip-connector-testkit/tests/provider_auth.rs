//! A connector whose handler forgets its credential, run through the test host against a
//! provider double that requires it (an author trial's F10: the double answered any request, so
//! a handler that never sent `bearer_auth(credential.secret())` passed every test).

use aip_connector::codes;
use aip_connector::model::Action;
use aip_connector::prelude::*;
use aip_connector_testkit::provider_double::ProviderDouble;
use aip_connector_testkit::{TEST_CREDENTIAL_SECRET, TestHost, assert_completed, assert_failed};
use serde_json::{Value, json};

#[derive(Deserialize, Serialize, JsonSchema)]
struct Ticket {
    /// The ticket's title.
    title: String,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Opened {
    /// The provider's operation id for the new ticket.
    operation_id: String,
}

struct Tickets {
    api: ProviderClient,
}

#[connector(id = "tickets")]
impl Tickets {
    /// Opens a ticket, authenticating with the deployment's credential.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        credentials(required, scopes = ["tickets.write"]),
    )]
    async fn open(
        &self,
        ticket: Ticket,
        key: IdempotencyKey,
        credential: Credential,
    ) -> Result<Opened, ConnectorFailure> {
        self.api
            .post("/tickets")
            .bearer_auth(credential.secret())
            .idempotency(&key)
            .json(&ticket)
            .send_json()
            .await
    }

    /// Opens a ticket, but forgets to send the credential it is handed.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        credentials(required, scopes = ["tickets.write"]),
    )]
    async fn open_forgetful(
        &self,
        ticket: Ticket,
        key: IdempotencyKey,
        _credential: Credential,
    ) -> Result<Opened, ConnectorFailure> {
        self.api
            .post("/tickets")
            .idempotency(&key)
            .json(&ticket)
            .send_json()
            .await
    }
}

async fn host_against(double: &ProviderDouble) -> TestHost {
    let api = ProviderClient::builder(double.base_url())
        .proxy_from_environment(false)
        .build()
        .expect("the double's URL is valid");
    TestHost::builder(Tickets { api })
        .credential(["tickets.write"])
        .build()
        .expect("the host takes the connector")
}

fn open(capability: &str, key: &str) -> Action {
    Action::new(capability, json!({ "title": "Printer on fire" })).with_idempotency_key(key)
}

#[tokio::test]
async fn a_handler_that_forgets_its_credential_fails_against_a_double_that_requires_it() {
    // Without a requirement the double answers anyone: the forgetful handler passes unseen.
    let (lenient, lenient_provider) = ProviderDouble::start().await;
    let test = host_against(&lenient).await;
    let _: Value = assert_completed!(
        test.invoke("user:ada", open("cap:tickets:open_forgetful", "k0"))
            .await
    );
    assert_eq!(lenient_provider.effect_total(), 1);

    // Requiring the test host's credential, the double refuses it like a real provider.
    let (double, provider) = ProviderDouble::start().await;
    provider.require_bearer(TEST_CREDENTIAL_SECRET);
    let test = host_against(&double).await;

    let forgot = test
        .invoke("user:ada", open("cap:tickets:open_forgetful", "k1"))
        .await;
    let error = assert_failed!(forgot, codes::PROVIDER_UNAUTHORIZED);
    assert!(!format!("{error:?}").contains(TEST_CREDENTIAL_SECRET));
    assert_eq!(
        provider.effect_total(),
        0,
        "the refused write committed nothing"
    );
    let refused = provider.unauthorized_requests();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].path, "/tickets");
    assert_eq!(refused[0].header("authorization"), None);

    let opened: Opened = assert_completed!(
        test.invoke("user:ada", open("cap:tickets:open", "k2"))
            .await
    );
    assert_eq!(provider.effect_total(), 1);
    assert_eq!(provider.effects()[0].operation_id, opened.operation_id);
    let sent = provider.requests().pop().unwrap();
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {TEST_CREDENTIAL_SECRET}").as_str())
    );
    assert_eq!(provider.unauthorized_requests().len(), 1);
}
