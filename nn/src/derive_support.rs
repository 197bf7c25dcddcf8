//! What `#[derive(Block)]` (the `sparrow-derive` crate) expands to: registering a struct's
//! fields as parameters or children ([`Register`]) and turning an inherent `forward`'s result
//! into the outputs of [`Block::forward_multi`] ([`IntoOutputs`]). Public because derived code
//! in other crates calls it; users do not need it directly.

pub use sparrow_core::{NDArray, Result};

use crate::block::Block;
use crate::parameter::Parameter;

/// A field type that `#[derive(Block)]` registers: a [`Parameter`] (a parameter), a block (a
/// child), or an `Option` / `Vec` of either.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is neither a Block nor a Parameter, so #[derive(Block)] cannot register it",
    label = "not a block or parameter field",
    note = "mark fields that hold settings or other data with #[block(skip)]"
)]
pub trait Register {
    /// Append this field, named `name`, to `params` or `children`.
    fn register<'a>(
        &'a self,
        name: &str,
        params: &mut Vec<(String, Parameter)>,
        children: &mut Vec<(String, &'a dyn Block)>,
    );
}

impl Register for Parameter {
    fn register<'a>(
        &'a self,
        name: &str,
        params: &mut Vec<(String, Parameter)>,
        _children: &mut Vec<(String, &'a dyn Block)>,
    ) {
        params.push((name.to_string(), self.clone()));
    }
}

impl<B: Block> Register for B {
    fn register<'a>(
        &'a self,
        name: &str,
        _params: &mut Vec<(String, Parameter)>,
        children: &mut Vec<(String, &'a dyn Block)>,
    ) {
        children.push((name.to_string(), self));
    }
}

/// Present when `Some`, under the field's name.
impl<T: Register> Register for Option<T> {
    fn register<'a>(
        &'a self,
        name: &str,
        params: &mut Vec<(String, Parameter)>,
        children: &mut Vec<(String, &'a dyn Block)>,
    ) {
        if let Some(v) = self {
            v.register(name, params, children);
        }
    }
}

/// Each element as `name.i` (PyTorch's `ModuleList` / `ParameterList` names).
impl<T: Register> Register for Vec<T> {
    fn register<'a>(
        &'a self,
        name: &str,
        params: &mut Vec<(String, Parameter)>,
        children: &mut Vec<(String, &'a dyn Block)>,
    ) {
        for (i, v) in self.iter().enumerate() {
            v.register(&format!("{name}.{i}"), params, children);
        }
    }
}

/// What an inherent `forward` of a derived block may return: one array, a tuple of two to four,
/// or a `Vec` (several outputs, in order).
pub trait IntoOutputs {
    /// The outputs as [`Block::forward_multi`] returns them.
    fn into_outputs(self) -> Result<Vec<NDArray>>;
}

impl IntoOutputs for NDArray {
    fn into_outputs(self) -> Result<Vec<NDArray>> {
        Ok(vec![self])
    }
}

impl IntoOutputs for Vec<NDArray> {
    fn into_outputs(self) -> Result<Vec<NDArray>> {
        Ok(self)
    }
}

impl IntoOutputs for (NDArray, NDArray) {
    fn into_outputs(self) -> Result<Vec<NDArray>> {
        Ok(vec![self.0, self.1])
    }
}

impl IntoOutputs for (NDArray, NDArray, NDArray) {
    fn into_outputs(self) -> Result<Vec<NDArray>> {
        Ok(vec![self.0, self.1, self.2])
    }
}

impl IntoOutputs for (NDArray, NDArray, NDArray, NDArray) {
    fn into_outputs(self) -> Result<Vec<NDArray>> {
        Ok(vec![self.0, self.1, self.2, self.3])
    }
}
