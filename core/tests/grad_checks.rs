//! Finite-difference gradient checks (f64) for every differentiable dense operator.

use sparrow_core::testing::{check_grad_on_devices, test_array};
use sparrow_core::{NDArray, Result};

type F = fn(&[NDArray]) -> Result<NDArray>;

fn gc(name: &str, f: F, inputs: &[NDArray]) {
    if let Err(e) = check_grad_on_devices(f, inputs, 1e-6, 1e-4, 1e-6) {
        panic!("{name}: {e}");
    }
}

fn x34() -> NDArray {
    test_array(&[3, 4], -1.0, 1.0, 11)
}
fn pos34() -> NDArray {
    test_array(&[3, 4], 0.5, 2.0, 12)
}

#[test]
fn unary_grads() {
    let cases: &[(&str, F)] = &[
        ("neg", |x| x[0].neg()),
        ("exp", |x| x[0].exp()),
        ("square", |x| x[0].square()),
        ("abs", |x| x[0].abs()),
        ("sign", |x| x[0].sign()),
        ("sigmoid", |x| x[0].sigmoid()),
        ("relu", |x| x[0].relu()),
        ("tanh", |x| x[0].tanh()),
        ("softrelu", |x| x[0].softrelu()),
        ("leaky_relu", |x| x[0].leaky_relu(0.1)),
        ("elu", |x| x[0].elu(0.7)),
        ("selu", |x| x[0].selu()),
        ("gelu", |x| x[0].gelu()),
        ("gelu_tanh", |x| x[0].gelu_tanh()),
        ("swish", |x| x[0].swish(1.5)),
        ("silu", |x| x[0].silu()),
        ("softsign", |x| x[0].softsign()),
        ("log_sigmoid", |x| x[0].log_sigmoid()),
        ("mish", |x| x[0].mish()),
    ];
    for (n, f) in cases {
        gc(n, *f, &[x34()]);
    }
    // The activations' tails (|x| up to 6), where their derivatives bend.
    let wide = test_array(&[3, 4], -6.0, 6.0, 13);
    for (n, f) in &cases[cases.len() - 9..] {
        gc(n, *f, std::slice::from_ref(&wide));
    }
    gc("log", |x| x[0].log(), &[pos34()]);
    gc("sqrt", |x| x[0].sqrt(), &[pos34()]);
}

#[test]
fn astype_passes_the_gradient_back_cast_to_the_input_dtype() {
    use sparrow_core::{autograd, DType};
    let x = test_array(&[3, 4], -1.0, 1.0, 21)
        .astype(DType::F32)
        .unwrap();
    let c = test_array(&[3, 4], -2.0, 2.0, 22);
    x.attach_grad();
    let y = autograd::record(|| x.astype(DType::F64)?.mul(&c)?.sum_all()).unwrap();
    y.backward().unwrap();
    let g = x.grad().expect("a gradient through the cast");
    assert_eq!(g.dtype(), DType::F32);
    assert_eq!(
        g.to_vec::<f32>().unwrap(),
        c.astype(DType::F32).unwrap().to_vec::<f32>().unwrap()
    );
    // f64 -> f64 is the identity, and its gradient too.
    gc(
        "astype",
        |x| x[0].astype(sparrow_core::DType::F64)?.mul(&x[0]),
        &[x34()],
    );
    // A cast to an integer type carries no gradient.
    let z = test_array(&[3, 4], -1.0, 1.0, 23);
    z.attach_grad();
    let w =
        autograd::record(|| z.astype(DType::I64)?.astype(DType::F64)?.add(&z)?.sum_all()).unwrap();
    w.backward().unwrap();
    assert_eq!(z.grad().unwrap().to_vec::<f64>().unwrap(), vec![1.0; 12]);
}

