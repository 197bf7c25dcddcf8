use sparrow_core::testing::{check_grad_on_devices, test_array};
use sparrow_core::{autograd, device_test, DType, NDArray};

device_test! {
fn square_sum_grad() {
    let x = NDArray::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    x.attach_grad();
    let y = autograd::record(|| x.mul(&x)?.sum_all()).unwrap();
    y.backward().unwrap();
    let g = x.grad().expect("grad attached");
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
}
}

#[test]
fn broadcast_binary_grads() {
    let a = test_array(&[3, 4], -1.0, 1.0, 1);
    let b = test_array(&[4], 0.5, 1.5, 2);
    for f in [
        |x: &[NDArray]| x[0].add(&x[1]),
        |x: &[NDArray]| x[0].sub(&x[1]),
        |x: &[NDArray]| x[0].mul(&x[1]),
        |x: &[NDArray]| x[0].div(&x[1]),
        |x: &[NDArray]| x[0].maximum(&x[1]),
    ] {
        check_grad_on_devices(f, &[a.clone(), b.clone()], 1e-6, 1e-5, 1e-7).unwrap();
    }
}

#[test]
fn dot_grads() {
    let a = test_array(&[3, 5], -1.0, 1.0, 3);
    let b = test_array(&[5, 2], -1.0, 1.0, 4);
    check_grad_on_devices(
        |x| x[0].dot(&x[1]),
        &[a.clone(), b.clone()],
        1e-6,
        1e-5,
        1e-7,
    )
    .unwrap();
    let bt = test_array(&[2, 5], -1.0, 1.0, 5);
    check_grad_on_devices(
        |x| x[0].dot_t(&x[1], false, true),
        &[a.clone(), bt],
        1e-6,
        1e-5,
        1e-7,
    )
    .unwrap();
    let at = test_array(&[5, 3], -1.0, 1.0, 6);
    check_grad_on_devices(
        |x| x[0].dot_t(&x[1], true, false),
        &[at, b],
        1e-6,
        1e-5,
        1e-7,
    )
    .unwrap();
    let _ = DType::F32;
}

device_test! {
fn dot_backward_computes_only_the_gradients_inputs_need() {
    // A data batch without attach_grad gets no gradient product (in a Dense layer on a wide
    // input that product is as large as the forward one); an attached one does.
    let w = test_array(&[3, 5], -1.0, 1.0, 11);
    w.attach_grad();
    let g = test_array(&[2, 3], -1.0, 1.0, 12);
    for x_needs in [false, true] {
        let x = test_array(&[2, 5], -1.0, 1.0, 13);
        if x_needs {
            x.attach_grad();
        }
        let y = autograd::record(|| x.dot_t(&w, false, true)).unwrap();
        let node = y.node().expect("recorded");
        let grads = (node.backward)(&g).unwrap();
        assert_eq!(grads[0].is_some(), x_needs, "gradient of the batch");
        assert!(grads[1].is_some(), "gradient of the weight");
    }
}
}

device_test! {
fn a_stored_gradient_is_never_an_array_someone_else_holds() {
    // The engine stores a leaf's gradient without a new handle when the backward pass created
    // it and holds it alone; a head gradient handed through (x + 0, x * 1 pass it on) or one
    // shared between two leaves must still be detached into arrays of their own.
    let x = NDArray::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    let z = NDArray::from_vec(vec![4.0f32, 5.0, 6.0], &[3]).unwrap();
    x.attach_grad();
    z.attach_grad();
    let y = autograd::record(|| x.add(&z)).unwrap();
    let head = NDArray::from_vec(vec![0.5f32, -1.0, 2.0], &[3]).unwrap();
    y.backward_with_grad(&head).unwrap();
    let (gx, gz) = (x.grad().unwrap(), z.grad().unwrap());
    assert!(!gx.same_array(&head) && !gz.same_array(&head) && !gx.same_array(&gz));
    assert_eq!(gx.to_vec::<f32>().unwrap(), vec![0.5, -1.0, 2.0]);
    assert_eq!(gz.to_vec::<f32>().unwrap(), vec![0.5, -1.0, 2.0]);
    // Clearing one gradient leaves the other and the caller's head gradient alone.
    x.zero_grad();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(
        z.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![0.5, -1.0, 2.0]
    );
    assert_eq!(head.to_vec::<f32>().unwrap(), vec![0.5, -1.0, 2.0]);

    // A gradient the backward pass computed (2 x) is stored, and a second backward replaces it.
    let w = NDArray::from_vec(vec![1.0f32, -2.0], &[2]).unwrap();
    w.attach_grad();
    for _ in 0..2 {
        let l = autograd::record(|| w.mul(&w)?.sum_all()).unwrap();
        l.backward().unwrap();
        assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), vec![2.0, -4.0]);
        assert!(w.grad().unwrap().node().is_none());
    }
}
}

