//! Recurrent cells for custom loops (Gluon's `rnn.RNNCell`, `rnn.LSTMCell`, `rnn.GRUCell`):
//! one time step, `step(x, states) -> (output, new_states)`.
//!
//! A step is one product for all gates of the input (`x i2h_weight^T + i2h_bias`) and one
//! call of core's `rnn_sequence` over a single time step, which runs the recurrent product and
//! the fused gate pass as one recorded node.

use sparrow_core::ops::rnn::{rnn_sequence, RnnMode};
use sparrow_core::{DType, Error, NDArray, Result};

use super::project::{input_projection, RnnParams};
use crate::block::Block;
use crate::init::Initializer;
use crate::parameter::Parameter;

/// What every recurrent cell offers to a hand-written time loop.
pub trait RecurrentCell: Block {
    /// Hidden units.
    fn hidden_size(&self) -> usize;
    /// How many state arrays a step takes and returns (2 for the LSTM: `h`, `c`; else 1).
    fn state_count(&self) -> usize;
    /// Zero states for a batch of `batch` examples, each `(batch, hidden)`.
    fn begin_state(&self, batch: usize) -> Result<Vec<NDArray>>;
    /// One step: `x` is `(batch, input)`, `states` as [`RecurrentCell::begin_state`] makes
    /// them. Returns the output `(batch, hidden)` and the new states.
    fn step(&self, x: &NDArray, states: &[NDArray]) -> Result<(NDArray, Vec<NDArray>)>;
}

/// The shared body of the three cells.
#[derive(Debug, Clone)]
struct Cell {
    mode: RnnMode,
    hidden: usize,
    dtype: DType,
    params: RnnParams,
}

impl Cell {
    fn new(mode: RnnMode, hidden: usize, input_size: usize) -> Cell {
        Cell {
            mode,
            hidden,
            dtype: DType::F32,
            params: RnnParams::new("", mode, hidden, input_size, DType::F32),
        }
    }

    fn rebuild(&mut self, input_size: usize) {
        self.params = RnnParams::new("", self.mode, self.hidden, input_size, self.dtype);
    }

    fn begin_state(&self, batch: usize) -> Result<Vec<NDArray>> {
        (0..self.mode.states())
            .map(|_| NDArray::zeros(&[batch, self.hidden], self.dtype))
            .collect()
    }

    fn step(&self, x: &NDArray, states: &[NDArray]) -> Result<(NDArray, Vec<NDArray>)> {
        let op = cell_kind(self.mode);
        let xs = x.shape();
        if xs.len() != 2 {
            return Err(Error::shape(
                op,
                format!("the input must be (batch, input), got {xs:?}"),
            ));
        }
        let want = self.mode.states();
        if states.len() != want {
            return Err(Error::arg(
                op,
                format!("takes {want} state array(s), got {}", states.len()),
            ));
        }
        let n = xs[0];
        let xproj = input_projection(x, &self.params)?;
        let gh = self.mode.gates() * self.hidden;
        let xproj = xproj.reshape(&[1, n, gh])?;
        let (w, b) = (
            self.params.h2h_weight.data_for_shape(&[gh, self.hidden])?,
            self.params.h2h_bias.data_for_shape(&[gh])?,
        );
        let packed = rnn_sequence(
            self.mode,
            &xproj,
            &w,
            &b,
            &states[0],
            states.get(1),
            None,
            false,
        )?;
        // Rows of the packed output: [output at step 0, final h, (final c)]; the output of a
        // single step is its final h, so both come from row 1.
        let row = |i: i64| -> Result<NDArray> {
            packed
                .slice_axis(0, Some(i), Some(i + 1), 1)?
                .reshape(&[n, self.hidden])
        };
        let h = row(1)?;
        let mut new_states = vec![h.clone()];
        if self.mode == RnnMode::Lstm {
            new_states.push(row(2)?);
        }
        Ok((h, new_states))
    }
}

/// The Block kind of a cell of `mode`.
fn cell_kind(mode: RnnMode) -> &'static str {
    match mode {
        RnnMode::RnnTanh | RnnMode::RnnRelu => "rnncell",
        RnnMode::Lstm => "lstmcell",
        RnnMode::Gru => "grucell",
    }
}

