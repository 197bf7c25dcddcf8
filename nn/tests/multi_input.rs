//! Blocks with several inputs and outputs (`Block::forward_multi`): the defaults between
//! `forward` and `forward_multi`, their errors, `Sequential` and `summary` over several inputs,
//! the recurrent layers' `[x, states..]` form, and gradients through two inputs.

use sparrow_core::testing::{check_grad, test_array};
use sparrow_core::{autograd, device_test, DType, Device, NDArray, Result};
use sparrow_nn::block::inputs;
use sparrow_nn::{Block, Dense, Initializer, LSTMCell, Sequential, LSTM};

/// Two inputs, two outputs: `(a + b, a * b)`.
struct SumProd;

impl Block for SumProd {
    fn forward_multi(&self, xs: &[NDArray]) -> Result<Vec<NDArray>> {
        let [a, b] = inputs(self.kind(), xs)?;
        Ok(vec![a.add(b)?, a.mul(b)?])
    }
    fn kind(&self) -> &'static str {
        "sumprod"
    }
}

/// Two inputs, one output: `dense_a(a) + dense_b(b)`.
struct TwoTower {
    a: Dense,
    b: Dense,
}

impl Block for TwoTower {
    fn forward_multi(&self, xs: &[NDArray]) -> Result<Vec<NDArray>> {
        let [a, b] = inputs(self.kind(), xs)?;
        Ok(vec![self.a.forward(a)?.add(&self.b.forward(b)?)?])
    }
    fn kind(&self) -> &'static str {
        "twotower"
    }
    fn children(&self) -> Vec<(String, &dyn Block)> {
        vec![("a".into(), &self.a), ("b".into(), &self.b)]
    }
}

/// Implements neither forward method.
struct Nothing;

impl Block for Nothing {
    fn kind(&self) -> &'static str {
        "nothing"
    }
}

/// A seeded f32 array with values in [-1, 1).
fn arr(shape: &[usize], seed: u64) -> NDArray {
    test_array(shape, -1.0, 1.0, seed)
        .astype(DType::F32)
        .unwrap()
}

/// A line of a summary table that starts with `start` and contains `has`.
fn row(table: &str, start: &str, has: &str) -> bool {
    table
        .lines()
        .any(|l| l.starts_with(start) && l.contains(has))
}

fn vec2(v: [f32; 2]) -> NDArray {
    NDArray::from_vec(v.to_vec(), &[2]).unwrap()
}

#[test]
fn forward_multi_gives_every_output() {
    let out = SumProd
        .forward_multi(&[vec2([1.0, 2.0]), vec2([3.0, 4.0])])
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![3.0, 8.0]);
    // Through a trait object, as containers hold blocks.
    let boxed: Box<dyn Block> = Box::new(SumProd);
    let out = boxed
        .forward_multi(&[vec2([1.0, 2.0]), vec2([3.0, 4.0])])
        .unwrap();
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![3.0, 8.0]);
}

#[test]
fn wrong_input_counts_are_errors_naming_the_block() {
    let err = SumProd.forward(&vec2([1.0, 2.0])).unwrap_err().to_string();
    assert_eq!(err, "sumprod: invalid argument: takes 2 inputs, got 1");
    let three = [vec2([1.0, 2.0]), vec2([1.0, 2.0]), vec2([1.0, 2.0])];
    let err = SumProd.forward_multi(&three).unwrap_err().to_string();
    assert_eq!(err, "sumprod: invalid argument: takes 2 inputs, got 3");
    // A one-input block called with two.
    let d = Dense::new(2).in_units(2);
    d.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let err = d.forward_multi(&three[..2]).unwrap_err().to_string();
    assert_eq!(err, "dense: invalid argument: takes 1 input, got 2");
    assert_eq!(d.forward_multi(&[arr(&[3, 2], 1)]).unwrap().len(), 1);
}

#[test]
fn a_multi_output_block_through_forward_is_an_error() {
    /// One input, two outputs.
    struct Split;
    impl Block for Split {
        fn forward_multi(&self, xs: &[NDArray]) -> Result<Vec<NDArray>> {
            let [x] = inputs(self.kind(), xs)?;
            Ok(vec![x.clone(), x.mul_scalar(2.0)?])
        }
        fn kind(&self) -> &'static str {
            "split"
        }
    }
    let err = Split.forward(&vec2([1.0, 2.0])).unwrap_err().to_string();
    assert!(
        err.contains("split: invalid argument: forward returns one output but this block has 2"),
        "{err}"
    );
    assert_eq!(Split.forward_multi(&[vec2([1.0, 2.0])]).unwrap().len(), 2);
}

