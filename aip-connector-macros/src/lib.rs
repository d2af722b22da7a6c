//! Procedural macros of [`aip-connector`](https://docs.rs/aip-connector): `#[capability]` and
//! `#[connector]`.
//!
//! Use them through the facade crate (`aip_connector::prelude::*`); generated code refers only to
//! `::aip_connector::__private`, so this crate is never named directly by connector authors.
//!
//! Pipeline (one file per stage): `meta` (attribute grammar) → `attr` (typed sections, spans by
//! JSON Pointer) → `signature` (extractors, input, output) → `resolve` (the real `Capability`
//! with defaults) → `valid` (macro rules + the shared `aip_connector_core::rules`) → `expand`.
//! Errors are collected in `ctxt` and reported together; on error the original item is emitted
//! next to them so one mistake gives one diagnostic.

mod attr;
mod capability;
mod connector;
mod ctxt;
mod diagnostics;
mod expand;
mod keys;
mod meta;
mod resolve;
mod signature;
mod valid;

use proc_macro::TokenStream;

/// Declares one capability on an `async fn` handler. See the attribute reference in
/// `docs/attribute-reference.md` of the aip-connector repository for every key and default.
#[proc_macro_attribute]
pub fn capability(args: TokenStream, item: TokenStream) -> TokenStream {
    capability::expand_free(args.into(), item.into()).into()
}

/// Assembles a connector from the `#[capability]` methods of an `impl` block: its manifest, its
/// implementation-support map and dispatch by capability id.
///
/// `id` is required. Left out, `profiles` is `["aip.native.http.v1"]`, a capability's id is
/// `cap:<id>:<fn name>` and the agent id is `agent:<id>`. See `docs/attribute-reference.md`
/// (`#[connector]`) of the aip-connector repository for every key and default.
#[proc_macro_attribute]
pub fn connector(args: TokenStream, item: TokenStream) -> TokenStream {
    connector::expand(args.into(), item.into()).into()
}
