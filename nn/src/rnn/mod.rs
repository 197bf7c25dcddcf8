//! Recurrent networks (Gluon's `gluon.rnn`): the cells [`RNNCell`], [`LSTMCell`], [`GRUCell`]
//! for hand-written time loops, and the layers [`RNN`], [`LSTM`], [`GRU`] over whole
//! sequences. Parameter names, shapes and gate order are Gluon's (`i2h_weight`, `h2h_weight`,
//! `i2h_bias`, `h2h_bias`; layers prefix them `l0_`, `r0_`, ...; LSTM gates `i, f, g, o`, GRU
//! `r, z, n`), which is also PyTorch's layout (`weight_ih_l0` is `l0_i2h_weight`).

mod cell;
mod layer;
mod project;

pub use cell::{GRUCell, LSTMCell, RNNCell, RecurrentCell};
pub use layer::{Layout, GRU, LSTM, RNN};
