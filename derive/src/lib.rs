//! `#[derive(Block)]`: a sparrow-nn [`Block`] from a struct's fields, with no hand-written
//! `kind`, `params` or `children` (Gluon registers what a block assigns; this registers what
//! a struct holds). Use it through `sparrow_nn::Block` or `sparrow::prelude::*`.
//!
//! - **Fields** are registered by name, in declaration order: a `Parameter` as a parameter
//!   (`weight`), a block as a child (`encoder`, so its parameters are `encoder.dense0.weight`),
//!   an `Option` of either when it is `Some`, a `Vec` of either as `name.0`, `name.1`, ...
//!   (PyTorch's `ModuleList` names). Any other field needs `#[block(skip)]`; without it the
//!   compiler says which field is neither a block nor a parameter.
//! - **Forward**: write an inherent `fn forward(&self, ...)` taking `&NDArray` inputs and
//!   returning `Result` of one `NDArray`, a tuple of them or a `Vec`. The derived
//!   `Block::forward_multi` unpacks that many inputs (`#[block(inputs = 2)]` for two; one by
//!   default) and calls it, so `Sequential`, `summary` and `fit` use it, while `model.forward(..)`
//!   in user code calls the inherent method directly.
//! - **Kind**: the struct's name in lower case (children of a `Sequential` are named
//!   `<kind><n>`); `#[block(kind = "mf")]` chooses another.
//! - **Crate path**: found in the caller's `Cargo.toml` (`sparrow-nn`, or the facade
//!   `sparrow`); `#[block(crate = "path::to::nn")]` overrides it.
//!
//! [`Block`]: https://docs.rs/sparrow-nn/latest/sparrow_nn/trait.Block.html

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use proc_macro_crate::{crate_name, FoundCrate};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_macro_input, Data, DeriveInput, Fields, LitInt, LitStr};

/// Derives `sparrow_nn::Block` for a struct: `kind`, `params` and `children` from its fields,
/// `forward_multi` through the struct's inherent `forward`. See the crate docs for the rules.
#[proc_macro_derive(Block, attributes(block))]
pub fn derive_block(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The struct-level `#[block(...)]` options.
struct Options {
    kind: Option<String>,
    inputs: usize,
    krate: Option<syn::Path>,
}

fn struct_options(input: &DeriveInput) -> syn::Result<Options> {
    let mut o = Options {
        kind: None,
        inputs: 1,
        krate: None,
    };
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("block")) {
        attr.parse_nested_meta(|m| {
            if m.path.is_ident("kind") {
                let s: LitStr = m.value()?.parse()?;
                let v = s.value();
                if v.is_empty() || v.contains('.') {
                    return Err(m.error("kind must be non-empty and free of dots"));
                }
                o.kind = Some(v);
            } else if m.path.is_ident("inputs") {
                let n: LitInt = m.value()?.parse()?;
                let n: usize = n.base10_parse()?;
                if n == 0 {
                    return Err(m.error("a block takes at least 1 input"));
                }
                o.inputs = n;
            } else if m.path.is_ident("crate") {
                let s: LitStr = m.value()?.parse()?;
                o.krate = Some(s.parse()?);
            } else {
                return Err(m.error("expected `kind = \"..\"`, `inputs = N` or `crate = \"..\"`"));
            }
            Ok(())
        })?;
    }
    Ok(o)
}

/// True when a field carries `#[block(skip)]`.
fn skipped(field: &syn::Field) -> syn::Result<bool> {
    let mut skip = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("block")) {
        attr.parse_nested_meta(|m| {
            if m.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(m.error("expected `skip` (the only field option)"))
            }
        })?;
    }
    Ok(skip)
}

/// The path of sparrow-nn as the calling crate names it.
fn nn_path() -> syn::Result<TokenStream2> {
    let ident = |n: &str| syn::Ident::new(n, Span::call_site());
    // `Itself` (sparrow-nn's own tests and doctests) resolves through nn's
    // `extern crate self as sparrow_nn`.
    match crate_name("sparrow-nn") {
        Ok(FoundCrate::Itself) => return Ok(quote!(::sparrow_nn)),
        Ok(FoundCrate::Name(n)) => {
            let n = ident(&n);
            return Ok(quote!(::#n));
        }
        Err(_) => {}
    }
    match crate_name("sparrow") {
        Ok(FoundCrate::Itself) => Ok(quote!(::sparrow::nn)),
        Ok(FoundCrate::Name(n)) => {
            let n = ident(&n);
            Ok(quote!(::#n::nn))
        }
        Err(_) => Err(syn::Error::new(
            Span::call_site(),
            "derive(Block): neither sparrow-nn nor sparrow is a dependency in Cargo.toml; \
             name the crate with #[block(crate = \"path::to::sparrow_nn\")]",
        )),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let opts = struct_options(input)?;
    let nn = match &opts.krate {
        Some(p) => quote!(#p),
        None => nn_path()?,
    };
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        _ => return Err(syn::Error::new(
            input.span(),
            "derive(Block) applies to structs (a block's parameters and children are its fields)",
        )),
    };
    let mut registers = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        if skipped(f)? {
            continue;
        }
        let (access, label) = match (&f.ident, fields) {
            (Some(id), _) => {
                let label = id.to_string();
                let label = label.strip_prefix("r#").unwrap_or(&label).to_string();
                (quote!(self.#id), label)
            }
            (None, Fields::Unnamed(_)) => {
                let idx = syn::Index::from(i);
                (quote!(self.#idx), i.to_string())
            }
            (None, _) => unreachable!("unnamed field outside a tuple struct"),
        };
        // Spanned on the field, so a field that is neither a block nor a parameter is reported
        // where it is declared.
        registers.push(quote_spanned! {f.ty.span()=>
            #nn::derive_support::Register::register(&#access, #label, &mut __params, &mut __children);
        });
    }
    let kind = opts
        .kind
        .clone()
        .unwrap_or_else(|| name.to_string().to_lowercase());
    let n = opts.inputs;
    let args: Vec<_> = (0..n).map(|k| format_ident!("__x{k}")).collect();
    let (ig, tg, wc) = input.generics.split_for_impl();
    Ok(quote! {
        impl #ig #nn::Block for #name #tg #wc {
            fn forward_multi(
                &self,
                __inputs: &[#nn::derive_support::NDArray],
            ) -> #nn::derive_support::Result<::std::vec::Vec<#nn::derive_support::NDArray>> {
                let [#(#args),*] = #nn::block::inputs::<#n>(#kind, __inputs)?;
                #nn::derive_support::IntoOutputs::into_outputs(#name::forward(self, #(#args),*)?)
            }
            fn kind(&self) -> &'static str {
                #kind
            }
            fn params(&self) -> ::std::vec::Vec<(::std::string::String, #nn::Parameter)> {
                let mut __params = ::std::vec::Vec::new();
                let mut __children = ::std::vec::Vec::new();
                #(#registers)*
                let _ = __children;
                __params
            }
            fn children(&self) -> ::std::vec::Vec<(::std::string::String, &dyn #nn::Block)> {
                let mut __params = ::std::vec::Vec::new();
                let mut __children = ::std::vec::Vec::new();
                #(#registers)*
                let _ = __params;
                __children
            }
        }
    })
}
