"""PyTorch reference fixtures for sparrow-nn's recurrent layers (RNN tanh/relu, LSTM, GRU).

For each case: a small layer (torch.nn.RNN / LSTM / GRU) with seeded weights, an input and
initial states, optionally per-example valid lengths (through pack_padded_sequence, whose
semantics sparrow's valid lengths follow: zero outputs past a length, final state at the last
valid step, the reverse direction starting at each sequence's own end). The scalar
    loss = sum(out * r_out) + sum(h_n * r_h) [+ sum(c_n * r_c)]
with fixed random weights r_* is backpropagated; the fixture holds the weights (under Gluon's
names: weight_ih_l0 -> l0_i2h_weight, bias_hh_l1_reverse -> r1_h2h_bias, ...), the inputs, the
r_* weights, and torch's outputs, final states and the gradients of the input, the initial
states and every weight. The Rust test nn/tests/rnn_torch.rs rebuilds each case and compares
(f32, ~1e-5).

Run: python scripts/rnn_fixtures.py OUT.json   (torch and numpy installed; CPU)
     the repository keeps the output at nn/tests/data/rnn_torch.json
"""
import json
import sys

import torch

CASES = [
    # name, kind, input, hidden, layers, bidirectional, T, N, initial states, lengths, batch_first
    ("lstm_2layer_bidir_states", "lstm", 3, 4, 2, True, 5, 2, True, None, False),
    ("lstm_bidir_lengths", "lstm", 3, 4, 1, True, 5, 3, True, [5, 2, 3], False),
    ("gru_bidir", "gru", 3, 4, 1, True, 4, 3, False, None, False),
    ("gru_2layer_lengths_ntc", "gru", 2, 3, 2, False, 4, 3, True, [4, 1, 3], True),
    ("rnn_tanh_2layer_states", "rnn_tanh", 3, 4, 2, False, 4, 2, True, None, False),
    ("rnn_relu_bidir", "rnn_relu", 3, 5, 1, True, 3, 2, False, [3, 2], False),
]


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def gluon_name(torch_name):
    # weight_ih_l0[_reverse] -> l0_i2h_weight / r0_i2h_weight
    kind, part, layer = torch_name.split("_")[:3]
    direction = "r" if torch_name.endswith("_reverse") else "l"
    return f"{direction}{layer[1:]}_{part[0]}2h_{kind}"


def main(out_path):
    torch.manual_seed(2024)
    cases = []
    for name, kind, inp, hid, layers, bidir, T, N, with_states, lengths, batch_first in CASES:
        if kind == "lstm":
            m = torch.nn.LSTM(inp, hid, layers, bidirectional=bidir, batch_first=batch_first)
        elif kind == "gru":
            m = torch.nn.GRU(inp, hid, layers, bidirectional=bidir, batch_first=batch_first)
        else:
            nl = "tanh" if kind == "rnn_tanh" else "relu"
            m = torch.nn.RNN(inp, hid, layers, nonlinearity=nl, bidirectional=bidir,
                             batch_first=batch_first)
        dirs = 2 if bidir else 1
        shape = (N, T, inp) if batch_first else (T, N, inp)
        x = (torch.rand(shape) * 2 - 1).requires_grad_(True)
        states = []
        if with_states:
            states = [(torch.rand(layers * dirs, N, hid) - 0.5).requires_grad_(True)
                      for _ in range(2 if kind == "lstm" else 1)]
        hx = None
        if states:
            hx = tuple(states) if kind == "lstm" else states[0]
        if lengths is not None:
            packed = torch.nn.utils.rnn.pack_padded_sequence(
                x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False)
            out_p, hn = m(packed, hx)
            out, _ = torch.nn.utils.rnn.pad_packed_sequence(
                out_p, batch_first=batch_first, total_length=T)
        else:
            out, hn = m(x, hx)
        finals = list(hn) if kind == "lstm" else [hn]
        r_out = torch.rand(out.shape) - 0.5
        r_fin = [torch.rand(f.shape) - 0.5 for f in finals]
        loss = (out * r_out).sum() + sum((f * r).sum() for f, r in zip(finals, r_fin))
        loss.backward()
        case = {
            "name": name, "kind": kind, "input": inp, "hidden": hid, "layers": layers,
            "bidirectional": bidir, "T": T, "N": N, "lengths": lengths,
            "layout": "NTC" if batch_first else "TNC",
            "x": flat(x), "x_shape": list(x.shape),
            "states": [flat(s) for s in states],
            "params": {gluon_name(n): flat(p) for n, p in m.named_parameters()},
            "param_shapes": {gluon_name(n): list(p.shape) for n, p in m.named_parameters()},
            "r_out": flat(r_out), "r_finals": [flat(r) for r in r_fin],
            "out": flat(out), "out_shape": list(out.shape), "finals": [flat(f) for f in finals],
            "grad_x": flat(x.grad),
            "grad_states": [flat(s.grad) for s in states],
            "grad_params": {gluon_name(n): flat(p.grad) for n, p in m.named_parameters()},
        }
        cases.append(case)
    doc = {"torch_version": torch.__version__, "cases": cases}
    with open(out_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: rnn_fixtures.py OUT.json")
    main(sys.argv[1])
