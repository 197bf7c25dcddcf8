//! Recurrent layers over whole sequences (Gluon's `rnn.RNN`, `rnn.LSTM`, `rnn.GRU`): stacked
//! layers, optionally bidirectional, dropout between layers, layouts `TNC` and `NTC`, initial
//! states in, final states out, per-example valid lengths.
//!
//! Each direction of each layer is one product for the input projection of every step
//! (`(T*N, I) x (I, G*H)`) and one call of core's `rnn_sequence`, whose kernel runs the time
//! loop (per step one recurrent product and one fused gate pass) and its backward.

use sparrow_core::ops::rnn::{rnn_sequence, rnn_sequence_zero_state, RnnMode};
use sparrow_core::{DType, Error, NDArray, Result};

use super::project::{input_projection, RnnParams};
use crate::block::Block;
use crate::layers::Dropout;
use crate::parameter::Parameter;

/// Axis order of a sequence batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `(time, batch, features)`, Gluon's default.
    Tnc,
    /// `(batch, time, features)`, PyTorch's `batch_first`.
    Ntc,
}

/// The mode of an Elman RNN with activation `name`.
pub(crate) fn rnn_activation(op: &'static str, name: &str) -> Result<RnnMode> {
    match name {
        "tanh" => Ok(RnnMode::RnnTanh),
        "relu" => Ok(RnnMode::RnnRelu),
        other => Err(Error::arg(
            op,
            format!("activation must be 'tanh' or 'relu', got '{other}'"),
        )),
    }
}

/// The shared body of the three layers.
#[derive(Debug)]
struct Layer {
    mode: RnnMode,
    hidden: usize,
    num_layers: usize,
    bidirectional: bool,
    layout: Layout,
    input_size: usize,
    dtype: DType,
    dropout: Option<Dropout>,
    /// `params[layer * directions + direction]`.
    params: Vec<RnnParams>,
}

impl Layer {
    fn new(mode: RnnMode, hidden: usize) -> Layer {
        let mut l = Layer {
            mode,
            hidden,
            num_layers: 1,
            bidirectional: false,
            layout: Layout::Tnc,
            input_size: 0,
            dtype: DType::F32,
            dropout: None,
            params: Vec::new(),
        };
        l.rebuild();
        l
    }

    fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    /// Parameters `l{k}_...` (forward) and `r{k}_...` (reverse), as Gluon names them.
    fn rebuild(&mut self) {
        let d = self.directions();
        self.params = (0..self.num_layers)
            .flat_map(|k| (0..d).map(move |dir| (k, dir)))
            .map(|(k, dir)| {
                let input = if k == 0 {
                    self.input_size
                } else {
                    self.hidden * d
                };
                let prefix = format!("{}{k}_", if dir == 0 { 'l' } else { 'r' });
                RnnParams::new(&prefix, self.mode, self.hidden, input, self.dtype)
            })
            .collect();
    }

