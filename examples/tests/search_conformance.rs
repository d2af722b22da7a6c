//! The testkit's conformance suite on the streaming search example (it calls no provider, so
//! the scenario's provider double goes unused).

use aip_connector_examples::search::Search;

aip_connector_testkit::conformance_tests!(|_env| Search::sample());
