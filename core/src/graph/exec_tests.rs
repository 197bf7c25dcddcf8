//! The executor (`exec.rs`) against eager execution: same bits for every node form, buffers
//! reused across runs, outputs the caller keeps never overwritten.

use std::sync::Arc;

use super::plan::node_forms;
use super::*;
use crate::ops::fused::{bias_act, bias_act_absorbing, FusedAct};
use crate::testing::test_array;
use crate::NDArray;

fn bits(a: &NDArray) -> Vec<u32> {
    a.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn f32s(shape: &[usize], lo: f64, hi: f64, seed: u64) -> NDArray {
    test_array(shape, lo, hi, seed)
        .astype(crate::DType::F32)
        .unwrap()
}

/// A forward of one input and some parameters.
type Forward = dyn Fn(&NDArray, &[NDArray]) -> crate::Result<Vec<NDArray>>;

/// Trace `f(x, params)` into a graph.
fn graph_of(f: &Forward, x: &NDArray, params: &[NDArray]) -> Arc<Graph> {
    let (outs, log) = trace(|| f(x, params)).unwrap();
    let named: Vec<(String, NDArray)> = params
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("p{i}"), p.clone()))
        .collect();
    let g = Graph::from_trace(
        log,
        &["x".to_string()],
        std::slice::from_ref(x),
        &outs.unwrap(),
        &named,
    )
    .unwrap();
    Arc::new(g)
}

/// A Dense layer's chain, every activation, every unary and scalar map, clip, and a few
/// operators without a form (which run eagerly inside the planned run).
fn every_form(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    let (w, b, w2) = (&p[0], &p[1], &p[2]);
    let mut outs = Vec::new();
    // x (8, 6) . w^T (6, 16): absorbing relu (in place), then sigmoid / tanh / identity.
    let y = x.dot_t(w, false, true)?;
    let h = bias_act_absorbing(&y, b, Some(FusedAct::Relu))?.unwrap();
    for act in [Some(FusedAct::Sigmoid), Some(FusedAct::Tanh), None] {
        // Not in place: `h` is read again below.
        outs.push(bias_act(&h, b, act)?.unwrap());
    }
    // Transposed operands: h^T (16, 8) . x (8, 6), and h (8,16) . w2 (16, 4).
    outs.push(h.dot_t(x, true, false)?);
    let z = h.dot_t(w2, false, false)?;
    let mut m = z.clone();
    m = m.neg()?.exp()?.add_scalar(1.0)?.log()?.sqrt()?.square()?;
    m = m.abs()?.sign()?.mul(&z)?;
    m = m.sigmoid()?.relu()?.tanh()?.softrelu()?;
    m = m
        .sub_scalar(0.25)?
        .rsub_scalar(2.0)?
        .mul_scalar(3.0)?
        .div_scalar(1.5)?;
    m = m
        .rdiv_scalar(1.0)?
        .pow_scalar(2.0)?
        .maximum_scalar(0.1)?
        .minimum_scalar(5.0)?;
    m = m.leaky_relu(0.2)?.clip(-1.0, 1.5)?;
    outs.push(m.clone());
    outs.push(m.log_softmax(1)?.sum(Some(&[1]), false)?);
    // The fused softmax cross-entropy of z against the map chain's values as targets.
    outs.push(crate::ops::fused::softmax_ce_logits(&z, &m)?.unwrap());
    outs.push(z.reshape(&[4, 8])?.tanh()?);
    Ok(outs)
}

fn params() -> Vec<NDArray> {
    vec![
        f32s(&[16, 6], -0.5, 0.5, 11),
        f32s(&[16], -0.1, 0.1, 12),
        f32s(&[16, 4], -0.5, 0.5, 13),
    ]
}

