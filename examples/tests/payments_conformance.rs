//! The testkit's conformance suite on the payments example: one test per check, each scenario
//! against a fresh provider double that the connector's `ProviderClient` points at.

use aip_connector_examples::loopback_client;
use aip_connector_examples::payments::Payments;

aip_connector_testkit::conformance_tests!(|env| Payments::new(
    loopback_client(env.provider_url(), "payments").expect("the provider double's URL is valid")
));
