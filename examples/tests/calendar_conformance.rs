//! The testkit's conformance suite on the calendar example: one test per check, each scenario
//! against a fresh provider double that the connector's `ProviderClient` points at.

use aip_connector_examples::calendar::Calendar;
use aip_connector_examples::loopback_client;

aip_connector_testkit::conformance_tests!(|env| Calendar::new(
    loopback_client(env.provider_url(), "calendar").expect("the provider double's URL is valid")
));