#[test]
fn planned_runs_equal_eager_bit_for_bit() {
    let p = params();
    let x = f32s(&[8, 6], -1.0, 1.0, 1);
    let g = graph_of(&every_form, &x, &p);
    let mut e = Executor::new(g.clone());
    // The forms cover the layer chain, the maps, `mul`, the row sums and the reshape.
    assert!(e.fallback_ops().is_empty(), "{:?}", e.fallback_ops());
    assert!(e.plan().in_place > 10, "{:?}", e.plan());
    for seed in 1..4 {
        let x = f32s(&[8, 6], -1.0, 1.0, seed);
        let eager = every_form(&x, &p).unwrap();
        let planned = e.run(std::slice::from_ref(&x), &p).unwrap();
        let replayed = g.run(std::slice::from_ref(&x), &p).unwrap();
        assert_eq!(planned.len(), eager.len());
        for ((a, b), c) in planned.iter().zip(&eager).zip(&replayed) {
            assert_eq!(a.shape(), b.shape());
            assert_eq!(bits(a), bits(b));
            assert_eq!(bits(c), bits(b));
        }
    }
}

/// Two Dense layers (relu), the inference graph of an MLP.
fn mlp(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    let h = x.dot_t(&p[0], false, true)?;
    let h = bias_act_absorbing(&h, &p[1], Some(FusedAct::Relu))?.unwrap();
    let o = h.dot_t(&p[2], false, false)?;
    Ok(vec![o])
}

#[test]
fn buffers_are_reused_and_kept_outputs_left_alone() {
    let p = params();
    let x1 = f32s(&[8, 6], -1.0, 1.0, 5);
    let x2 = f32s(&[8, 6], -1.0, 1.0, 6);
    let g = graph_of(&mlp, &x1, &p);
    let mut e = Executor::new(g);
    assert!(e.fallback_ops().is_empty());
    // dot -> bias_act in place -> dot: two buffers.
    assert_eq!(e.plan().in_place, 1);
    assert_eq!(e.plan().slot_bytes.len(), 2);
    let want1 = bits(&mlp(&x1, &p).unwrap()[0]);
    let want2 = bits(&mlp(&x2, &p).unwrap()[0]);
    // The caller keeps the first output across the second run: it does not change.
    let o1 = e.run(std::slice::from_ref(&x1), &p).unwrap().remove(0);
    let o2 = e.run(std::slice::from_ref(&x2), &p).unwrap().remove(0);
    assert!(!o1.same_array(&o2));
    assert_eq!(bits(&o1), want1);
    assert_eq!(bits(&o2), want2);
    // Outputs let go of before the next run: the same handle (and buffer) comes back, under a
    // new id each run (a new array to its holder: a trainer tells fresh gradients by id).
    let mut id = o2.id();
    drop((o1, o2));
    for (x, want) in [(&x1, &want1), (&x2, &want2), (&x1, &want1)] {
        let o = e.run(std::slice::from_ref(x), &p).unwrap().remove(0);
        assert_ne!(o.id(), id);
        id = o.id();
        assert_eq!(&bits(&o), want);
    }
    // A view sharing the output's buffer (a detached handle) is left alone too.
    let o = e.run(std::slice::from_ref(&x1), &p).unwrap().remove(0);
    let view = o.detach();
    drop(o);
    let o = e.run(std::slice::from_ref(&x2), &p).unwrap().remove(0);
    assert_eq!(bits(&view), want1);
    assert_eq!(bits(&o), want2);
}

#[test]
fn planned_runs_check_their_inputs() {
    let p = params();
    let x = f32s(&[8, 6], -1.0, 1.0, 5);
    let mut e = Executor::new(graph_of(&mlp, &x, &p));
    let wrong = f32s(&[7, 6], -1.0, 1.0, 5);
    let err = e.run(std::slice::from_ref(&wrong), &p).unwrap_err();
    assert!(err.to_string().contains("input 'x'"), "{err}");
    let err = e.run(std::slice::from_ref(&x), &p[..2]).unwrap_err();
    assert!(err.to_string().contains("parameters"), "{err}");
    // Still runs after the errors.
    let o = e.run(std::slice::from_ref(&x), &p).unwrap();
    assert_eq!(bits(&o[0]), bits(&mlp(&x, &p).unwrap()[0]));
}