device_test! {
fn retain_graph_keeps_the_graph_and_the_default_releases_it() {
    use sparrow_core::autograd::{backward_with, GradReq};
    use sparrow_core::SType;
    let x = NDArray::from_vec(vec![1.0f32, -2.0, 3.0], &[3]).unwrap();
    x.attach_grad_with(GradReq::Add, SType::Dense);
    // y = sum(x * x + x): a shared input, an intermediate and a two-input node.
    let (sq, y) = autograd::record(|| {
        let sq = x.mul(&x)?;
        let y = sq.add(&x)?.sum_all()?;
        Ok::<_, sparrow_core::Error>((sq, y))
    })
    .unwrap();
    backward_with(&y, None, true).unwrap();
    assert!(sq.node().is_some(), "retain_graph keeps intermediate nodes");
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![3.0, -3.0, 7.0]
    );
    // Kept: a second backward adds the same gradient again (grad_req = add).
    backward_with(&y, None, true).unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![6.0, -6.0, 14.0]
    );
    // The default releases the graph: after it the head is no longer part of one.
    y.backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![9.0, -9.0, 21.0]
    );
    assert!(
        sq.node().is_none(),
        "the default releases intermediate nodes too"
    );
    let err = y.backward().unwrap_err().to_string();
    assert!(err.contains("not part of a recorded graph"), "{err}");
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![9.0, -9.0, 21.0]
    );
}
}

device_test! {
fn backward_outside_a_graph_is_an_error_and_inputs_without_gradients_get_none() {
    let x = NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let plain = x.mul(&x).unwrap().sum_all().unwrap();
    let err = plain.backward().unwrap_err().to_string();
    assert!(err.contains("not part of a recorded graph"), "{err}");
    // Only `w` wants a gradient: `c` is an input of the graph that is never part of it.
    let w = NDArray::from_vec(vec![0.5f32, -1.5], &[2]).unwrap();
    w.attach_grad();
    let c = NDArray::from_vec(vec![2.0f32, 3.0], &[2]).unwrap();
    let y = autograd::record(|| w.mul(&c)?.mul(&w)?.sum_all()).unwrap();
    y.backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), vec![2.0, -9.0]);
    assert!(c.grad().is_none());
}
}

device_test! {
fn a_node_is_freed_as_soon_as_its_backward_has_run() {
    use sparrow_core::autograd::record_op;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // z = second(first(x)). `second`'s backward holds `probe`; when `first`'s backward runs
    // (after it), `second`'s node must already be gone, and with it its hold on `probe`.
    let x = NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    x.attach_grad();
    let probe = Arc::new(());
    let (held, seen) = (probe.clone(), Arc::new(AtomicUsize::new(usize::MAX)));
    let (weak, seen_in) = (Arc::downgrade(&probe), seen.clone());
    drop(probe);
    let z = autograd::record(|| {
        let y = record_op("first", x.copy(), &[&x], move |g| {
            seen_in.store(weak.strong_count(), Ordering::SeqCst);
            Ok(vec![Some(g.clone())])
        });
        let z = record_op("second", y.copy(), &[&y], move |g| {
            let _keep = &held;
            Ok(vec![Some(g.clone())])
        });
        Ok::<_, sparrow_core::Error>(z)
    })
    .unwrap();
    z.backward_with_grad(&NDArray::from_vec(vec![1.0f32, 1.0], &[2]).unwrap())
        .unwrap();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "`second`'s node outlived its backward"
    );
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 1.0]);
}
}

#[test]
fn a_product_of_an_array_with_itself_is_read_once_and_differentiated_on_both_sides() {
    // x . x^T: both operands are one array (one read lock in `with_dense2`, which must not
    // lock it twice); the gradient gets both operands' halves.
    let x = test_array(&[3, 4], -1.0, 1.0, 11);
    let p = x.dot_t(&x, false, true).unwrap();
    let (xv, pv) = (x.to_f64_vec(), p.to_f64_vec());
    for i in 0..3 {
        for j in 0..3 {
            let want: f64 = (0..4).map(|k| xv[i * 4 + k] * xv[j * 4 + k]).sum();
            assert!((pv[i * 3 + j] - want).abs() < 1e-12);
        }
    }
    check_grad_on_devices(
        |xs| xs[0].dot_t(&xs[0], false, true)?.sum_all(),
        std::slice::from_ref(&x),
        1e-6,
        1e-5,
        1e-7,
    )
    .unwrap();
}
