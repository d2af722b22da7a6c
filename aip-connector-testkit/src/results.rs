//! Assertions on an [`ActionResult`] that say, when they fail, what the result was instead.
//!
//! A test that gates an action and then writes `pending.approval_id().expect("gated")` panics
//! with its own words only: why the action was not gated (a missing credential scope, a
//! schema violation, a tenant the key scope needed) stays inside the result, and its `Debug`
//! is one long line. These macros panic with the result's status, error code, message and
//! details, at the line of the test that called them (`#[track_caller]`):
//!
//! ```no_run
//! use aip_connector_testkit::{assert_completed, assert_failed, assert_pending_approval};
//! # use aip_connector::model::{Action, ProtocolError};
//! # use aip_connector_testkit::TestHost;
//! # #[derive(serde::Deserialize)]
//! # struct Transfer {
//! #     cents: u64,
//! # }
//! # fn transfer() -> Action {
//! #     Action::new("cap:ledger:transfer", serde_json::json!({ "cents": 250_000 }))
//! # }
//! # fn overdrawn() -> Action {
//! #     Action::new("cap:ledger:transfer", serde_json::json!({ "cents": 999_999_999 }))
//! # }
//! # async fn demo(test: TestHost) -> Result<(), ProtocolError> {
//!
//! let approval_id = assert_pending_approval!(test.invoke("user:ada", transfer()).await);
//! test.approve(&approval_id, "user:cfo").await?;
//! let posted: Transfer = assert_completed!(test.resume(&approval_id, "user:ada").await);
//! let refused = test.invoke("user:ada", overdrawn()).await;
//! let error = assert_failed!(refused, "ledger.insufficient_funds");
//! assert_eq!(error.retryable, Some(false));
//! # Ok(())
//! # }
//! ```
//!
//! Each takes an optional message after the result, `format!`-style, printed first.

use std::fmt::Write as _;

use aip_connector::ids::ApprovalId;
use aip_connector::model::{ActionResult, ActionResultStatus, ProtocolError};
use serde::de::DeserializeOwned;

/// Asserts that a result is `pending_approval` and evaluates to the [`ApprovalId`] it waits for.
///
/// ```no_run
/// # use aip_connector::model::ActionResult;
/// # use aip_connector_testkit::assert_pending_approval;
/// # fn demo(result: ActionResult, cents: u64) {
/// let approval_id = assert_pending_approval!(result);
/// let approval_id = assert_pending_approval!(result, "a transfer of {} waits for finance", cents);
/// # }
/// ```
#[macro_export]
macro_rules! assert_pending_approval {
    ($result:expr $(,)?) => {
        $crate::results::pending_approval(&$result, ::core::option::Option::None)
    };
    ($result:expr, $($message:tt)+) => {
        $crate::results::pending_approval(
            &$result,
            ::core::option::Option::Some(::std::format!($($message)+)),
        )
    };
}

/// Asserts that a result is `completed` and evaluates to its output decoded into the type the
/// context asks for (a replay's output as the first answer's, as
/// [`ActionResult::output_as`] reads it).
///
/// ```no_run
/// # use aip_connector::model::ActionResult;
/// # use aip_connector_testkit::assert_completed;
/// # #[derive(serde::Deserialize)]
/// # struct Transfer {
/// #     cents: u64,
/// # }
/// # fn demo(result: ActionResult) {
/// let posted: Transfer = assert_completed!(result);
/// let _: serde_json::Value = assert_completed!(result, "the read answers");
/// # }
/// ```
#[macro_export]
macro_rules! assert_completed {
    ($result:expr $(,)?) => {
        $crate::results::completed(&$result, ::core::option::Option::None)
    };
    ($result:expr, $($message:tt)+) => {
        $crate::results::completed(
            &$result,
            ::core::option::Option::Some(::std::format!($($message)+)),
        )
    };
}

