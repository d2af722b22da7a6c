//! Shared helpers of the runnable examples.