/// A chain of maps after a product, large enough for the parallel loops, and one that is not
/// in place (its input is read again).
fn chains(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    let y = x.dot_t(&p[0], false, false)?; // (300, 256)
    let a = y
        .mul_scalar(0.5)?
        .add_scalar(0.1)?
        .tanh()?
        .square()?
        .sqrt()?
        .clip(0.0, 0.7)?;
    let b = y.sigmoid()?.rsub_scalar(1.0)?.log()?; // `y` read twice: not in place
                                                   // A product read once: the chain runs in place over it.
    let c = x
        .dot_t(&p[0], false, false)?
        .neg()?
        .exp()?
        .add_scalar(1.0)?;
    Ok(vec![a, b, y, c])
}

#[test]
fn fused_map_chains_equal_the_maps_one_by_one() {
    let p = vec![f32s(&[16, 256], -0.5, 0.5, 21)];
    let x = f32s(&[300, 16], -1.0, 1.0, 22);
    let g = graph_of(&chains, &x, &p);
    let mut e = Executor::new(g);
    assert_eq!(e.fused_chains(), [6, 3, 3]);
    assert!(e.fallback_ops().is_empty());
    for seed in [22, 23] {
        let x = f32s(&[300, 16], -1.0, 1.0, seed);
        let eager = chains(&x, &p).unwrap();
        let planned = e.run(std::slice::from_ref(&x), &p).unwrap();
        for (a, b) in planned.iter().zip(&eager) {
            assert_eq!(bits(a), bits(b));
        }
    }
    // The first form test has chains too (between the operators without forms).
    let p = params();
    let x = f32s(&[8, 6], -1.0, 1.0, 1);
    let e = Executor::new(graph_of(&every_form, &x, &p));
    assert!(
        e.fused_chains().iter().sum::<usize>() > 15,
        "{:?}",
        e.fused_chains()
    );
}

/// Activations of `ops::activation` between scalar maps: one chain, the same bits.
fn act_chain(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    let y = x.dot_t(&p[0], false, false)?;
    let a = y
        .gelu()?
        .mul_scalar(2.0)?
        .elu(0.5)?
        .swish(1.5)?
        .mish()?
        .selu()?
        .log_sigmoid()?
        .softsign()?
        .gelu_tanh()?;
    Ok(vec![a])
}

#[test]
fn activation_maps_join_fused_chains_with_the_same_bits() {
    let p = vec![f32s(&[16, 256], -0.5, 0.5, 31)];
    let x = f32s(&[300, 16], -3.0, 3.0, 32);
    let mut e = Executor::new(graph_of(&act_chain, &x, &p));
    assert_eq!(e.fused_chains(), [9]);
    assert!(e.fallback_ops().is_empty(), "{:?}", e.fallback_ops());
    for seed in [32, 33] {
        let x = f32s(&[300, 16], -3.0, 3.0, seed);
        let eager = act_chain(&x, &p).unwrap();
        let planned = e.run(std::slice::from_ref(&x), &p).unwrap();
        assert_eq!(bits(&planned[0]), bits(&eager[0]));
    }
}

/// The sparse tutorial's model shape: a Dense layer on a csr batch, then two small layers.
fn on_csr(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    let y = crate::sparse::dot_csr_dense_t(x, &p[0])?;
    let h = bias_act_absorbing(&y, &p[1], Some(FusedAct::Sigmoid))?.unwrap();
    let o = h.dot_t(&p[2], false, true)?;
    Ok(vec![o])
}

