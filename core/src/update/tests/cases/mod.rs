//! One entry per update operator: how to call it (with the tests' hyper-parameters) and an
//! independent f64 transcription of its formula, in files by family as the operators are.

mod ada;
mod adam;
mod cocob;
mod ftrl;
mod group_adagrad;
mod lamb;
mod sgd;

use crate::error::Result;
use crate::update::UpdateArgs;
use crate::NDArray;

/// Call an operator on `(weight, grad, states)` at update number `t`; with `poison`, its first
/// hyper-parameter is NaN (operators without any ignore it).
pub(super) type Run = fn(&NDArray, &NDArray, &[NDArray], &UpdateArgs, u64, bool) -> Result<()>;
/// One f64 reference step over whole arrays: `(t, clip, weight, grad, states)`.
pub(super) type Reference = fn(u64, Option<f64>, &mut [f64], &[f64], &mut [Vec<f64>]);

/// One operator under test.
pub(super) struct Case {
    pub name: &'static str,
    pub states: usize,
    pub run: Run,
    pub reference: Reference,
    /// Whether the operator has hyper-parameters (`poison` applies).
    pub has_hyper: bool,
    /// Tolerance between two runs of the operator that must agree: 0 (same bits) for
    /// elementwise updates, small for LAMB, whose norms are sums in an order that depends on
    /// how the rows are split into spans.
    pub sum_tol: f64,
    /// The states' shape for a weight of the given shape (the weight's own for every rule but
    /// GroupAdaGrad, whose history is `(rows, 1)`).
    pub state_shape: fn(&[usize]) -> Vec<usize>,
    /// Whether the operator takes a weight decay (GroupAdaGrad refuses a non-zero one).
    pub takes_wd: bool,
}

impl Case {
    /// The tests' shared arguments ([`super::base`]), without weight decay where the operator
    /// takes none.
    pub fn args(&self, clip: bool, mode: crate::update::RowSparseMode) -> UpdateArgs {
        let a = super::base(clip, mode);
        if self.takes_wd {
            a
        } else {
            a.with_wd(0.0)
        }
    }
}

/// The states of most rules: shaped like the weight.
fn weight_shaped(shape: &[usize]) -> Vec<usize> {
    shape.to_vec()
}

/// The first hyper-parameter: NaN when poisoned.
fn p(v: f64, poison: bool) -> f64 {
    if poison {
        f64::NAN
    } else {
        v
    }
}

fn with<P>(a: &UpdateArgs, hyper: P) -> UpdateArgs<P> {
    UpdateArgs {
        lr: a.lr,
        wd: a.wd,
        rescale_grad: a.rescale_grad,
        clip_gradient: a.clip_gradient,
        row_sparse: a.row_sparse,
        hyper,
    }
}

fn clipf(x: f64, c: Option<f64>) -> f64 {
    c.map_or(x, |c| x.clamp(-c, c))
}

fn sgn(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

fn elementwise(
    w: &mut [f64],
    g: &[f64],
    s: &mut [Vec<f64>],
    f: impl Fn(&mut f64, f64, &mut [f64]),
) {
    let mut st = vec![0.0; s.len()];
    for i in 0..w.len() {
        for (k, v) in s.iter().enumerate() {
            st[k] = v[i];
        }
        f(&mut w[i], g[i], &mut st);
        for (k, v) in s.iter_mut().enumerate() {
            v[i] = st[k];
        }
    }
}

/// A case comparing bit for bit where two runs must agree.
fn case(
    name: &'static str,
    states: usize,
    has_hyper: bool,
    run: Run,
    reference: Reference,
) -> Case {
    Case {
        name,
        states,
        run,
        reference,
        has_hyper,
        sum_tol: 0.0,
        state_shape: weight_shaped,
        takes_wd: true,
    }
}

/// Every operator's case.
pub(super) fn cases() -> Vec<Case> {
    [
        sgd::cases(),
        adam::cases(),
        ada::cases(),
        ftrl::cases(),
        cocob::cases(),
        group_adagrad::cases(),
        lamb::cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}