#[test]
fn scalar_op_grads() {
    let cases: &[(&str, F)] = &[
        ("add_scalar", |x| x[0].add_scalar(2.5)),
        ("sub_scalar", |x| x[0].sub_scalar(1.5)),
        ("rsub_scalar", |x| x[0].rsub_scalar(3.0)),
        ("mul_scalar", |x| x[0].mul_scalar(-2.0)),
        ("div_scalar", |x| x[0].div_scalar(4.0)),
        ("maximum_scalar", |x| x[0].maximum_scalar(0.1)),
        ("minimum_scalar", |x| x[0].minimum_scalar(0.1)),
        ("clip", |x| x[0].clip(-0.5, 0.5)),
    ];
    for (n, f) in cases {
        gc(n, *f, &[x34()]);
    }
    gc("rdiv_scalar", |x| x[0].rdiv_scalar(2.0), &[pos34()]);
    gc("pow_scalar", |x| x[0].pow_scalar(2.5), &[pos34()]);
}

#[test]
fn binary_broadcast_grads() {
    let cases: &[(&str, F)] = &[
        ("add", |x| x[0].add(&x[1])),
        ("sub", |x| x[0].sub(&x[1])),
        ("mul", |x| x[0].mul(&x[1])),
        ("div", |x| x[0].div(&x[1])),
        ("pow", |x| x[0].pow(&x[1])),
        ("maximum", |x| x[0].maximum(&x[1])),
        ("minimum", |x| x[0].minimum(&x[1])),
    ];
    // Same shape, row broadcast, column broadcast, and both-sided broadcast.
    let shapes: [(&[usize], &[usize]); 4] = [
        (&[3, 4], &[3, 4]),
        (&[3, 4], &[4]),
        (&[3, 1], &[3, 4]),
        (&[2, 1, 4], &[3, 1]),
    ];
    for (sa, sb) in shapes {
        for (n, f) in cases {
            let a = test_array(sa, 0.5, 2.0, 21);
            let b = test_array(sb, 0.6, 1.9, 22);
            gc(&format!("{n} {sa:?} {sb:?}"), *f, &[a, b]);
        }
    }
}

#[test]
fn reduction_grads() {
    let x = test_array(&[2, 3, 4], -1.0, 1.0, 31);
    let cases: &[(&str, F)] = &[
        ("sum all", |x| x[0].sum(None, false)),
        ("sum axis1", |x| x[0].sum(Some(&[1]), false)),
        ("sum axes0,2 keep", |x| x[0].sum(Some(&[0, 2]), true)),
        ("sum neg axis", |x| x[0].sum(Some(&[-1]), false)),
        ("mean all", |x| x[0].mean(None, false)),
        ("mean axis0 keep", |x| x[0].mean(Some(&[0]), true)),
        ("max all", |x| x[0].max(None, false)),
        ("max axis1", |x| x[0].max(Some(&[1]), false)),
        ("max axes0,2 keep", |x| x[0].max(Some(&[0, 2]), true)),
        ("min axis2", |x| x[0].min(Some(&[2]), false)),
        ("min axes0,1", |x| x[0].min(Some(&[0, 1]), true)),
        ("prod axis1", |x| x[0].prod(Some(&[1]), false)),
        ("prod all", |x| x[0].prod(None, false)),
        ("norm2 all", |x| x[0].norm(2, None, false)),
        ("norm2 axis2", |x| x[0].norm(2, Some(&[2]), true)),
        ("norm1 axes0,1", |x| x[0].norm(1, Some(&[0, 1]), false)),
    ];
    for (n, f) in cases {
        gc(n, *f, std::slice::from_ref(&x));
    }
}