#[test]
fn csr_products_write_into_their_buffers() {
    let p = vec![
        f32s(&[16, 500], -0.5, 0.5, 31),
        f32s(&[16], -0.1, 0.1, 32),
        f32s(&[4, 16], -0.5, 0.5, 33),
    ];
    let x = crate::testing::test_csr(10, 500, 0.05, 34, crate::DType::F32);
    let mut e = Executor::new(graph_of(&on_csr, &x, &p));
    assert!(e.fallback_ops().is_empty(), "{:?}", e.fallback_ops());
    assert_eq!(e.plan().in_place, 1);
    for seed in [34, 35, 36] {
        let x = crate::testing::test_csr(10, 500, 0.05, seed, crate::DType::F32);
        let planned = e.run(std::slice::from_ref(&x), &p).unwrap();
        assert_eq!(bits(&planned[0]), bits(&on_csr(&x, &p).unwrap()[0]));
    }
}

/// Broadcasting arithmetic, sums and means over trailing, leading and all axes,
/// `broadcast_to`, `reshape`, and the label nodes of a loss, on arrays large enough for the parallel loops.
fn loss_and_backward_forms(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    let col = x.sum(Some(&[1]), true)?; // (300, 128) -> (300, 1): trailing
    let row = x.sum(Some(&[0]), true)?; // -> (1, 128): leading
    let a = x
        .add(&col)?
        .mul(&row)?
        .sub(&p[0])?
        .div(&row.square()?.add_scalar(1.0)?)?;
    let b = col.broadcast_to(&[300, 128])?.maximum(&a)?;
    let c = a.reshape(&[600, 64])?;
    let all = p[0].sum(None, false)?; // (128,): one thread, all axes
    let ones = p[1].sum(Some(&[1]), true)?; // (7, 1) over an axis of size 1: a reshape
    let labels = p[1].reshape(&[7])?.check_class_ids(5, 7)?;
    let hot = labels.one_hot(5, 1.0, 0.0, crate::DType::F32)?;
    // Means: trailing (a per-sample loss), leading, and over an axis of size 1.
    let m1 = a.mean(Some(&[1]), false)?;
    let m2 = b.mean(Some(&[0]), true)?;
    let m3 = p[1].mean(Some(&[1]), false)?;
    Ok(vec![a, b, c, all, ones, hot, m1, m2, m3])
}

#[test]
fn loss_and_backward_forms_equal_eager_bit_for_bit() {
    let labels = NDArray::from_vec(vec![0.0f32, 4.0, 2.0, 2.0, 1.0, 3.0, 0.0], &[7, 1]).unwrap();
    let p = vec![f32s(&[128], -0.5, 0.5, 41), labels];
    let x = f32s(&[300, 128], -1.0, 1.0, 42);
    let g = graph_of(&loss_and_backward_forms, &x, &p);
    let mut e = Executor::new(g);
    assert!(e.fallback_ops().is_empty(), "{:?}", e.fallback_ops());
    for seed in [42, 43] {
        let x = f32s(&[300, 128], -1.0, 1.0, seed);
        let eager = loss_and_backward_forms(&x, &p).unwrap();
        let planned = e.run(std::slice::from_ref(&x), &p).unwrap();
        for (k, (a, b)) in planned.iter().zip(&eager).enumerate() {
            assert_eq!(a.shape(), b.shape(), "output {k}");
            assert_eq!(bits(a), bits(b), "output {k}");
        }
    }
    // A label that is not a class is the eager operator's error, from the planned node.
    let bad = NDArray::from_vec(vec![0.0f32, 5.0, 2.0, 2.0, 1.0, 3.0, 0.0], &[7, 1]).unwrap();
    let err = e
        .run(std::slice::from_ref(&x), &[p[0].clone(), bad])
        .unwrap_err();
    assert!(err.to_string().contains("not a class"), "{err}");
}

/// `csr . dense` (the product a Dense layer with a row_sparse weight gradient runs).
fn csr_dot(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    Ok(vec![x.dot(&p[0])?.tanh()?])
}

