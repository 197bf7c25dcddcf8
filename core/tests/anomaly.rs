//! Anomaly detection names the first operator that made a NaN or infinity (issue #27).

use sparrow_core::{autograd, NDArray};

fn leaf(v: Vec<f32>) -> NDArray {
    let n = v.len();
    let x = NDArray::from_vec(v, &[n]).unwrap();
    x.attach_grad();
    x
}

#[test]
fn a_forward_nan_is_named_at_backward() {
    let x = leaf(vec![1.0, 0.0, 2.0]);
    // Without detection, log(0) = -inf flows on and backward succeeds with an infinite grad.
    let y = autograd::record(|| x.log()?.mul_scalar(2.0)?.sum_all()).unwrap();
    y.backward().unwrap();
    assert!(x.grad().unwrap().to_vec::<f32>().unwrap()[1].is_infinite());
    // With it, backward fails naming `log` (not the mul or the sum that only carried it on).
    let e = autograd::detect_anomaly(|| {
        let y = autograd::record(|| x.log()?.mul_scalar(2.0)?.sum_all())?;
        y.backward()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("forward operator `log`"), "{e}");
    assert!(
        !autograd::is_detecting_anomaly(),
        "the scope restores the flag"
    );
}

#[test]
fn a_backward_that_makes_infinity_is_named() {
    // sqrt(0) is finite, its derivative 1 / (2 sqrt(0)) is not.
    let x = leaf(vec![0.0, 4.0]);
    let e = autograd::detect_anomaly(|| {
        let y = autograd::record(|| x.sqrt()?.sum_all())?;
        y.backward()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("backward of operator `sqrt`"), "{e}");
}

#[test]
fn finite_graphs_pass_and_inputs_already_nan_are_not_blamed() {
    let x = leaf(vec![1.0, 4.0]);
    autograd::detect_anomaly(|| {
        let y = autograd::record(|| x.sqrt()?.mul(&x)?.sum_all())?;
        y.backward()
    })
    .unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![1.5, 3.0]);
    // The NaN comes in with the data: no operator made it, so none is blamed.
    let z = leaf(vec![f32::NAN, 1.0]);
    autograd::detect_anomaly(|| {
        let y = autograd::record(|| z.mul_scalar(3.0)?.sum_all())?;
        y.backward()
    })
    .unwrap();
}
