//! Error collector: every problem in an attribute is recorded and reported in one compile.
//!
//! Parsing never stops at the first mistake; each stage pushes spanned errors here and the entry
//! point calls [`Ctxt::check`] once, which joins them with `syn::Error::combine`. Dropping a
//! `Ctxt` without checking it is a bug in this crate, so it panics (as serde_derive does).

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

pub(crate) struct Ctxt {
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Ctxt {
            errors: RefCell::new(Some(Vec::new())),
        }
    }

    /// Records an error spanned on `tokens`.
    pub(crate) fn error_spanned_by<T: ToTokens, M: Display>(&self, tokens: T, message: M) {
        self.push(syn::Error::new_spanned(tokens.into_token_stream(), message));
    }

    /// Records an error at `span`.
    pub(crate) fn error_at<M: Display>(&self, span: Span, message: M) {
        self.push(syn::Error::new(span, message));
    }

    /// Records an error produced by syn.
    pub(crate) fn syn_error(&self, error: syn::Error) {
        self.push(error);
    }

    /// How many errors were recorded so far.
    pub(crate) fn error_count(&self) -> usize {
        self.errors.borrow().as_ref().map_or(0, Vec::len)
    }

    /// Whether any error was recorded so far.
    pub(crate) fn has_errors(&self) -> bool {
        self.errors
            .borrow()
            .as_ref()
            .is_some_and(|errors| !errors.is_empty())
    }

    fn push(&self, error: syn::Error) {
        self.errors
            .borrow_mut()
            .as_mut()
            .expect("Ctxt used after check")
            .push(error);
    }

    /// Consumes the collector: `Ok` if nothing was recorded, else all errors combined.
    pub(crate) fn check(self) -> syn::Result<()> {
        let mut errors = self
            .errors
            .borrow_mut()
            .take()
            .expect("Ctxt checked twice")
            .into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        if !std::thread::panicking() && self.errors.borrow().is_some() {
            panic!("aip-connector-macros: Ctxt dropped without check()");
        }
    }
}