/// Asserts that a result is `failed` with the error code `code` and evaluates to a copy of its
/// [`ProtocolError`], so the result may be a temporary (`test.invoke(..).await`) and stays
/// usable when it is not.
///
/// ```no_run
/// # use aip_connector::codes;
/// # use aip_connector::model::{Action, ActionResult};
/// # use aip_connector_testkit::{TestHost, assert_failed};
/// # async fn demo(test: TestHost, result: ActionResult, action: Action) {
/// let error = assert_failed!(result, codes::CREDENTIAL_SCOPE_MISSING);
/// let error = assert_failed!(test.invoke("user:ada", action).await, "ledger.insufficient_funds", "an overdraft is refused");
/// # }
/// ```
#[macro_export]
macro_rules! assert_failed {
    ($result:expr, $code:expr $(,)?) => {
        $crate::results::failed(&$result, $code, ::core::option::Option::None)
    };
    ($result:expr, $code:expr, $($message:tt)+) => {
        $crate::results::failed(
            &$result,
            $code,
            ::core::option::Option::Some(::std::format!($($message)+)),
        )
    };
}

/// Asserts that a result is `cancelled` (a cancel reached the action: `Host::cancel`,
/// [`TestHost::cancel`](crate::TestHost::cancel)).
///
/// ```no_run
/// # use aip_connector::model::Action;
/// # use aip_connector_testkit::{TestHost, assert_cancelled};
/// # async fn demo(test: TestHost) -> Result<(), tokio::task::JoinError> {
/// # let action = Action::new("cap:images:resize", serde_json::json!({ "width": 640 }));
/// # let action_id = action.id.clone();
/// # let resize = move || action;
/// let running = test.spawn_invoke("user:ada", resize());
/// test.cancel(&action_id, "user:ada");
/// assert_cancelled!(running.await?);
/// # Ok(())
/// # }
/// ```
#[macro_export]
macro_rules! assert_cancelled {
    ($result:expr $(,)?) => {
        $crate::results::cancelled(&$result, ::core::option::Option::None)
    };
    ($result:expr, $($message:tt)+) => {
        $crate::results::cancelled(
            &$result,
            ::core::option::Option::Some(::std::format!($($message)+)),
        )
    };
}

/// What [`assert_cancelled!`] runs: nothing for a `cancelled` result, else a panic that
/// describes the result (a handler that finished in the poll that saw the cancel keeps its
/// success; a failure that reports what reached the provider stands).
#[track_caller]
pub fn cancelled(result: &ActionResult, message: Option<String>) {
    if result.status != ActionResultStatus::Cancelled {
        fail(message, "`cancelled`", result, None);
    }
}

/// What [`assert_pending_approval!`] runs: the approval id of a `pending_approval` result, or a
/// panic that describes the result.
#[track_caller]
pub fn pending_approval(result: &ActionResult, message: Option<String>) -> ApprovalId {
    if result.status == ActionResultStatus::PendingApproval {
        if let Some(id) = result.approval_id() {
            return id;
        }
        fail(
            message,
            "a `pending_approval` result with an approval id",
            result,
            Some("its output names no well-formed `approval_id`"),
        );
    }
    fail(message, "`pending_approval`", result, None)
}

/// What [`assert_completed!`] runs: the decoded output of a `completed` result, or a panic that
/// describes the result (or why its output is not a `T`).
#[track_caller]
pub fn completed<T: DeserializeOwned>(result: &ActionResult, message: Option<String>) -> T {
    if result.status != ActionResultStatus::Completed {
        fail(message, "`completed`", result, None);
    }
    match result.output_as::<T>() {
        Ok(output) => output,
        Err(error) => fail(
            message,
            &format!(
                "a `completed` result whose output is a `{}`",
                std::any::type_name::<T>()
            ),
            result,
            Some(&error.to_string()),
        ),
    }
}

/// What [`assert_failed!`] runs: a copy of the error of a result that failed with `code`, or a panic that
/// describes the result.
#[track_caller]
pub fn failed(result: &ActionResult, code: &str, message: Option<String>) -> ProtocolError {
    match (&result.status, result.error.as_deref()) {
        (ActionResultStatus::Failed, Some(error)) if error.code == code => error.clone(),
        _ => fail(message, &format!("`failed` with `{code}`"), result, None),
    }
}

#[track_caller]
fn fail(message: Option<String>, expected: &str, result: &ActionResult, why: Option<&str>) -> ! {
    let mut text = String::new();
    if let Some(message) = message {
        let _ = write!(text, "{message}: ");
    }
    let _ = write!(text, "expected {expected}, got {}", describe(result));
    if let Some(why) = why {
        let _ = write!(text, "; {why}");
    }
    panic!("{text}")
}