#[test]
fn reductions_over_size_one_axes() {
    // Nothing is summed: sum/mean take a reshape instead of a fold (and mean no scaling);
    // values, shapes and gradients must be those of the general path.
    let x = test_array(&[4, 1, 3], -1.0, 1.0, 33);
    let v = x.to_f64_vec();
    for keep in [false, true] {
        let s = x.sum(Some(&[1]), keep).unwrap();
        let m = x.mean(Some(&[1]), keep).unwrap();
        let want: Vec<usize> = if keep { vec![4, 1, 3] } else { vec![4, 3] };
        assert_eq!(s.shape(), want);
        assert_eq!(m.shape(), want);
        assert_eq!(s.to_f64_vec(), v);
        assert_eq!(m.to_f64_vec(), v);
    }
    let cases: &[(&str, F)] = &[
        ("sum size-1 axis", |x| x[0].sum(Some(&[1]), false)),
        ("mean size-1 axis keep", |x| x[0].mean(Some(&[1]), true)),
        ("mean size-1 then all", |x| {
            x[0].mean(Some(&[1]), false)?.sum(None, false)
        }),
    ];
    for (n, f) in cases {
        gc(n, *f, std::slice::from_ref(&x));
    }
}

#[test]
fn prod_grad_with_zeros() {
    // One zero in a group: only the zero gets a gradient (the product of the others).
    let x = NDArray::from_vec(vec![2.0f64, 0.0, 3.0, 1.5, 0.5, 4.0], &[2, 3]).unwrap();
    gc("prod with a zero", |x| x[0].prod(Some(&[1]), false), &[x]);
    let x = NDArray::from_vec(vec![0.0f64, 0.0, 3.0], &[3]).unwrap();
    x.attach_grad();
    let y = sparrow_core::autograd::record(|| x.prod(None, false)).unwrap();
    y.backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 0.0, 0.0]
    );
}

#[test]
fn shape_op_grads() {
    let x = test_array(&[2, 3, 4], -1.0, 1.0, 41);
    let cases: &[(&str, F)] = &[
        ("reshape", |x| x[0].reshape(&[6, 4])),
        ("reshape_i", |x| x[0].reshape_i(&[4, -1])),
        ("broadcast_to", |x| {
            x[0].reshape(&[2, 1, 3, 4])?.broadcast_to(&[2, 5, 3, 4])
        }),
        ("transpose rev", |x| x[0].transpose(None)),
        ("transpose perm", |x| x[0].transpose(Some(&[1, 2, 0]))),
        ("swapaxes", |x| x[0].swapaxes(0, -1)),
        ("expand_dims", |x| x[0].expand_dims(1)),
        ("squeeze", |x| x[0].expand_dims(0)?.squeeze(None)),
        ("flip", |x| x[0].flip(1)),
        ("slice", |x| x[0].slice_axis(2, Some(1), Some(-1), 1)),
        ("slice step -2", |x| x[0].slice_axis(-1, None, None, -2)),
        ("tile", |x| x[0].tile(&[2, 1, 2])),
        ("tile pad", |x| x[0].tile(&[3, 1, 1, 1])),
        ("repeat axis", |x| x[0].repeat(2, Some(1))),
        ("repeat flat", |x| x[0].repeat(3, None)),
        ("split part", |x| Ok(x[0].split(2, 2)?.remove(1))),
        ("softmax -1", |x| x[0].softmax(-1)),
        ("softmax 1", |x| x[0].softmax(1)),
        ("log_softmax -1", |x| x[0].log_softmax(-1)),
        ("log_softmax 0", |x| x[0].log_softmax(0)),
        ("sort asc", |x| x[0].sort(-1, true)),
        ("sort desc axis1", |x| x[0].sort(1, false)),
        ("topk", |x| Ok(x[0].topk(2, -1, false)?.0)),
        ("topk axis0 asc", |x| Ok(x[0].topk(1, 0, true)?.0)),
    ];
    for (n, f) in cases {
        gc(n, *f, std::slice::from_ref(&x));
    }
    // split: every part used, gradients accumulate into one input.
    gc(
        "split sum",
        |x| {
            let p = x[0].split(3, 1)?;
            p[0].mul(&p[1])?.add(&p[2])
        },
        std::slice::from_ref(&x),
    );
}

