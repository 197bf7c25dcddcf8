//! The recurrent family of the backend interface: one direction of one recurrent layer (RNN
//! with tanh or relu, LSTM, GRU) over a whole sequence, forward and backward, as cuDNN and
//! MXNet's fused `RNN` operator run it.
//!
//! The operator computes the input projection of every time step with one product before it
//! calls the forward here (`xproj`, `(T, N, G*H)`); the backend then runs the loop: per step one
//! product of the previous hidden state with the recurrent weight and one pass of the gate
//! equations. The backward runs the loop in reverse and ends with one product for the
//! recurrent weight's gradient over all steps. Gate order and equations are MXNet's and
//! PyTorch's (LSTM `i, f, g, o`; GRU `r, z, n` with the reset gate applied to the recurrent
//! part `W_hn h + b_hn`).

use super::Storage;
use crate::error::{Error, Result};

/// Which recurrence a layer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RnnMode {
    /// `h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`.
    RnnTanh,
    /// `h' = relu(W_ih x + b_ih + W_hh h + b_hh)`.
    RnnRelu,
    /// Long short-term memory, gates `i, f, g, o`: `c' = f c + i g`, `h' = o tanh(c')`.
    Lstm,
    /// Gated recurrent unit, gates `r, z, n`: `n = tanh(W_in x + b_in + r (W_hn h + b_hn))`,
    /// `h' = (1 - z) n + z h`.
    Gru,
}

impl RnnMode {
    /// Gates per unit: the row count of the weights is `gates() * hidden`.
    pub fn gates(self) -> usize {
        match self {
            RnnMode::RnnTanh | RnnMode::RnnRelu => 1,
            RnnMode::Lstm => 4,
            RnnMode::Gru => 3,
        }
    }
    /// States carried between steps: 2 for the LSTM (`h`, `c`), else 1 (`h`).
    pub fn states(self) -> usize {
        if self == RnnMode::Lstm {
            2
        } else {
            1
        }
    }
    /// Floats per (time, example) row of the forward's saved workspace, in units of `hidden`.
    pub(crate) fn workspace_units(self) -> usize {
        match self {
            // h, h_prev
            RnnMode::RnnTanh | RnnMode::RnnRelu => 2,
            // i, f, g, o, c_prev, tanh(c), h_prev
            RnnMode::Lstm => 7,
            // r, z, n, W_hn h + b_hn, h_prev
            RnnMode::Gru => 5,
        }
    }
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            RnnMode::RnnTanh => "rnn_tanh",
            RnnMode::RnnRelu => "rnn_relu",
            RnnMode::Lstm => "lstm",
            RnnMode::Gru => "gru",
        }
    }
}

/// The sizes of one direction of one layer over a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RnnDims {
    /// The recurrence.
    pub(crate) mode: RnnMode,
    /// Time steps.
    pub(crate) steps: usize,
    /// Examples (batch).
    pub(crate) batch: usize,
    /// Hidden units.
    pub(crate) hidden: usize,
    /// Walk each sequence from its own last valid step back to step 0.
    pub(crate) reverse: bool,
    /// Per-example valid lengths (each `<= steps`); empty: every example has `steps`.
    pub(crate) lengths: Vec<usize>,
}

impl RnnDims {
    /// The valid length of example `n`.
    #[inline]
    pub(crate) fn len_of(&self, n: usize) -> usize {
        if self.lengths.is_empty() {
            self.steps
        } else {
            self.lengths[n]
        }
    }
}

/// The gradients [`RnnOps::rnn_backward`] returns.
pub(crate) struct RnnGrads<S> {
    /// Of the input projection, `(T, N, G*H)`.
    pub(crate) dxproj: S,
    /// Of the recurrent weight, `(G*H, H)`.
    pub(crate) dweight: S,
    /// Of the recurrent bias, `(G*H,)`.
    pub(crate) dbias: S,
    /// Of the initial hidden state, `(N, H)`.
    pub(crate) dh0: S,
    /// Of the initial cell state (LSTM), `(N, H)`.
    pub(crate) dc0: Option<S>,
}

