//! `use aip_connector::*;` leaves the standard library's crate names alone: a connector module
//! that glob-imports the facade still names `core::` and `std::` as the language does. (The
//! facade re-exported its core crate as `core`, which made every `core::` path ambiguous.)

#![allow(unused_imports)]

use aip_connector::*;

#[test]
fn a_glob_import_of_the_facade_keeps_core_and_std_unambiguous() {
    let size = core::mem::size_of::<u64>();
    let max = std::cmp::max(size, 1);
    assert_eq!(max, 8);
    // The core crate stays reachable under its own name.
    let _ = aip_connector_core::schema::SchemaLimits::default();
}