#[test]
fn index_op_grads() {
    let x = test_array(&[4, 3], -1.0, 1.0, 51);
    gc(
        "take axis0 repeated",
        |x| {
            x[0].take(
                &NDArray::from_vec(vec![3i64, 0, 3, -1], &[2, 2]).unwrap(),
                0,
            )
        },
        std::slice::from_ref(&x),
    );
    gc(
        "take axis1 float idx",
        |x| x[0].take(&NDArray::from_vec(vec![2.0f32, 0.0], &[2]).unwrap(), 1),
        std::slice::from_ref(&x),
    );
    let new = test_array(&[2, 3], -1.0, 1.0, 52);
    gc(
        "index_copy",
        |x| x[0].index_copy(&NDArray::from_vec(vec![2i64, 0], &[2]).unwrap(), &x[1]),
        &[x.clone(), new.clone()],
    );
    gc(
        "index_copy repeated",
        |x| x[0].index_copy(&NDArray::from_vec(vec![1i64, 1], &[2]).unwrap(), &x[1]),
        &[x.clone(), new],
    );
    let y = test_array(&[4, 1], -1.0, 1.0, 53);
    gc(
        "where broadcast",
        |x| {
            let c = NDArray::from_vec(vec![1u8, 0, 1], &[3]).unwrap();
            NDArray::where_(&c, &x[0], &x[1])
        },
        &[x.clone(), y],
    );
    let z = test_array(&[2, 3], -1.0, 1.0, 54);
    gc(
        "concat 0",
        |x| NDArray::concat(&[&x[0], &x[1]], 0),
        &[x.clone(), z.clone()],
    );
    gc(
        "concat 1",
        |x| NDArray::concat(&[&x[0], &x[1], &x[0]], -1),
        &[z.clone(), test_array(&[2, 5], -1.0, 1.0, 55)],
    );
    gc(
        "stack",
        |x| NDArray::stack(&[&x[0], &x[1]], 1),
        &[z.clone(), test_array(&[2, 3], 0.0, 1.0, 56)],
    );
}

#[test]
fn product_grads() {
    let a = test_array(&[3, 4], -1.0, 1.0, 61);
    let b = test_array(&[4, 5], -1.0, 1.0, 62);
    gc("dot", |x| x[0].dot(&x[1]), &[a.clone(), b.clone()]);
    gc(
        "dot_t a",
        |x| x[0].dot_t(&x[1], true, false),
        &[test_array(&[4, 3], -1.0, 1.0, 63), b.clone()],
    );
    gc(
        "dot_t b",
        |x| x[0].dot_t(&x[1], false, true),
        &[a.clone(), test_array(&[5, 4], -1.0, 1.0, 64)],
    );
    gc(
        "dot_t ab",
        |x| x[0].dot_t(&x[1], true, true),
        &[
            test_array(&[4, 3], -1.0, 1.0, 65),
            test_array(&[5, 4], -1.0, 1.0, 66),
        ],
    );
    gc("matmul 2d", |x| x[0].matmul(&x[1]), &[a.clone(), b.clone()]);
    gc(
        "matmul batched",
        |x| x[0].matmul(&x[1]),
        &[
            test_array(&[2, 3, 4], -1.0, 1.0, 67),
            test_array(&[2, 4, 2], -1.0, 1.0, 68),
        ],
    );
    gc(
        "matmul broadcast batch",
        |x| x[0].matmul(&x[1]),
        &[
            test_array(&[2, 1, 3, 4], -1.0, 1.0, 69),
            test_array(&[3, 4, 2], -1.0, 1.0, 70),
        ],
    );
    gc(
        "matmul vec right",
        |x| x[0].matmul(&x[1]),
        &[a.clone(), test_array(&[4], -1.0, 1.0, 71)],
    );
    gc(
        "matmul vec left",
        |x| x[0].matmul(&x[1]),
        &[test_array(&[3], -1.0, 1.0, 72), a],
    );
}