/// A result in one readable line: its status, then its error's code, message and details, or
/// its output, then the action it answers.
pub fn describe(result: &ActionResult) -> String {
    let status = serde_json::to_value(result.status)
        .ok()
        .and_then(|status| status.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", result.status));
    let mut text = format!("`{status}`");
    if let Some(error) = result.error.as_deref() {
        let _ = write!(text, " ({}: {}", error.code, error.message);
        if let Some(details) = &error.details {
            let _ = write!(text, "; details {details}");
        }
        text.push(')');
    } else if let Some(output) = &result.output {
        let _ = write!(text, " with output {output}");
    }
    let _ = write!(text, ", action {}", result.action_id);
    text
}

#[cfg(test)]
mod tests {
    use aip_connector::ids::ActionId;
    use aip_connector::model::ErrorCategory;
    use serde_json::json;

    use super::*;

    fn refused() -> ActionResult {
        let mut error = ProtocolError::new(
            "credential.scope_missing",
            "the resolved credential lacks required scopes",
            ErrorCategory::Auth,
        );
        error.details = Some(json!({ "missing_scopes": ["ledger.write"] }));
        ActionResult::failed(ActionId::new(), error)
    }

    fn panic_text(run: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let payload = std::panic::catch_unwind(run).expect_err("the assertion panics");
        payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| payload.downcast_ref::<&str>().unwrap().to_string())
    }

    #[test]
    fn cancelled_accepts_a_cancelled_result_only() {
        cancelled(
            &ActionResult::new(ActionId::new(), ActionResultStatus::Cancelled),
            None,
        );
        let text = panic_text(|| cancelled(&refused(), Some("the resize stops".to_owned())));
        assert!(
            text.starts_with(
                "the resize stops: expected `cancelled`, got `failed` (credential.scope_missing"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_result_that_is_not_gated_says_why() {
        let result = refused();
        let text = panic_text(|| {
            crate::assert_pending_approval!(result, "a transfer waits");
        });
        assert!(
            text.starts_with(
                "a transfer waits: expected `pending_approval`, got `failed` \
                 (credential.scope_missing: the resolved credential lacks required scopes; \
                 details {\"missing_scopes\":[\"ledger.write\"]}), action act_"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_gated_result_gives_its_approval_id() {
        let id = ApprovalId::new();
        let mut result = ActionResult::new(ActionId::new(), ActionResultStatus::PendingApproval);
        result.output = Some(json!({ "approval_id": id.as_str() }));
        assert_eq!(crate::assert_pending_approval!(result), id);
        result.output = Some(json!({}));
        let text = panic_text(|| {
            crate::assert_pending_approval!(result);
        });
        assert!(
            text.ends_with("; its output names no well-formed `approval_id`"),
            "{text}"
        );
    }

    #[test]
    fn completed_decodes_the_output_or_says_what_it_is() {
        let result = ActionResult::completed(ActionId::new(), json!({ "cents": 5 }));
        let output: serde_json::Value = crate::assert_completed!(result);
        assert_eq!(output["cents"], 5);
        let text = panic_text(|| {
            let _: String = crate::assert_completed!(result);
        });
        assert!(
            text.starts_with(
                "expected a `completed` result whose output is a `alloc::string::String`, got \
                 `completed` with output {\"cents\":5}"
            ),
            "{text}"
        );
        let result = refused();
        let text = panic_text(|| {
            let _: serde_json::Value = crate::assert_completed!(result);
        });
        assert!(
            text.starts_with("expected `completed`, got `failed` (credential.scope_missing"),
            "{text}"
        );
    }

    #[test]
    fn failed_checks_the_code() {
        let result = refused();
        let error = crate::assert_failed!(result, "credential.scope_missing");
        assert_eq!(error.category, ErrorCategory::Auth);
        let text = panic_text(|| {
            crate::assert_failed!(result, "credential.required", "no credential at all");
        });
        assert!(
            text.starts_with(
                "no credential at all: expected `failed` with `credential.required`, got `failed` \
                 (credential.scope_missing"
            ),
            "{text}"
        );
        // A temporary result (`test.invoke(..).await` in a test): the error outlives it, so
        // this compiles. (It was a reference into the result, and this was E0716, found by an
        // author trial.)
        let error = crate::assert_failed!(refused(), "credential.scope_missing");
        assert_eq!(error.code, "credential.scope_missing");
    }
}
