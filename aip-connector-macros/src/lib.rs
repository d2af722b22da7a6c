//! Procedural macros of [`aip-connector`](https://docs.rs/aip-connector): `#[capability]` and
//! `#[connector]`.
//!
//! Use them through the facade crate (`aip_connector::prelude::*`); generated code refers only to
//! `::aip_connector::__private`, so this crate is never named directly by connector authors.
