//! [`PostgresStore`] over TLS (`sslmode=require`): the server's certificate is verified, its
//! chain against the roots given (or Mozilla's) and its name against the URL's host, and the
//! store works over the verified connections.
//!
//! Needs the throwaway server of `.ci/postgres-tls`, which accepts TLS connections only:
//! `AIP_TEST_POSTGRES_TLS_URL` names it (host `localhost`, `sslmode=require`) and
//! `AIP_TEST_POSTGRES_TLS_CA` is the PEM file of the CA that signed its certificate. `.ci/run`
//! starts it and sets both. Without them every test says it was skipped and passes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::store::{PostgresOptions, PostgresStore, SharedStore, StoreError};

/// The variable naming the TLS-only test server.
const URL_VARIABLE: &str = "AIP_TEST_POSTGRES_TLS_URL";

/// The variable naming the PEM file of the CA that signed the server's certificate.
const CA_VARIABLE: &str = "AIP_TEST_POSTGRES_TLS_CA";

/// The TLS test server's URL and its CA's PEM, or `None` (after saying so) without them.
fn server() -> Option<(String, Vec<u8>)> {
    let (Some(url), Some(ca_path)) = (
        std::env::var(URL_VARIABLE).ok().filter(|v| !v.is_empty()),
        std::env::var(CA_VARIABLE).ok().filter(|v| !v.is_empty()),
    ) else {
        println!(
            "skipped: {URL_VARIABLE} and {CA_VARIABLE} are not set (.ci/run starts a TLS-only \
             server with .ci/postgres-tls and sets them)"
        );
        return None;
    };
    let ca = std::fs::read(&ca_path).unwrap_or_else(|error| panic!("read {ca_path}: {error}"));
    Some((url, ca))
}

/// A schema name no other test uses.
fn fresh_schema() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "aip_tls_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `url` with its host replaced by `host`.
fn with_host(url: &str, host: &str) -> String {
    assert!(
        url.contains("@localhost:"),
        "{URL_VARIABLE} names localhost: {url}"
    );
    url.replace("@localhost:", &format!("@{host}:"))
}

/// Runs `check` on a store whose connections are verified against the test CA, in a schema of
/// its own, then drops the schema over TLS too.
async fn on_tls_schema<F, Fut>(check: F)
where
    F: FnOnce(SharedStore) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some((url, ca)) = server() else {
        return;
    };
    let options = PostgresOptions::new()
        .schema(fresh_schema())
        .max_connections(8)
        .tls_root_certificates(ca);
    let store = PostgresStore::connect_with(&url, options.clone())
        .await
        .expect("connect over TLS, verified against the test CA");
    check(Arc::new(store)).await;
    PostgresStore::drop_schema_with(&url, options)
        .await
        .expect("drop the schema over TLS");
}

/// Store conformance checks over TLS, one test each: records, approvals, transactions, and a
/// thousand concurrent callers sharing the pool's TLS connections.
macro_rules! over_tls {
    ($($check:ident),+ $(,)?) => {
        mod over_tls {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    super::on_tls_schema(aip_connector_testkit::store_conformance::$check).await;
                }
            )+
        }
    };
}

over_tls!(
    check_settled_record_is_replayed,
    check_approval_insert_get_and_versioned_update,
    check_transition_applies_and_bumps_revision,
    check_thousand_concurrent_reserves_on_one_key,
);

/// The control that makes the test above mean something: the server refuses a connection
/// without TLS, so a store that connected at all connected over TLS.
#[tokio::test]
async fn the_test_server_refuses_connections_without_tls() {
    let Some((url, _)) = server() else {
        return;
    };
    let plain = url.replace("sslmode=require", "sslmode=disable");
    let error = PostgresStore::connect(&plain)
        .await
        .expect_err("the TLS-only server refuses a plain connection");
    assert!(
        matches!(&error, StoreError::Unavailable(m) if m.contains("28000") && m.contains("sslmode=require")),
        "{error:?}"
    );
}

/// What a libpq user writes, `sslmode=verify-full&sslrootcert=<file>`, works as
/// `sslmode=require` with the file's roots; `sslrootcert=system` is Mozilla's roots.
#[tokio::test]
async fn libpq_verify_full_and_sslrootcert_are_understood() {
    let Some((url, _)) = server() else {
        return;
    };
    let ca_path = std::env::var(CA_VARIABLE).expect("set with the URL");
    let schema = fresh_schema();
    let libpq_url = format!(
        "{}&sslrootcert={}",
        url.replace("sslmode=require", "sslmode=verify-full"),
        ca_path.replace('/', "%2F")
    );
    PostgresStore::connect_with_schema(&libpq_url, &schema)
        .await
        .expect("verify-full against the sslrootcert file");
    PostgresStore::drop_schema(&libpq_url, &schema)
        .await
        .expect("drop the schema");
    let system = PostgresStore::connect(&format!("{url}&sslrootcert=system"))
        .await
        .expect_err("the test CA is not one of Mozilla's roots");
    assert!(
        matches!(&system, StoreError::Unavailable(m) if m.contains("UnknownIssuer")),
        "{system:?}"
    );
}

#[tokio::test]
async fn mozillas_roots_do_not_trust_a_private_ca() {
    let Some((url, _)) = server() else {
        return;
    };
    let error = PostgresStore::connect(&url)
        .await
        .expect_err("the test CA is not one of Mozilla's roots");
    assert!(
        matches!(&error, StoreError::Unavailable(m) if m.contains("UnknownIssuer") && m.contains("tls_root_certificates")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_host_the_certificate_does_not_name_is_refused() {
    let Some((url, ca)) = server() else {
        return;
    };
    // The server listens on 127.0.0.2 too; its certificate names localhost and 127.0.0.1.
    let error = PostgresStore::connect_with(
        &with_host(&url, "127.0.0.2"),
        PostgresOptions::new().tls_root_certificates(ca),
    )
    .await
    .expect_err("the certificate does not name 127.0.0.2");
    assert!(
        matches!(&error, StoreError::Unavailable(m) if m.contains("not valid for name") && m.contains("certificate lists")),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_ip_address_the_certificate_names_is_accepted() {
    let Some((url, ca)) = server() else {
        return;
    };
    let options = PostgresOptions::new()
        .schema(fresh_schema())
        .tls_root_certificates(ca);
    let ip_url = with_host(&url, "127.0.0.1");
    PostgresStore::connect_with(&ip_url, options.clone())
        .await
        .expect("the certificate names 127.0.0.1");
    PostgresStore::drop_schema_with(&ip_url, options)
        .await
        .expect("drop the schema");
}
