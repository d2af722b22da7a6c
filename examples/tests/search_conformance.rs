//! The testkit's conformance suite on the streaming search example, backed by the scenario's
//! provider double (so provider faults and slow responses reach it).

use aip_connector_examples::loopback_client;
use aip_connector_examples::search::Search;

aip_connector_testkit::conformance_tests!(|env| {
    Search::sample().with_backend(
        loopback_client(env.provider_url(), "search").expect("the double's URL is valid"),
    )
});
