//! [`State`]: an optimizer's per-parameter arrays, scalars and update count.

use sparrow_core::{Error, MapMode, NDArray, Result};

/// Per-parameter optimizer state: named dense arrays shaped like the weight (GroupAdaGrad's
/// history: `(rows, 1)`), named scalars, and
/// the parameter's update count `t`. Allocated once by [`super::Optimizer::create_state`].
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Number of updates applied to this parameter.
    pub t: u64,
    /// Named state arrays (momentum, mean, var, ...), dense, the weight's dtype, and its shape
    /// or the optimizer's [`super::Optimizer::state_shape`].
    pub arrays: Vec<(String, NDArray)>,
    /// Named scalar state (e.g. Nadam's momentum schedule product).
    pub scalars: Vec<(String, f64)>,
}

impl State {
    /// A state with zero-filled dense arrays of the weight's shape and dtype, one per name, on
    /// the weight's device (not the default device: the update operators need both together).
    /// A read-write file-backed weight (out-of-core) gets file-backed states beside its file,
    /// `<weight file>.<name>.npy`, created sparse: no state costs memory beyond the pages its
    /// updates touch.
    pub fn zeros_like(weight: &NDArray, names: &[&str]) -> Result<State> {
        State::zeros_shaped(weight, names, &weight.shape())
    }

    /// [`State::zeros_like`] with arrays of shape `shape` instead of the weight's (in the
    /// weight's dtype, on its device, beside its file when it is file-backed): GroupAdaGrad's
    /// history is `(rows, 1)`.
    pub fn zeros_shaped(weight: &NDArray, names: &[&str], shape: &[usize]) -> Result<State> {
        let same = weight.shape()[..] == *shape;
        let mut arrays = Vec::with_capacity(names.len());
        let file = weight
            .backing_file()
            .filter(|(_, mode)| *mode == MapMode::ReadWrite);
        for n in names {
            let a = match &file {
                Some((path, _)) => {
                    let mut p = path.clone().into_os_string();
                    p.push(format!(".{n}.npy"));
                    let a = NDArray::create_npy(p, shape, weight.dtype())?;
                    a.advise_random_access(true);
                    a
                }
                None if same => weight.zeros_like(),
                // Made where the weight is (the update operators need both together).
                None => sparrow_core::with_device(weight.device(), || {
                    NDArray::zeros(shape, weight.dtype())
                })??,
            };
            arrays.push((n.to_string(), a));
        }
        Ok(State {
            t: 0,
            arrays,
            scalars: Vec::new(),
        })
    }

    /// The state array called `name`.
    pub fn array(&self, name: &str) -> Option<&NDArray> {
        self.arrays.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The state arrays in order, as plain handles.
    pub fn handles(&self) -> Vec<NDArray> {
        self.arrays.iter().map(|(_, a)| a.clone()).collect()
    }

    /// The `N` state arrays in order, borrowed; fails, naming `op`, when there are not `N`.
    pub(crate) fn arrays_n<const N: usize>(&self, op: &'static str) -> Result<[&NDArray; N]> {
        if self.arrays.len() != N {
            return Err(Error::arg(
                op,
                format!("expected {N} state arrays, got {}", self.arrays.len()),
            ));
        }
        Ok(std::array::from_fn(|i| &self.arrays[i].1))
    }

    /// The scalar called `name`.
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.scalars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// Set (or add) the scalar called `name`.
    pub fn set_scalar(&mut self, name: &str, v: f64) {
        match self.scalars.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = v,
            None => self.scalars.push((name.to_string(), v)),
        }
    }
}
