//! `rnn_sequence`: finite-difference gradient checks for every mode, direction and valid
//! lengths; the valid-length semantics against truncated single-example runs; shape errors.

use sparrow_core::ops::rnn::{rnn_sequence, rnn_sequence_zero_state, RnnMode};
use sparrow_core::testing::{check_grad_on_devices, test_array};
use sparrow_core::{device_test, DType, NDArray, Result};

const MODES: [RnnMode; 4] = [
    RnnMode::RnnTanh,
    RnnMode::RnnRelu,
    RnnMode::Lstm,
    RnnMode::Gru,
];

/// `(xproj, w, b, h0, c0?)` for `t` steps, `n` examples, `h` hidden units.
fn inputs(mode: RnnMode, t: usize, n: usize, h: usize, seed: u64) -> Vec<NDArray> {
    let gh = mode.gates() * h;
    let mut v = vec![
        test_array(&[t, n, gh], -1.0, 1.0, seed),
        test_array(&[gh, h], -0.8, 0.8, seed + 1),
        test_array(&[gh], -0.5, 0.5, seed + 2),
        test_array(&[n, h], -0.9, 0.9, seed + 3),
    ];
    if mode == RnnMode::Lstm {
        v.push(test_array(&[n, h], -0.9, 0.9, seed + 4));
    }
    v
}

fn run(mode: RnnMode, x: &[NDArray], lengths: Option<&[usize]>, reverse: bool) -> Result<NDArray> {
    rnn_sequence(mode, &x[0], &x[1], &x[2], &x[3], x.get(4), lengths, reverse)
}

#[test]
fn rnn_sequence_grads() {
    let lens: [usize; 3] = [3, 1, 2];
    for mode in MODES {
        for reverse in [false, true] {
            for lengths in [None, Some(&lens[..])] {
                let xs = inputs(mode, 3, 3, 2, 7);
                let r = check_grad_on_devices(
                    |x| run(mode, x, lengths, reverse),
                    &xs,
                    1e-6,
                    1e-4,
                    1e-6,
                );
                if let Err(e) = r {
                    panic!("{mode:?} reverse={reverse} lengths={lengths:?}: {e}");
                }
            }
        }
    }
}

#[test]
fn rnn_sequence_zero_state_grads() {
    // From zero states, the operands are xproj, w, b only: finite differences of those, and
    // the same values as `rnn_sequence` given zero states.
    let lens: [usize; 3] = [3, 1, 2];
    for mode in MODES {
        for (reverse, lengths) in [(false, None), (true, Some(&lens[..]))] {
            let xs: Vec<NDArray> = inputs(mode, 3, 3, 2, 9).into_iter().take(3).collect();
            let r = check_grad_on_devices(
                |x| rnn_sequence_zero_state(mode, &x[0], &x[1], &x[2], lengths, reverse),
                &xs,
                1e-6,
                1e-4,
                1e-6,
            );
            if let Err(e) = r {
                panic!("{mode:?} reverse={reverse}: {e}");
            }
            let zero = NDArray::zeros(&[3, 2], DType::F64).unwrap();
            let c0 = (mode == RnnMode::Lstm).then(|| zero.clone());
            let given = rnn_sequence(
                mode,
                &xs[0],
                &xs[1],
                &xs[2],
                &zero,
                c0.as_ref(),
                lengths,
                reverse,
            );
            let from_zero = rnn_sequence_zero_state(mode, &xs[0], &xs[1], &xs[2], lengths, reverse);
            assert_eq!(given.unwrap().to_f64_vec(), from_zero.unwrap().to_f64_vec());
        }
    }
}