    fn kind(&self) -> &'static str {
        match self.mode {
            RnnMode::RnnTanh | RnnMode::RnnRelu => "rnn",
            RnnMode::Lstm => "lstm",
            RnnMode::Gru => "gru",
        }
    }

    fn begin_state(&self, batch: usize) -> Result<Vec<NDArray>> {
        let shape = [self.num_layers * self.directions(), batch, self.hidden];
        (0..self.mode.states())
            .map(|_| NDArray::zeros(&shape, self.dtype))
            .collect()
    }

    fn forward_with(
        &self,
        x: &NDArray,
        states: Option<&[NDArray]>,
        valid_lengths: Option<&[usize]>,
    ) -> Result<(NDArray, Vec<NDArray>)> {
        let op = self.kind();
        let xs = x.shape();
        if xs.len() != 3 {
            return Err(Error::shape(
                op,
                format!(
                    "the input must be 3-D ({:?} layout), got {xs:?}",
                    self.layout
                ),
            ));
        }
        let x = match self.layout {
            Layout::Tnc => x.clone(),
            Layout::Ntc => x.swapaxes(0, 1)?,
        };
        let (t, n) = (x.shape()[0], x.shape()[1]);
        let (dirs, h) = (self.directions(), self.hidden);
        let ld = self.num_layers * dirs;
        let s = self.mode.states();
        let states = match states {
            Some(st) => {
                if st.len() != s {
                    return Err(Error::arg(
                        op,
                        format!("takes {s} initial state array(s), got {}", st.len()),
                    ));
                }
                for a in st {
                    if !a.has_shape(&[ld, n, h]) {
                        return Err(Error::shape(
                            op,
                            format!(
                                "initial states must be (layers * directions, batch, hidden) \
                                 = {:?}, got {:?}",
                                [ld, n, h],
                                a.shape()
                            ),
                        ));
                    }
                }
                Some(st)
            }
            None => None,
        };
        // The states of layer and direction `k` (`None`: zeros, which the sequence
        // operator makes itself, so a traced forward has no constant to capture).
        let initial = |k: usize| -> Result<Option<(NDArray, Option<NDArray>)>> {
            let Some(st) = states else {
                return Ok(None);
            };
            let one = |which: usize| -> Result<NDArray> {
                st[which]
                    .slice_axis(0, Some(k as i64), Some(k as i64 + 1), 1)?
                    .reshape(&[n, h])
            };
            let c0 = if s == 2 { Some(one(1)?) } else { None };
            Ok(Some((one(0)?, c0)))
        };
        let mut finals: Vec<Vec<NDArray>> = vec![Vec::with_capacity(ld); s];
        let mut input = x;
        let gh = self.mode.gates() * h;
        for layer in 0..self.num_layers {
            let features = input.shape()[2];
            let flat = input.reshape(&[t * n, features])?;
            let mut outs = Vec::with_capacity(dirs);
            for dir in 0..dirs {
                let k = layer * dirs + dir;
                let p = &self.params[k];
                let xproj = input_projection(&flat, p)?.reshape(&[t, n, gh])?;
                let w = p.h2h_weight.data_for_shape(&[gh, h])?;
                let b = p.h2h_bias.data_for_shape(&[gh])?;
                let packed = match initial(k)? {
                    Some((h0, c0)) => rnn_sequence(
                        self.mode,
                        &xproj,
                        &w,
                        &b,
                        &h0,
                        c0.as_ref(),
                        valid_lengths,
                        dir == 1,
                    )?,
                    None => {
                        rnn_sequence_zero_state(self.mode, &xproj, &w, &b, valid_lengths, dir == 1)?
                    }
                };
                outs.push(packed.slice_axis(0, Some(0), Some(t as i64), 1)?);
                for (which, f) in finals.iter_mut().enumerate() {
                    let row = (t + which) as i64;
                    f.push(packed.slice_axis(0, Some(row), Some(row + 1), 1)?);
                }
            }
            let out = if dirs == 1 {
                outs.pop().expect("one direction")
            } else {
                NDArray::concat(&outs.iter().collect::<Vec<_>>(), 2)?
            };
            input = match (&self.dropout, layer + 1 < self.num_layers) {
                (Some(d), true) => d.forward(&out)?,
                _ => out,
            };
        }
        let out = match self.layout {
            Layout::Tnc => input,
            Layout::Ntc => input.swapaxes(0, 1)?,
        };
        let finals = finals
            .iter()
            .map(|f| NDArray::concat(&f.iter().collect::<Vec<_>>(), 0))
            .collect::<Result<Vec<_>>>()?;
        Ok((out, finals))
    }

    fn params(&self) -> Vec<(String, Parameter)> {
        self.params.iter().flat_map(|p| p.named()).collect()
    }

    fn describe(&self, name: &str) -> String {
        let input = self
            .params
            .first()
            .map_or(self.input_size, |p| p.input_size());
        let mut s = format!("{name}({input} -> {}, {:?}", self.hidden, self.layout);
        if self.num_layers > 1 {
            s += &format!(", num_layers={}", self.num_layers);
        }
        if self.bidirectional {
            s += ", bidirectional";
        }
        if self.mode == RnnMode::RnnRelu {
            s += ", relu";
        }
        s + ")"
    }
}

