//! # aip-connector
//!
//! Write connectors for AIP (the Agent Interoperability Protocol) as annotated async functions.
//!
//! This facade re-exports the wire model, the contract rules and manifest admission of
//! [`aip_connector_core`]; the `#[capability]`/`#[connector]` attributes, the host runtime, the
//! stores and the provider client build on them.

pub use aip_connector_core as core;
pub use aip_connector_core::{ids, model};

/// Everything a connector author usually needs, in one import.
pub mod prelude {
    pub use aip_connector_core::ids::*;
    pub use aip_connector_core::model::*;
}
