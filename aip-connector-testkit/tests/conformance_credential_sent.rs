//! `credential_sent`: a handler handed the deployment's credential must send it to its provider.
//! An author trial's handler took `Credential`, never sent it, and passed the whole suite (the
//! double answered without asking for it); its identity check now fails. A connector that signs
//! its requests with the credential (a credential header without the secret itself) passes, with
//! a note, and so does one that sends it in HTTP Basic authentication. A capability whose
//! credential is optional cannot take one, and is not asserted on.

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::{ConformanceReport, ConformanceSuite, Scenario};
use serde_json::Value;

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    /// The invoice to read.
    id: String,
}

#[derive(Serialize, JsonSchema)]
struct Invoice {
    id: String,
}

/// How [`Invoices`] authenticates its provider requests.
#[derive(Clone, Copy)]
enum Auth {
    /// It sends nothing: the mistake.
    Nothing,
    /// `Authorization: Basic base64(api:<secret>)`.
    Basic,
    /// A signature computed with the secret, never the secret itself.
    Signed,
}

#[derive(Clone)]
struct Invoices {
    client: ProviderClient,
    auth: Auth,
}

#[connector(id = "invoices")]
impl Invoices {
    /// Read an invoice.
    #[capability(
        id = "cap:invoices:get",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["invoices:read"]),
        examples = [r#"{"id": "inv-1"}"#],
    )]
    async fn get(
        &self,
        lookup: Lookup,
        credential: Credential,
    ) -> Result<Invoice, ConnectorFailure> {
        let request = self.client.get(&format!("/invoices/{}", lookup.id));
        let request = match self.auth {
            Auth::Nothing => request,
            Auth::Basic => {
                use base64::Engine as _;
                let secret = credential.secret().expose_str().unwrap_or_default();
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(format!("api:{secret}"));
                request.header("authorization", format!("Basic {encoded}"))
            }
            Auth::Signed => {
                let length = credential.secret().expose_bytes().len();
                request.header("authorization", format!("Signature keyLength={length}"))
            }
        };
        let _: Value = request.send_json().await?;
        Ok(Invoice { id: lookup.id })
    }

    /// List invoices; a credential is optional, so the handler cannot take one, and sends
    /// none: `credential_sent` is not asserted on it.
    #[capability(
        id = "cap:invoices:list",
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(optional, scopes = ["invoices:read"]),
        examples = [r#"{"id": "inv-1"}"#],
    )]
    async fn list(&self, lookup: Lookup) -> Result<Invoice, ConnectorFailure> {
        let _: Value = self
            .client
            .get(&format!("/invoices/{}", lookup.id))
            .send_json()
            .await?;
        Ok(Invoice { id: lookup.id })
    }
}

fn run(auth: Auth) -> ConformanceReport {
    let report = ConformanceSuite::new(move |env| Invoices {
        client: ProviderClient::new(env.provider_url()).expect("the double's URL is valid"),
        auth,
    })
    .run();
    eprintln!("{report}");
    report
}

#[test]
fn a_handler_that_never_sends_its_credential_fails_the_identity_check() {
    let report = run(Auth::Nothing);
    let check = report
        .check(&Scenario::IdentityCredentials.check_name())
        .expect("the identity check");
    assert_eq!(
        check.assertions.get("credential_sent"),
        Some(&false),
        "{report}"
    );
    assert!(
        check.detail.contains(
            "`cap:invoices:get` takes a credential, but none of the 1 provider request(s) of its call carried it"
        ) && check.detail.contains(".bearer_auth(credential.secret())")
            && !check.detail.contains("`cap:invoices:list` takes a credential"),
        "{}",
        check.detail
    );
    assert!(!report.passed());
}

#[test]
fn a_handler_that_sends_its_credential_in_basic_authentication_passes() {
    let report = run(Auth::Basic);
    let check = report
        .check(&Scenario::IdentityCredentials.check_name())
        .expect("the identity check");
    assert_eq!(
        check.assertions.get("credential_sent"),
        Some(&true),
        "{report}"
    );
    assert!(report.passed(), "{report}");
}

#[test]
fn a_handler_that_signs_with_its_credential_passes_with_a_note() {
    let report = run(Auth::Signed);
    let check = report
        .check(&Scenario::IdentityCredentials.check_name())
        .expect("the identity check");
    assert_eq!(check.assertions.get("credential_sent"), None, "{report}");
    assert!(
        check.detail.contains(
            "`cap:invoices:get`'s provider requests carried `authorization` but not the credential the host resolved"
        ),
        "{}",
        check.detail
    );
    assert!(report.passed(), "{report}");
}

/// The manifest's metadata extension holds what a capability declared: examples without tags
/// publish no empty `tags` (a porting trial read `"tags": []` as a declaration).
#[test]
fn the_metadata_extension_leaves_out_what_was_not_declared() {
    use aip_connector::Connector as _;
    let connector = Invoices {
        client: ProviderClient::new("http://127.0.0.1:9").expect("a valid URL"),
        auth: Auth::Nothing,
    };
    let manifest = connector.definition().manifest();
    let entry = &manifest
        .extensions
        .as_ref()
        .expect("the metadata extension")["aip_connector"]["capabilities"]["cap:invoices:get"];
    assert_eq!(entry["examples"], serde_json::json!([{ "id": "inv-1" }]));
    assert!(entry.get("tags").is_none(), "{entry}");
}
