//! Implementation detail of the `subset` crate.
use proc_macro::TokenStream;
/// Derive.
#[proc_macro_derive(Subset, attributes(subset))]
pub fn derive_subset(_input: TokenStream) -> TokenStream { TokenStream::new() }
/// Derive.
#[proc_macro_derive(Child, attributes(subset))]
pub fn derive_child(_input: TokenStream) -> TokenStream { TokenStream::new() }