macro_rules! layer_type {
    ($(#[$doc:meta])* $name:ident, $desc:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            layer: Layer,
        }

        impl $name {
            /// Builder: stacked layers (default 1; 0 is an error at the first forward).
            pub fn num_layers(mut self, n: usize) -> Self {
                self.layer.num_layers = n;
                self.layer.rebuild();
                self
            }
            /// Builder: run a second, reversed direction per layer and concatenate the two
            /// outputs on the feature axis (default false).
            pub fn bidirectional(mut self, yes: bool) -> Self {
                self.layer.bidirectional = yes;
                self.layer.rebuild();
                self
            }
            /// Builder: dropout rate on the outputs of every layer but the last, in training
            /// mode only (default 0); a rate outside `[0, 1)` is an error.
            pub fn dropout(mut self, rate: f64) -> Result<Self> {
                self.layer.dropout = if rate > 0.0 {
                    Some(Dropout::new(rate)?)
                } else if rate == 0.0 {
                    None
                } else {
                    return Err(Error::arg(
                        $desc,
                        format!("dropout rate {rate} must be in [0, 1)"),
                    ));
                };
                Ok(self)
            }
            /// Builder: axis order of inputs and outputs (default [`Layout::Tnc`]).
            pub fn layout(mut self, layout: Layout) -> Self {
                self.layer.layout = layout;
                self
            }
            /// Builder: input features (otherwise inferred at the first forward).
            pub fn input_size(mut self, n: usize) -> Self {
                self.layer.input_size = n;
                self.layer.rebuild();
                self
            }
            /// Builder: element type of the parameters and of zero initial states.
            pub fn dtype(mut self, dtype: DType) -> Self {
                self.layer.dtype = dtype;
                self.layer.rebuild();
                self
            }
            /// Zero initial states for `batch` examples: `[h]` (`[h, c]` for the LSTM), each
            /// `(num_layers * directions, batch, hidden)`.
            pub fn begin_state(&self, batch: usize) -> Result<Vec<NDArray>> {
                self.layer.begin_state(batch)
            }
            /// The whole forward: `x` in the layer's layout, optional initial states (as
            /// [`Self::begin_state`] shapes them; zeros when `None`), optional per-example
            /// valid lengths (each at most the sequence length). Returns the output
            /// (`(T, N, directions * hidden)` in `TNC`; zero past each example's length) and
            /// the final states (each example's state at its last valid step), shaped like
            /// the initial ones.
            pub fn forward_with(
                &self,
                x: &NDArray,
                states: Option<&[NDArray]>,
                valid_lengths: Option<&[usize]>,
            ) -> Result<(NDArray, Vec<NDArray>)> {
                if self.layer.num_layers == 0 {
                    return Err(Error::arg($desc, "num_layers must be at least 1"));
                }
                self.layer.forward_with(x, states, valid_lengths)
            }
            /// The parameter `name` (`l0_i2h_weight`, `r1_h2h_bias`, ...), if it exists.
            pub fn param(&self, name: &str) -> Option<Parameter> {
                self.layer.params().into_iter().find(|(n, _)| n == name).map(|(_, p)| p)
            }
        }

        impl Block for $name {
            /// [`Self::forward_with`] from zero states, all lengths full; the output only.
            fn forward(&self, x: &NDArray) -> Result<NDArray> {
                Ok(self.forward_with(x, None, None)?.0)
            }
            /// Gluon's `layer(x)` and `layer(x, states)`: `[x]` gives `[output]`;
            /// `[x, h]` (`[x, h, c]` for the LSTM) gives `[output, h', c']`, the final states.
            fn forward_multi(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
                match inputs {
                    [] => Err(Error::arg($desc, "no input; pass [x] or [x, states...]")),
                    [x] => Ok(vec![self.forward(x)?]),
                    // The state count and shapes are checked by the step.
                    [x, states @ ..] => {
                        let (out, states) = self.forward_with(x, Some(states), None)?;
                        Ok(std::iter::once(out).chain(states).collect())
                    }
                }
            }
            fn kind(&self) -> &'static str {
                self.layer.kind()
            }
            fn params(&self) -> Vec<(String, Parameter)> {
                self.layer.params()
            }
            fn describe(&self) -> String {
                self.layer.describe($desc)
            }
        }
    };
}

layer_type!(
    /// Elman RNN layer (Gluon's `rnn.RNN`), tanh (default) or relu.
    RNN,
    "RNN"
);
layer_type!(
    /// LSTM layer (Gluon's `rnn.LSTM`, gates `i, f, g, o`); states `[h, c]`.
    LSTM,
    "LSTM"
);
layer_type!(
    /// GRU layer (Gluon's `rnn.GRU`, gates `r, z, n`, the reset gate on `W_hn h + b_hn` as in
    /// MXNet and PyTorch).
    GRU,
    "GRU"
);

impl RNN {
    /// `hidden` units, tanh, one layer, `TNC`, input size inferred.
    pub fn new(hidden: usize) -> RNN {
        RNN {
            layer: Layer::new(RnnMode::RnnTanh, hidden),
        }
    }
    /// Builder: the activation, `tanh` or `relu`; anything else is an error.
    pub fn activation(mut self, name: &str) -> Result<Self> {
        self.layer.mode = rnn_activation("RNN", name)?;
        self.layer.rebuild();
        Ok(self)
    }
}

impl LSTM {
    /// `hidden` units, one layer, `TNC`, input size inferred.
    pub fn new(hidden: usize) -> LSTM {
        LSTM {
            layer: Layer::new(RnnMode::Lstm, hidden),
        }
    }
}

impl GRU {
    /// `hidden` units, one layer, `TNC`, input size inferred.
    pub fn new(hidden: usize) -> GRU {
        GRU {
            layer: Layer::new(RnnMode::Gru, hidden),
        }
    }
}