/// What a backend implements for recurrent layers. Shapes are checked by the operator;
/// operands share one float dtype.
pub(crate) trait RnnOps: Sized {
    /// Run the recurrence over `self` = `xproj` (`(T, N, G*H)`, the input projection with its
    /// bias) from the states `h0` (and `c0` for the LSTM), with the recurrent weight `w`
    /// (`(G*H, H)`) and bias `b` (`(G*H,)`). Returns the packed output `(T + S, N, H)` (the
    /// hidden state at every step, zero past an example's length, then the `S` final states)
    /// and the workspace the backward reads (`(T, N, workspace_units * H)`).
    fn rnn_forward(
        &self,
        w: &Self,
        b: &Self,
        h0: &Self,
        c0: Option<&Self>,
        dims: &RnnDims,
    ) -> Result<(Self, Self)>;
    /// The backward of [`RnnOps::rnn_forward`] for the head gradient `self` of the packed
    /// output, from the forward's workspace `ws`.
    fn rnn_backward(&self, ws: &Self, w: &Self, dims: &RnnDims) -> Result<RnnGrads<Self>>;
}

impl Storage {
    /// See [`RnnOps::rnn_forward`].
    pub(crate) fn rnn_forward(
        &self,
        w: &Storage,
        b: &Storage,
        h0: &Storage,
        c0: Option<&Storage>,
        dims: &RnnDims,
    ) -> Result<(Storage, Storage)> {
        const OP: &str = "rnn";
        use super::sparse::ValuesOf;
        // The optional cell state joins each arm as a plain `Option` of that backend's storage
        // (on another backend: the mismatch error).
        match (self, w, b, h0) {
            (Storage::Cpu(x), Storage::Cpu(w), Storage::Cpu(b), Storage::Cpu(h)) => {
                let c0 = c0.map(|c| ValuesOf::values_of(OP, c)).transpose()?;
                let (out, ws) = x.rnn_forward(w, b, h, c0, dims)?;
                Ok((Storage::from(out), Storage::from(ws)))
            }
            #[cfg(feature = "cuda")]
            (Storage::Cuda(x), Storage::Cuda(w), Storage::Cuda(b), Storage::Cuda(h)) => {
                let c0 = c0.map(|c| ValuesOf::values_of(OP, c)).transpose()?;
                let (out, ws) = x.rnn_forward(w, b, h, c0, dims)?;
                Ok((Storage::from(out), Storage::from(ws)))
            }
            #[allow(unreachable_patterns)]
            (x, w, ..) => Err(Error::device_mismatch(OP, x.device(), w.device())),
        }
    }
    /// [`Storage::rnn_forward`] as one buffer, the packed output then the workspace (the
    /// array of `ops::rnn::rnn_sequence_saved`): written in place by the CPU, joined by a
    /// copy elsewhere.
    pub(crate) fn rnn_forward_saved(
        &self,
        w: &Storage,
        b: &Storage,
        h0: &Storage,
        c0: Option<&Storage>,
        dims: &RnnDims,
    ) -> Result<Storage> {
        // Irrefutable without the CUDA backend.
        #[allow(irrefutable_let_patterns)]
        if let (Storage::Cpu(x), Storage::Cpu(wc), Storage::Cpu(bc), Storage::Cpu(hc)) =
            (self, w, b, h0)
        {
            let cc = match c0 {
                None => Some(None),
                Some(Storage::Cpu(c)) => Some(Some(c)),
                #[allow(unreachable_patterns)]
                Some(_) => None,
            };
            if let Some(cc) = cc {
                if let Some(all) = x.rnn_forward_saved(wc, bc, hc, cc, dims)? {
                    return Ok(Storage::from(all));
                }
            }
        }
        let (out, ws) = self.rnn_forward(w, b, h0, c0, dims)?;
        let (n, h) = (dims.batch, dims.hidden);
        let rows = [out.len() / (n * h).max(1), ws.len() / (n * h).max(1)];
        Storage::concat(&[&out, &ws], &rows, 1, n * h)
    }
    /// [`Storage::rnn_backward`] for the head gradient `self` of the packed output, reading
    /// the workspace out of `saved` (see [`Storage::rnn_forward_saved`]): in place on the
    /// CPU, from a copy elsewhere.
    pub(crate) fn rnn_backward_saved(
        &self,
        saved: &Storage,
        w: &Storage,
        dims: &RnnDims,
    ) -> Result<RnnGrads<Storage>> {
        #[allow(irrefutable_let_patterns)]
        if let (Storage::Cpu(g), Storage::Cpu(s), Storage::Cpu(wc)) = (self, saved, w) {
            if let Some(r) = g.rnn_backward_saved(s, wc, dims)? {
                return Ok(RnnGrads {
                    dxproj: Storage::from(r.dxproj),
                    dweight: Storage::from(r.dweight),
                    dbias: Storage::from(r.dbias),
                    dh0: Storage::from(r.dh0),
                    dc0: r.dc0.map(Storage::from),
                });
            }
        }
        let ws = saved.copy_range(self.len(), saved.len())?;
        self.rnn_backward(&ws, w, dims)
    }
    /// [`Storage::rnn_backward_saved`] with the gradients of `xproj`, `w`, `b` and,
    /// `with_states`, `h0` (and `c0`) flattened and concatenated into one buffer: written
    /// there by the CPU, joined by a copy elsewhere.
    pub(crate) fn rnn_backward_saved_flat(
        &self,
        saved: &Storage,
        w: &Storage,
        dims: &RnnDims,
        with_states: bool,
    ) -> Result<Storage> {
        #[allow(irrefutable_let_patterns)]
        if let (Storage::Cpu(g), Storage::Cpu(s), Storage::Cpu(wc)) = (self, saved, w) {
            if let Some(flat) = g.rnn_backward_saved_flat(s, wc, dims, with_states)? {
                return Ok(Storage::from(flat));
            }
        }
        let r = self.rnn_backward_saved(saved, w, dims)?;
        let mut parts = vec![r.dxproj, r.dweight, r.dbias];
        if with_states {
            parts.push(r.dh0);
            parts.extend(r.dc0);
        }
        let sizes: Vec<usize> = parts.iter().map(Storage::len).collect();
        Storage::concat(&parts.iter().collect::<Vec<_>>(), &sizes, 1, 1)
    }
    /// See [`RnnOps::rnn_backward`].
    pub(crate) fn rnn_backward(
        &self,
        ws: &Storage,
        w: &Storage,
        dims: &RnnDims,
    ) -> Result<RnnGrads<Storage>> {
        const OP: &str = "rnn backward";
        match (self, ws, w) {
            (Storage::Cpu(g), Storage::Cpu(ws), Storage::Cpu(w)) => {
                let r = g.rnn_backward(ws, w, dims)?;
                Ok(RnnGrads {
                    dxproj: Storage::from(r.dxproj),
                    dweight: Storage::from(r.dweight),
                    dbias: Storage::from(r.dbias),
                    dh0: Storage::from(r.dh0),
                    dc0: r.dc0.map(Storage::from),
                })
            }
            #[cfg(feature = "cuda")]
            (Storage::Cuda(g), Storage::Cuda(ws), Storage::Cuda(w)) => {
                let r = g.rnn_backward(ws, w, dims)?;
                Ok(RnnGrads {
                    dxproj: Storage::from(r.dxproj),
                    dweight: Storage::from(r.dweight),
                    dbias: Storage::from(r.dbias),
                    dh0: Storage::from(r.dh0),
                    dc0: r.dc0.map(Storage::from),
                })
            }
            #[allow(unreachable_patterns)]
            (g, ws, _) => Err(Error::device_mismatch(OP, g.device(), ws.device())),
        }
    }
}
