//! The testkit's conformance suite on the notes example, a connector of free functions: each
//! scenario builds it with a client for its own provider double, as the connector's state.
//! (Written in the `suite =` form without importing `ConformanceSuite`: the macro brings it.)

use aip_connector_examples::{loopback_client, notes};

aip_connector_testkit::conformance_tests!(
    suite = ConformanceSuite::new(|env| notes::connector(
        loopback_client(env.provider_url(), "notes").expect("the provider double's URL is valid")
    )
    .expect("the notes capabilities have distinct ids"))
);
