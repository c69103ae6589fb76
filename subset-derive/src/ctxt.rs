//! Error accumulation: every rule reports into one [`Ctxt`] so a single compile shows every misuse.

use std::cell::RefCell;
use std::fmt::Display;

use quote::ToTokens;

/// Collects the errors found while reading and checking one derive input.
///
/// Parsing and validation keep going after an error; [`Ctxt::check`] turns whatever was collected
/// into one combined [`syn::Error`].
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Ctxt::default()
    }

    /// An error spanning `tokens` (first to last token).
    pub(crate) fn error_spanned_by<T: ToTokens, M: Display>(&self, tokens: T, message: M) {
        self.syn_error(syn::Error::new_spanned(tokens.into_token_stream(), message));
    }

    /// An error at `span`.
    pub(crate) fn error_at<M: Display>(&self, span: proc_macro2::Span, message: M) {
        self.syn_error(syn::Error::new(span, message));
    }

    /// An error produced by `syn` itself (malformed attribute syntax).
    pub(crate) fn syn_error(&self, error: syn::Error) {
        self.errors.borrow_mut().push(error);
    }

    /// Whether any error has been reported so far.
    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.borrow().is_empty()
    }

    /// `Ok` when nothing was reported, otherwise every error combined into one.
    pub(crate) fn check(self) -> syn::Result<()> {
        let mut errors = self.errors.into_inner().into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }
}