macro_rules! cell_type {
    ($(#[$doc:meta])* $name:ident, $desc:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            cell: Cell,
        }

        impl $name {
            /// Builder: the input size (otherwise inferred at the first step).
            pub fn input_size(mut self, n: usize) -> Self {
                self.cell.rebuild(n);
                self
            }
            /// Builder: element type of the parameters and of `begin_state`.
            pub fn dtype(mut self, dtype: DType) -> Self {
                self.cell.dtype = dtype;
                let n = self.cell.params.input_size();
                self.cell.rebuild(n);
                self
            }
            /// Builder: the initializer of `i2h_weight` (default: the one `initialize` gets).
            pub fn i2h_weight_initializer(self, init: Initializer) -> Self {
                self.cell.params.i2h_weight.set_init(Some(init));
                self
            }
            /// Builder: the initializer of `h2h_weight` (default: the one `initialize` gets).
            pub fn h2h_weight_initializer(self, init: Initializer) -> Self {
                self.cell.params.h2h_weight.set_init(Some(init));
                self
            }
            /// `i2h_weight`, `(gates * hidden, input)`.
            pub fn i2h_weight(&self) -> &Parameter {
                &self.cell.params.i2h_weight
            }
            /// `h2h_weight`, `(gates * hidden, hidden)`.
            pub fn h2h_weight(&self) -> &Parameter {
                &self.cell.params.h2h_weight
            }
            /// `i2h_bias`, `(gates * hidden,)`.
            pub fn i2h_bias(&self) -> &Parameter {
                &self.cell.params.i2h_bias
            }
            /// `h2h_bias`, `(gates * hidden,)`.
            pub fn h2h_bias(&self) -> &Parameter {
                &self.cell.params.h2h_bias
            }
        }

        impl RecurrentCell for $name {
            fn hidden_size(&self) -> usize {
                self.cell.hidden
            }
            fn state_count(&self) -> usize {
                self.cell.mode.states()
            }
            fn begin_state(&self, batch: usize) -> Result<Vec<NDArray>> {
                self.cell.begin_state(batch)
            }
            fn step(&self, x: &NDArray, states: &[NDArray]) -> Result<(NDArray, Vec<NDArray>)> {
                self.cell.step(x, states)
            }
        }

        impl Block for $name {
            /// One step from zero states; returns the output.
            fn forward(&self, x: &NDArray) -> Result<NDArray> {
                let batch = x.shape().first().copied().unwrap_or(0);
                let states = self.cell.begin_state(batch)?;
                Ok(self.cell.step(x, &states)?.0)
            }
            /// Gluon's `cell(x, states)`: `[x, h]` (`[x, h, c]` for the LSTM) gives
            /// `[output, h', c']`; `[x]` alone starts from zero states and gives `[output]`.
            fn forward_multi(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
                match inputs {
                    [] => Err(Error::arg($desc, "no input; pass [x] or [x, states...]")),
                    [x] => Ok(vec![self.forward(x)?]),
                    // The state count and shapes are checked by the step.
                    [x, states @ ..] => {
                        let (out, states) = self.cell.step(x, states)?;
                        Ok(std::iter::once(out).chain(states).collect())
                    }
                }
            }
            fn kind(&self) -> &'static str {
                cell_kind(self.cell.mode)
            }
            fn params(&self) -> Vec<(String, Parameter)> {
                self.cell.params.named()
            }
            fn describe(&self) -> String {
                format!(
                    "{}({} -> {}{})",
                    $desc,
                    self.cell.params.input_size(),
                    self.cell.hidden,
                    if self.cell.mode == RnnMode::RnnRelu { ", relu" } else { "" }
                )
            }
        }
    };
}

cell_type!(
    /// Elman cell (Gluon's `rnn.RNNCell`): `h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)`,
    /// `act` tanh (default) or relu.
    RNNCell,
    "RNNCell"
);
cell_type!(
    /// LSTM cell (Gluon's `rnn.LSTMCell`, gates `i, f, g, o`): states `[h, c]`.
    LSTMCell,
    "LSTMCell"
);
cell_type!(
    /// GRU cell (Gluon's `rnn.GRUCell`, gates `r, z, n`, the reset gate on `W_hn h + b_hn`).
    GRUCell,
    "GRUCell"
);

impl RNNCell {
    /// A tanh cell of `hidden` units; input size inferred at the first step.
    pub fn new(hidden: usize) -> RNNCell {
        RNNCell {
            cell: Cell::new(RnnMode::RnnTanh, hidden, 0),
        }
    }
    /// Builder: the activation, `tanh` or `relu`; anything else is an error.
    pub fn activation(mut self, name: &str) -> Result<Self> {
        self.cell.mode = super::layer::rnn_activation("RNNCell", name)?;
        Ok(self)
    }
}

impl LSTMCell {
    /// An LSTM cell of `hidden` units; input size inferred at the first step.
    pub fn new(hidden: usize) -> LSTMCell {
        LSTMCell {
            cell: Cell::new(RnnMode::Lstm, hidden, 0),
        }
    }
}

impl GRUCell {
    /// A GRU cell of `hidden` units; input size inferred at the first step.
    pub fn new(hidden: usize) -> GRUCell {
        GRUCell {
            cell: Cell::new(RnnMode::Gru, hidden, 0),
        }
    }
}
