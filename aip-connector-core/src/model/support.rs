//! `CapabilityImplementationSupport` (`aip-model.md` §7.1).

use serde::{Deserialize, Serialize};

/// What the implementation behind one capability actually supports.
///
/// All nine fields are required on input (no serde defaults), as upstream. In this SDK the record
/// is computed from a handler's signature by `#[capability]`, never typed by hand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CapabilityImplementationSupport {
    /// Normal invocation is implemented.
    pub invocation: bool,
    /// Runtime cancellation reaches the downstream operation.
    pub cancellation: bool,
    /// Incremental streaming is implemented.
    pub streaming: bool,
    /// Retry classification and downstream idempotency are implemented.
    pub retry: bool,
    /// Transaction plan and commit operations are implemented.
    pub transaction: bool,
    /// Reconciliation after uncertain outcomes is implemented.
    pub reconciliation: bool,
    /// Compensation is implemented as a governed action.
    pub compensation: bool,
    /// Approval evidence and resume behaviour are implemented.
    pub approval: bool,
    /// Credential handles are resolved through a deployment provider.
    pub credentials: bool,
}

impl CapabilityImplementationSupport {
    /// Invocation only: what a plain handler supports.
    pub const INVOCATION_ONLY: Self = Self {
        invocation: true,
        cancellation: false,
        streaming: false,
        retry: false,
        transaction: false,
        reconciliation: false,
        compensation: false,
        approval: false,
        credentials: false,
    };

    /// Every flag with its wire name, in declaration order.
    pub fn flags(&self) -> [(&'static str, bool); 9] {
        [
            ("invocation", self.invocation),
            ("cancellation", self.cancellation),
            ("streaming", self.streaming),
            ("retry", self.retry),
            ("transaction", self.transaction),
            ("reconciliation", self.reconciliation),
            ("compensation", self.compensation),
            ("approval", self.approval),
            ("credentials", self.credentials),
        ]
    }
}
