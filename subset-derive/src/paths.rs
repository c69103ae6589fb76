//! How generated code names the runtime: the version-suffixed hidden module, and the stored type
//! of an element type. A leaf, used by both the expansion and the fallback.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote_spanned, ToTokens, TokenStreamExt};
use syn::spanned::Spanned;
use syn::Type;

/// The name of the runtime's hidden module for generated code: `__private` and the crate's
/// version without dots, so that a derive never compiles against a runtime of another version
/// (the two are released together, pinned to one another).
const PRIVATE_MODULE: &str = "__private010";

/// The hidden module's name as generated code writes it: `::subset::#Private::…`.
pub(crate) struct Private;

impl ToTokens for Private {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.append(Ident::new(PRIVATE_MODULE, Span::call_site()));
    }
}

/// `<C as Child>::Full`, the type stored in the child collection for the element type `C`
/// (`C` itself unless `C` is a preview). Spanned at `C`, where a `C` that is not a `Child` is
/// reported; every use is spelled the same way, so that rustc reports it once.
pub(crate) fn full_type(child_ty: &Type) -> TokenStream {
    quote_spanned! {child_ty.span()=> <#child_ty as ::subset::#Private::Child>::Full}
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_private_module_is_named_for_the_version() {
        let version = env!("CARGO_PKG_VERSION").replace('.', "");
        assert_eq!(super::PRIVATE_MODULE, format!("__private{version}"));
    }
}