#[test]
fn csr_dense_products_write_into_their_buffers() {
    let p = vec![f32s(&[500, 16], -0.5, 0.5, 51)];
    let x = crate::testing::test_csr(10, 500, 0.05, 52, crate::DType::F32);
    let mut e = Executor::new(graph_of(&csr_dot, &x, &p));
    assert!(e.fallback_ops().is_empty(), "{:?}", e.fallback_ops());
    for seed in [52, 53] {
        let x = crate::testing::test_csr(10, 500, 0.05, seed, crate::DType::F32);
        let planned = e.run(std::slice::from_ref(&x), &p).unwrap();
        assert_eq!(bits(&planned[0]), bits(&csr_dot(&x, &p).unwrap()[0]));
    }
}

/// A funnel of products of shrinking and growing widths: (8, 6) . (6, 16) -> tanh ->
/// (16, 4) -> tanh -> (4, 12) -> tanh -> (12, 2), so every intermediate has another size.
fn funnel(x: &NDArray, p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    let a = x.dot(&p[0])?.tanh()?;
    let b = a.dot(&p[1])?.tanh()?;
    let c = b.dot(&p[2])?.tanh()?;
    Ok(vec![c.dot(&p[3])?])
}

#[test]
fn buffers_are_shared_across_sizes_with_the_same_bits() {
    let p = vec![
        f32s(&[6, 16], -0.5, 0.5, 21),
        f32s(&[16, 4], -0.5, 0.5, 22),
        f32s(&[4, 12], -0.5, 0.5, 23),
        f32s(&[12, 2], -0.5, 0.5, 24),
    ];
    let x1 = f32s(&[8, 6], -1.0, 1.0, 25);
    let x2 = f32s(&[8, 6], -1.0, 1.0, 26);
    let g = graph_of(&funnel, &x1, &p);
    let mut e = Executor::new(g);
    let plan = e.plan().clone();
    // Seven intermediates of four sizes (8 x 16, 4, 12, 2): the tanh run in place, and the
    // products take turns in two buffers, (8, 12) in the (8, 16) one and (8, 2) in the (8, 4)
    // one; one buffer per size would be 8 x (16 + 4 + 12 + 2) floats.
    assert_eq!(plan.in_place, 3, "{plan:?}");
    assert_eq!(plan.slot_bytes.len(), 2, "{plan:?}");
    assert_eq!(plan.planned_bytes(), (8 * 16 + 8 * 4) * 4, "{plan:?}");
    let want1 = bits(&funnel(&x1, &p).unwrap()[0]);
    let want2 = bits(&funnel(&x2, &p).unwrap()[0]);
    for (x, want) in [(&x1, &want1), (&x2, &want2), (&x1, &want1)] {
        let o = e.run(std::slice::from_ref(x), &p).unwrap().remove(0);
        assert_eq!(o.shape(), vec![8, 2]);
        assert_eq!(&bits(&o), want);
    }
    // An output kept across runs keeps its values, and a view of it too.
    let o = e.run(std::slice::from_ref(&x1), &p).unwrap().remove(0);
    let view = o.detach();
    let o2 = e.run(std::slice::from_ref(&x2), &p).unwrap().remove(0);
    assert_eq!(bits(&o), want1);
    assert_eq!(bits(&view), want1);
    assert_eq!(bits(&o2), want2);
}

#[test]
fn exact_size_plans_share_buffers_only_within_one_size() {
    // The plan a CUDA device runs: a device buffer cannot show a prefix of itself.
    let p = vec![
        f32s(&[6, 16], -0.5, 0.5, 21),
        f32s(&[16, 4], -0.5, 0.5, 22),
        f32s(&[4, 12], -0.5, 0.5, 23),
        f32s(&[12, 2], -0.5, 0.5, 24),
    ];
    let g = graph_of(&funnel, &f32s(&[8, 6], -1.0, 1.0, 25), &p);
    let plan = MemoryPlan::exact_sizes(&g);
    for (v, slot) in plan.slot_of.iter().enumerate() {
        if let Some(s) = slot {
            let info = &g.values()[v];
            let bytes = info.shape.iter().product::<usize>() * info.dtype.size_of();
            assert_eq!(
                plan.slot_bytes[*s], bytes,
                "value {v} in slot {s}: {plan:?}"
            );
        }
    }
    // Four sizes (8 x 16, 4, 12, 2): at least a buffer each, more than the shared plan's two.
    assert!(plan.slot_bytes.len() >= 4, "{plan:?}");
    assert_eq!(plan.in_place, MemoryPlan::of(&g).in_place);
}

