//! Helpers shared by the workspace-level integration tests.
//!
//! The upstream JSON Schemas are BUSL-licensed and never copied into this repository: the
//! wire-compatibility tests read them from the folder named by `AIP_UPSTREAM_SCHEMAS` (CI sets
//! it), and skip with a message when the variable is unset.

pub mod hooked_store;
pub mod raw_http;
// The store conformance suite moved to the testkit (published for stores of one's own); the old
// path stays for the tests that import it.
pub use aip_connector_testkit::store_conformance;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::store::{SharedStore, SqliteStore};

use serde_json::{Value, json};

/// Sets its flag when dropped: a test holds one in a handler's future to see that the host
/// dropped the future rather than leaving it running.
pub struct DropFlag(pub Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Environment variable naming the folder that holds upstream's `*.schema.json` files.
pub const UPSTREAM_SCHEMAS_VAR: &str = "AIP_UPSTREAM_SCHEMAS";

/// The JSON Schema dialect every upstream schema declares.
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Reads and parses `$AIP_UPSTREAM_SCHEMAS/<file_name>`.
///
/// Returns `None` (after printing why) when the variable is unset, so a local run without the
/// schemas skips the check. Panics when the variable is set but the file is missing or is not
/// JSON: in CI the check must fail loudly rather than pass by skipping. A relative folder is
/// resolved against the workspace root, not the test's working directory.
pub fn upstream_schema(file_name: &str) -> Option<Value> {
    let Some(folder) = std::env::var_os(UPSTREAM_SCHEMAS_VAR) else {
        eprintln!(
            "skipped: AIP_UPSTREAM_SCHEMAS is not set, so the upstream wire-compatibility check did \
             not run (CI sets it to ../shared/upstream-schemas)"
        );
        return None;
    };
    let path = workspace_relative(Path::new(&folder)).join(file_name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "{UPSTREAM_SCHEMAS_VAR} is set but the upstream schema {} cannot be read: {error}",
            path.display()
        )
    });
    let schema = serde_json::from_str(&text).unwrap_or_else(|error| {
        panic!(
            "{UPSTREAM_SCHEMAS_VAR} is set but the upstream schema {} is not valid JSON: {error}",
            path.display()
        )
    });
    Some(schema)
}

/// `folder` itself when absolute, otherwise `folder` under the workspace root, because cargo
/// runs each test binary from its package folder rather than from where `cargo test` was typed.
fn workspace_relative(folder: &Path) -> PathBuf {
    if folder.is_absolute() {
        return folder.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")))
        .join(folder)
}

/// A standalone schema for one `$defs` entry of an upstream schema, e.g. `Capability` out of
/// `manifest.schema.json`: a root `$ref` to the definition, carrying every definition along so
/// that its internal `#/$defs/...` references still resolve.
///
/// Panics when `schema` has no `$defs/<definition>`, since that means the upstream file is not
/// the one the test expects.
pub fn schema_definition(schema: &Value, definition: &str) -> Value {
    let definitions = schema.get("$defs").cloned().unwrap_or_default();
    assert!(
        definitions.get(definition).is_some(),
        "the upstream schema {} has no $defs/{definition}",
        schema
            .get("$id")
            .and_then(Value::as_str)
            .unwrap_or("(without $id)")
    );
    json!({
        "$schema": DRAFT_2020_12,
        "$ref": format!("#/$defs/{definition}"),
        "$defs": definitions,
    })
}

/// Validates `instance` against `schema` with the Draft 2020-12 compiler, as upstream's runtime
/// does, and panics listing every violation with its instance path (and the schema keyword that
/// failed) when it is not valid.
pub fn assert_valid_against(schema: &Value, instance: &Value) {
    let validator = jsonschema::draft202012::new(schema)
        .unwrap_or_else(|error| panic!("the schema does not compile as Draft 2020-12: {error}"));
    let violations: Vec<String> = validator
        .iter_errors(instance)
        .map(|error| {
            let instance_path = error.instance_path().as_str();
            format!(
                "  at `{}` (schema {}): {error}",
                if instance_path.is_empty() {
                    "/"
                } else {
                    instance_path
                },
                error.schema_path().as_str()
            )
        })
        .collect();
    assert!(
        violations.is_empty(),
        "instance is not valid against the schema ({} violation(s)):\n{}\ninstance: {}",
        violations.len(),
        violations.join("\n"),
        serde_json::to_string_pretty(instance).unwrap_or_else(|_| instance.to_string())
    );
}

/// A SQLite store file in the temp dir, removed (with its WAL and shared-memory files) on drop.
pub struct TempStoreFile(PathBuf);

impl TempStoreFile {
    /// A fresh path, unique in this process; `name` says which test it belongs to.
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!(
            "aip-store-test-{}-{unique}-{name}.db",
            std::process::id()
        )))
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path of the file SQLite keeps beside the database, e.g. `-wal`.
    pub fn sibling(&self, suffix: &str) -> PathBuf {
        let mut path = self.0.clone().into_os_string();
        path.push(suffix);
        PathBuf::from(path)
    }

    /// Opens (creating on first use) a store on the file.
    pub fn open(&self) -> SharedStore {
        Arc::new(SqliteStore::open(&self.0).expect("open the SQLite store"))
    }
}

impl Drop for TempStoreFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(self.sibling(suffix));
        }
    }
}

/// An approval authority that resolves each principal id through `resolve`: the id a directory
/// knows the principal by, or `None` for one it does not know. Those it knows get `memberships`
/// under their resolved id (`ApproverMemberships::with_principal_id`). For tests of directories
/// that match ids loosely (ignoring case, following aliases).
pub struct Directory<F> {
    resolve: F,
    memberships: aip_connector::host::ApproverMemberships,
}

impl<F> Directory<F>
where
    F: Fn(&str) -> Option<String> + Send + Sync,
{
    /// A directory of `resolve`, vouching for every principal it knows with `memberships`.
    pub fn new(memberships: aip_connector::host::ApproverMemberships, resolve: F) -> Self {
        Self {
            resolve,
            memberships,
        }
    }
}

impl<F> aip_connector::host::ApprovalAuthority for Directory<F>
where
    F: Fn(&str) -> Option<String> + Send + Sync,
{
    fn memberships<'a>(
        &'a self,
        approver: &'a aip_connector::ids::PrincipalId,
        _tenant: Option<&'a str>,
    ) -> aip_connector::invocation::BoxFuture<
        'a,
        Result<aip_connector::host::ApproverMemberships, aip_connector::model::ConnectorFailure>,
    > {
        let memberships = (self.resolve)(approver.as_str()).map_or_else(Default::default, |id| {
            self.memberships.clone().with_principal_id(id)
        });
        Box::pin(std::future::ready(Ok(memberships)))
    }
}

/// Sends `GET base + path` for each `(path, status, code)` and asserts the answer is an AIP error
/// envelope with that HTTP status and error code: what a server answers for a path nothing
/// routes, or a route asked with a method it does not serve.
pub async fn assert_get_refused_with_envelopes(base: &str, cases: &[(&str, u16, &str)]) {
    let http = reqwest::Client::new();
    for (path, status, code) in cases {
        let response = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(response.status().as_u16(), *status, "GET {path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["message_type"], "aip.core.v1.error", "{body}");
        assert_eq!(body["body"]["error"]["error"]["code"], *code, "{body}");
    }
}
