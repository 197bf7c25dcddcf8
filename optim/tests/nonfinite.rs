//! Gradients holding NaN or inf: the Trainer's check (error or skipped step) and
//! clip_global_norm's refusal.

use sparrow_core::{device_test, NDArray};
use sparrow_nn::{Initializer, Parameter};
use sparrow_optim::*;

fn param(name: &str, vals: Vec<f32>) -> Parameter {
    let p = Parameter::new(name, &[vals.len()]);
    p.initialize(&Initializer::Zero, None).unwrap();
    let n = vals.len();
    p.set_data(&NDArray::from_vec(vals, &[n]).unwrap()).unwrap();
    p
}

fn grad(p: &Parameter, g: Vec<f32>) {
    let n = g.len();
    p.data()
        .unwrap()
        .set_grad(Some(NDArray::from_vec(g, &[n]).unwrap()));
}

device_test! {
fn nonfinite_gradients_fail_or_skip_the_step() {
    let (a, b) = (param("a", vec![1.0, 2.0]), param("b", vec![3.0]));
    let mut t = Trainer::new(vec![a.clone(), b.clone()], Sgd::new(0.5)).unwrap();
    // Default: no check, the NaN reaches the weight (as in Gluon).
    grad(&a, vec![f32::NAN, 0.0]);
    grad(&b, vec![1.0]);
    t.step(1).unwrap();
    assert!(a.data().unwrap().to_vec::<f32>().unwrap()[0].is_nan());

    // Error: names the parameter, changes nothing.
    let (a, b) = (param("a", vec![1.0, 2.0]), param("b", vec![3.0]));
    let mut t = Trainer::new(vec![a.clone(), b.clone()], Sgd::new(0.5)).unwrap();
    t.set_nonfinite(NonFinite::Error);
    grad(&a, vec![1.0, 1.0]);
    grad(&b, vec![f32::INFINITY]);
    let e = t.step(1).unwrap_err().to_string();
    assert!(e.contains("'b'") && !e.contains("'a'"), "{e}");
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    assert_eq!(b.data().unwrap().to_vec::<f32>().unwrap(), vec![3.0]);

    // SkipStep: the step is skipped and counted; a finite step afterwards applies.
    t.set_nonfinite(NonFinite::SkipStep);
    grad(&a, vec![1.0, 1.0]);
    grad(&b, vec![f32::NAN]);
    t.step(1).unwrap();
    assert_eq!(t.skipped_steps(), 1);
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    grad(&a, vec![2.0, 2.0]);
    grad(&b, vec![2.0]);
    t.step(1).unwrap();
    assert_eq!(t.skipped_steps(), 1);
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 1.0]);
    assert_eq!(b.data().unwrap().to_vec::<f32>().unwrap(), vec![2.0]);

    // A row_sparse gradient is checked through its stored rows.
    let w = Parameter::new("w", &[4, 2]).with_grad_stype(sparrow_core::SType::RowSparse);
    w.initialize(&Initializer::Zero, None).unwrap();
    let mut t = Trainer::new(vec![w.clone()], Sgd::new(0.5)).unwrap();
    t.set_nonfinite(NonFinite::Error);
    let g = NDArray::row_sparse_from_parts(vec![1.0f32, f32::NAN], vec![2], &[4, 2])
        .unwrap()
        .to_device(sparrow_core::testing::test_device())
        .unwrap();
    w.data().unwrap().set_grad(Some(g));
    assert!(t.step(1).unwrap_err().to_string().contains("'w'"));
}
}

device_test! {
fn clip_global_norm_refuses_a_nonfinite_norm() {
    let g = NDArray::from_vec(vec![3.0f32, f32::NAN], &[2]).unwrap();
    let e = clip_global_norm(std::slice::from_ref(&g), 1.0).unwrap_err().to_string();
    assert!(e.contains("NaN or inf"), "{e}");
    // Nothing was scaled.
    assert_eq!(g.to_vec::<f32>().unwrap()[0], 3.0);
}
}