#[test]
fn host_checks_name_the_label_inputs_a_captured_step_checks_itself() {
    use super::exec::HostCheck;
    let x = NDArray::from_vec((0..8).map(|i| (i % 5) as f32).collect(), &[8]).unwrap();
    fn hot(a: &NDArray) -> crate::Result<NDArray> {
        a.one_hot(5, 1.0, 0.0, crate::DType::F32)
    }
    let checks = |f: &Forward| Executor::new(graph_of(f, &x, &[])).host_checks();
    // Labels checked, reshaped and one-hot encoded (a sparse-label loss): the check covers
    // the encoding.
    let loss_like: &Forward = &|x, _| Ok(vec![hot(&x.check_class_ids(5, 8)?.reshape(&[8])?)?]);
    let want = HostCheck::ClassIds {
        classes: 5,
        count: 8,
    };
    assert_eq!(checks(loss_like).unwrap(), vec![(0, want)]);
    // Ids encoded without a check need whole numbers.
    assert_eq!(
        checks(&|x, _| Ok(vec![hot(x)?])).unwrap(),
        vec![(0, HostCheck::WholeIds)]
    );
    assert!(HostCheck::WholeIds.run(&x).is_ok());
    let bad = NDArray::from_vec(vec![0.5f32; 8], &[8]).unwrap();
    assert!(HostCheck::WholeIds.run(&bad).is_err());
    assert!(want.run(&bad).is_err());
    // Ids computed inside the graph cannot be checked before it runs.
    let why = checks(&|x, _| Ok(vec![hot(&x.mul_scalar(1.0)?)?])).unwrap_err();
    assert!(why.contains("one_hot"), "{why}");
}

#[test]
fn reclaimed_outputs_keep_their_values_for_their_holder() {
    let p = vec![
        f32s(&[6, 16], -0.5, 0.5, 21),
        f32s(&[16, 4], -0.5, 0.5, 22),
        f32s(&[4, 12], -0.5, 0.5, 23),
        f32s(&[12, 2], -0.5, 0.5, 24),
    ];
    let (x1, x2) = (f32s(&[8, 6], -1.0, 1.0, 25), f32s(&[8, 6], -1.0, 1.0, 26));
    let mut e = Executor::new(graph_of(&funnel, &x1, &p));
    let want1 = bits(&funnel(&x1, &p).unwrap()[0]);
    let want2 = bits(&funnel(&x2, &p).unwrap()[0]);
    // Held output: moved to a copy, and the next run (which would write the same buffer, as a
    // replayed CUDA graph does) leaves it alone.
    let o = e.run(std::slice::from_ref(&x1), &p).unwrap().remove(0);
    assert!(e.reclaim_outputs().unwrap());
    // The executor let go of the caller's array (it holds the buffer under a new handle).
    assert_eq!(Arc::strong_count(&o.inner), 1);
    let o2 = e.run(std::slice::from_ref(&x2), &p).unwrap().remove(0);
    assert_eq!(bits(&o), want1);
    assert_eq!(bits(&o2), want2);
    drop(o2);
    // Nothing held: nothing to move.
    assert!(e.reclaim_outputs().unwrap());
    // A view sharing the output's buffer cannot be moved.
    let o = e.run(std::slice::from_ref(&x1), &p).unwrap().remove(0);
    let view = o.detach();
    drop(o);
    assert!(!e.reclaim_outputs().unwrap());
    let _ = e.run(std::slice::from_ref(&x2), &p).unwrap();
    assert_eq!(bits(&view), want1);
}