#[test]
fn a_block_with_neither_forward_is_an_error_not_a_stack_overflow() {
    let err = Nothing.forward(&vec2([1.0, 2.0])).unwrap_err().to_string();
    assert!(
        err.contains("implements neither Block::forward nor Block::forward_multi"),
        "{err}"
    );
    let err = Nothing
        .forward_multi(&[vec2([1.0, 2.0])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("implements neither"), "{err}");
    // The guard is per block: a working block called afterwards (and nested) is unaffected.
    assert_eq!(
        SumProd
            .forward_multi(&[vec2([1.0, 2.0]), vec2([1.0, 2.0])])
            .unwrap()
            .len(),
        2
    );
}

device_test! {
fn sequential_feeds_each_blocks_outputs_to_the_next() {
    let mut net = Sequential::new();
    net.add(TwoTower { a: Dense::new(3), b: Dense::new(3) });
    net.add(Dense::new(1));
    net.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let a = NDArray::ones(&[4, 5], DType::F32).unwrap();
    let b = NDArray::ones(&[4, 2], DType::F32).unwrap();
    let y = net.forward_multi(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(y.len(), 1);
    assert_eq!(y[0].shape(), vec![4, 1]);
    assert_eq!(
        net.collect_params().unwrap().names(),
        vec![
            "twotower0.a.weight",
            "twotower0.a.bias",
            "twotower0.b.weight",
            "twotower0.b.bias",
            "dense0.weight",
            "dense0.bias"
        ]
    );
    // One input into a two-input first block: its error, through the container.
    let err = net.forward(&a).unwrap_err().to_string();
    assert!(err.contains("twotower: invalid argument: takes 2 inputs, got 1"), "{err}");
    let s = net.summary_multi(&[a, b]).unwrap();
    assert!(row(&s, "input ", "[4, 5], [4, 2] "), "{s}");
    assert!(row(&s, "sequential.twotower0 twotower ", " [4, 3] "), "{s}");
    assert!(row(&s, "sequential.dense0 Dense(3 -> 1, linear) ", " [4, 1] "), "{s}");
}
}

#[test]
fn summary_lists_every_output_of_a_multi_output_block() {
    let s = SumProd
        .summary_multi(&[vec2([1.0, 2.0]), vec2([3.0, 4.0])])
        .unwrap();
    assert!(row(&s, "sumprod sumprod ", " [2], [2] "), "{s}");
}

device_test! {
fn gradients_reach_both_inputs() {
    let net = TwoTower {
        a: Dense::new(3).in_units(4).dtype(DType::F64),
        b: Dense::new(3).in_units(2).dtype(DType::F64),
    };
    net.initialize(&Initializer::Normal { sigma: 0.5 }, Device::current()).unwrap();
    let a = test_array(&[5, 4], -1.0, 1.0, 1);
    let b = test_array(&[5, 2], -1.0, 1.0, 2);
    check_grad(|xs| Ok(net.forward_multi(xs)?.remove(0)), &[a, b], 1e-6, 1e-4, 1e-7).unwrap();
    // The weights of both towers get a gradient from one backward.
    let x = [test_array(&[5, 4], -1.0, 1.0, 3), test_array(&[5, 2], -1.0, 1.0, 4)];
    let l = autograd::record(|| net.forward_multi(&x)?[0].sum_all()).unwrap();
    l.backward().unwrap();
    for (n, p) in net.collect_params().unwrap().iter() {
        assert!(p.grad().is_some(), "{n} has no gradient");
    }
}
}

device_test! {
fn lstm_takes_and_returns_states() {
    let lstm = LSTM::new(3).input_size(2);
    lstm.initialize(&Initializer::Normal { sigma: 0.3 }, Device::current()).unwrap();
    let x = arr(&[4, 2, 2], 5);
    let st = vec![arr(&[1, 2, 3], 6), arr(&[1, 2, 3], 7)];
    let (want, want_states) = lstm.forward_with(&x, Some(&st), None).unwrap();
    let out = lstm.forward_multi(&[x.clone(), st[0].clone(), st[1].clone()]).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert_eq!(out[1].to_vec::<f32>().unwrap(), want_states[0].to_vec::<f32>().unwrap());
    assert_eq!(out[2].to_vec::<f32>().unwrap(), want_states[1].to_vec::<f32>().unwrap());
    // [x] alone: the output only, as forward.
    let only = lstm.forward_multi(std::slice::from_ref(&x)).unwrap();
    assert_eq!(only.len(), 1);
    let err = lstm.forward_multi(&[x.clone(), st[0].clone()]).unwrap_err().to_string();
    assert!(err.contains("takes 2 initial state array(s), got 1"), "{err}");
    assert!(lstm.forward_multi(&[]).unwrap_err().to_string().contains("no input"));

    let cell = LSTMCell::new(3).input_size(2);
    cell.initialize(&Initializer::Normal { sigma: 0.3 }, Device::current()).unwrap();
    let xt = arr(&[2, 2], 8);
    let s = [arr(&[2, 3], 9), arr(&[2, 3], 10)];
    let out = cell.forward_multi(&[xt.clone(), s[0].clone(), s[1].clone()]).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].shape(), vec![2, 3]);
    assert!(cell.forward_multi(&[xt, s[0].clone()]).is_err());
}
}

#[test]
fn a_panicking_forward_leaves_no_guard_behind() {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Panics inside its forward_multi while its flag is set.
    struct Boom(AtomicBool);
    impl Block for Boom {
        fn forward_multi(&self, xs: &[NDArray]) -> Result<Vec<NDArray>> {
            assert!(!self.0.load(Ordering::SeqCst), "boom");
            Ok(xs.to_vec())
        }
        fn kind(&self) -> &'static str {
            "boom"
        }
    }
    let x = vec2([1.0, 2.0]);
    let b = Boom(AtomicBool::new(true));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.forward(&x)));
    assert!(caught.is_err());
    // The same block again: had the panic left it marked as running its default forward, this
    // call would be refused as a recursion.
    b.0.store(false, Ordering::SeqCst);
    assert_eq!(
        b.forward(&x).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 2.0]
    );
}