device_test! {
    /// An example of valid length L gives the outputs and final states of the same example
    /// run alone over its first L steps (reversed: over those steps from step L-1), and zeros
    /// past L.
    fn valid_lengths_match_truncated_runs() {
        let (t, n, h) = (4, 3, 3);
        let lens = [4usize, 2, 1];
        for mode in MODES {
            for reverse in [false, true] {
                let xs = inputs(mode, t, n, h, 21);
                let packed = run(mode, &xs, Some(&lens), reverse).unwrap();
                let all = packed.to_vec::<f64>().unwrap();
                let s = mode.states();
                for (r, &len) in lens.iter().enumerate() {
                    let one = |a: &NDArray, rows: Option<usize>| {
                        let a = a.slice_axis(-2, Some(r as i64), Some(r as i64 + 1), 1).unwrap();
                        match rows {
                            Some(l) => a.slice_axis(0, Some(0), Some(l as i64), 1).unwrap(),
                            None => a,
                        }
                    };
                    let mut ys = vec![one(&xs[0], Some(len)), xs[1].clone(), xs[2].clone()];
                    ys.extend(xs[3..].iter().map(|a| one(a, None)));
                    let alone = run(mode, &ys, None, reverse).unwrap().to_vec::<f64>().unwrap();
                    let at = |v: &[f64], row: usize, nb: usize, col: usize| {
                        v[(row * nb + col) * h..(row * nb + col + 1) * h].to_vec()
                    };
                    for step in 0..t {
                        let got = at(&all, step, n, r);
                        if step < len {
                            let want = at(&alone, step, 1, 0);
                            for (a, b) in got.iter().zip(&want) {
                                assert!((a - b).abs() < 1e-12, "{mode:?} rev={reverse} r={r} t={step}");
                            }
                        } else {
                            assert!(got.iter().all(|&v| v == 0.0), "{mode:?} output past length");
                        }
                    }
                    for k in 0..s {
                        let got = at(&all, t + k, n, r);
                        let want = at(&alone, len + k, 1, 0);
                        for (a, b) in got.iter().zip(&want) {
                            assert!((a - b).abs() < 1e-12, "{mode:?} final state {k} of {r}");
                        }
                    }
                }
            }
        }
    }
}

device_test! {
    /// A zero-length example outputs zeros and keeps its initial states.
    fn zero_length_keeps_initial_state() {
        let xs = inputs(RnnMode::Lstm, 2, 2, 2, 5);
        let packed = run(RnnMode::Lstm, &xs, Some(&[0, 2]), false).unwrap();
        let v = packed.to_vec::<f64>().unwrap();
        let (h0, c0) = (xs[3].to_vec::<f64>().unwrap(), xs[4].to_vec::<f64>().unwrap());
        assert!(v[..2].iter().chain(&v[4..6]).all(|&x| x == 0.0));
        assert_eq!(&v[8..10], &h0[..2]);
        assert_eq!(&v[12..14], &c0[..2]);
    }
}

device_test! {
    fn shape_and_argument_errors() {
        let xs = inputs(RnnMode::Lstm, 2, 3, 4, 1);
        let bad = |r: Result<NDArray>, needle: &str| {
            let e = r.expect_err(needle).to_string();
            assert!(e.contains(needle), "'{e}' does not mention '{needle}'");
        };
        // Gate count: an LSTM projection must be 4 * hidden wide.
        let x5 = test_array(&[2, 3, 10], -1.0, 1.0, 3);
        bad(rnn_sequence(RnnMode::Lstm, &x5, &xs[1], &xs[2], &xs[3], Some(&xs[4]), None, false),
            "input projection");
        bad(rnn_sequence(RnnMode::Lstm, &xs[0], &xs[2], &xs[2], &xs[3], Some(&xs[4]), None, false),
            "recurrent weight");
        bad(rnn_sequence(RnnMode::Lstm, &xs[0], &xs[1], &xs[1], &xs[3], Some(&xs[4]), None, false),
            "recurrent bias");
        bad(rnn_sequence(RnnMode::Lstm, &xs[0], &xs[1], &xs[2], &xs[1], Some(&xs[4]), None, false),
            "initial hidden state");
        bad(rnn_sequence(RnnMode::Lstm, &xs[0], &xs[1], &xs[2], &xs[3], None, None, false),
            "cell state");
        let g = inputs(RnnMode::Gru, 2, 3, 4, 1);
        bad(rnn_sequence(RnnMode::Gru, &g[0], &g[1], &g[2], &g[3], Some(&g[3]), None, false),
            "takes no cell state");
        bad(run(RnnMode::Lstm, &xs, Some(&[1, 2]), false), "valid lengths");
        bad(run(RnnMode::Lstm, &xs, Some(&[1, 2, 3]), false), "exceeds");
        let w32 = xs[1].astype(DType::F32).unwrap();
        bad(rnn_sequence(RnnMode::Lstm, &xs[0], &w32, &xs[2], &xs[3], Some(&xs[4]), None, false),
            "dtypes");
    }
}