/// Reshapes of a dying planned value, of a value made by a node without a form (a transpose),
/// and of a value read again afterwards.
fn reshapes(x: &NDArray, _p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
    // Over a dying planned value: in place (the buffer already holds it).
    let a = x.tanh()?.reshape(&[6, 8])?.relu()?;
    // Over a value a node without a form made: the eager reshape's shared buffer.
    let t = x.transpose(None)?;
    let b = t.reshape(&[48])?.sigmoid()?;
    // Over a value read again later: a copy.
    let c = x.exp()?;
    let d = c.reshape(&[4, 12])?.neg()?;
    Ok(vec![a, b, d, c.add_scalar(1.0)?])
}

#[test]
fn reshapes_run_in_place_share_or_copy_as_their_input_allows() {
    let x = f32s(&[8, 6], -1.0, 1.0, 21);
    let g = graph_of(&reshapes, &x, &[]);
    let mut e = Executor::new(g.clone());
    let plan = e.plan().clone();
    let names: Vec<&str> = g.nodes().iter().map(|n| n.op.name()).collect();
    let node = |name: &str, k: usize| {
        names
            .iter()
            .enumerate()
            .filter(|(_, n)| **n == name)
            .nth(k)
            .map(|(i, _)| i)
            .unwrap()
    };
    let (r0, r1, r2) = (node("reshape", 0), node("reshape", 1), node("reshape", 2));
    assert!(plan.runs_in_place[r0], "{names:?}");
    assert!(plan.fallback.contains(&r1), "{names:?} {:?}", plan.fallback);
    assert!(!plan.runs_in_place[r2] && !plan.fallback.contains(&r2));
    for seed in 21..24 {
        let x = f32s(&[8, 6], -1.0, 1.0, seed);
        let eager = reshapes(&x, &[]).unwrap();
        let planned = e.run(std::slice::from_ref(&x), &[]).unwrap();
        for (a, b) in planned.iter().zip(&eager) {
            assert_eq!(a.shape(), b.shape());
            assert_eq!(bits(a), bits(b));
        }
    }
}

/// A device's plan runs forms without device kernels (here `add` of two values, a `sum` and
/// `broadcast_to`) as eager nodes, their results the values (no copy into a planned buffer);
/// the host's plan writes them into its buffers. Device-kernel forms (maps, products) and
/// graph outputs stay planned on both.
#[test]
fn a_device_plan_runs_forms_without_device_kernels_eagerly() {
    fn f(x: &NDArray, _p: &[NDArray]) -> crate::Result<Vec<NDArray>> {
        let a = x.tanh()?;
        let b = a.add(&x.exp()?)?;
        let s = b.sum(Some(&[1]), true)?.broadcast_to(&[8, 6])?;
        Ok(vec![s.relu()?, x.sigmoid()?.add(&s)?])
    }
    let x = f32s(&[8, 6], -1.0, 1.0, 31);
    let g = graph_of(&f, &x, &[]);
    let names: Vec<&str> = g.nodes().iter().map(|n| n.op.name()).collect();
    let at = |name: &str| names.iter().position(|n| *n == name).unwrap();
    let host = MemoryPlan::of(&g);
    let device = MemoryPlan::exact_sizes(&g);
    assert!(host.fallback.is_empty(), "{names:?} {:?}", host.fallback);
    for name in ["add", "sum", "broadcast_to"] {
        assert!(
            device.fallback.contains(&at(name)),
            "{name}: {names:?} {:?}",
            device.fallback
        );
    }
    for name in ["tanh", "exp", "relu", "sigmoid"] {
        assert!(!device.fallback.contains(&at(name)), "{name}: {names:?}");
    }
    // The last `add` makes a graph output: planned, so a captured graph can write it.
    let last_add = names.iter().rposition(|n| *n == "add").unwrap();
    assert!(!device.fallback.contains(&last_add), "{names:?}");
    assert_eq!(
        node_forms(&g, false).iter().filter(|f| f.is_some()).count(),
        g.nodes().len() - device.fallback.len()
    );
}
