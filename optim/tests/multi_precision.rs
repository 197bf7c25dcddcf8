//! `multi_precision` in every optimizer: for an f16 / bf16 weight the f32 master copy follows
//! the same optimizer run on an f32 weight bit for bit (dense, lazy row_sparse and standard
//! row_sparse gradients), the half weight is the master rounded, and saved states keep the
//! master. Without it a half weight is updated in f32 and stored rounded.

use sparrow_core::testing::test_array;
use sparrow_core::{DType, Device, NDArray, SType};
use sparrow_nn::{Initializer, Parameter};
use sparrow_optim::optimizer::{create, MASTER_SLOT, OPTIMIZER_NAMES};
use sparrow_optim::*;

const HALVES: [DType; 2] = [DType::F16, DType::BF16];
const SHAPE: [usize; 2] = [6, 4];

/// The f32 bits of an array's values.
fn bits(a: &NDArray) -> Vec<u32> {
    a.astype(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Grad {
    Dense,
    RowSparseLazy,
    RowSparseStandard,
}

/// Gradient `k` in dtype `h`: dense, or rows {1, 3, 4} (k even) / {0, 5} (k odd) row_sparse.
fn grad(k: u64, h: DType, kind: Grad) -> NDArray {
    let g = test_array(&SHAPE, -1.0, 1.0, 100 + k).astype(h).unwrap();
    if kind == Grad::Dense {
        return g;
    }
    let rows: &[i64] = if k.is_multiple_of(2) {
        &[1, 3, 4]
    } else {
        &[0, 5]
    };
    sparrow_core::sparse::retain_rows(&g.tostype(SType::RowSparse).unwrap(), rows).unwrap()
}

fn options(name: &str, kind: Grad, mp: bool) -> Vec<(&'static str, f64)> {
    let mut o = vec![("learning_rate", 0.05)];
    // GroupAdaGrad refuses weight decay (as MXNet's does).
    if name != "groupadagrad" {
        o.push(("wd", 0.01));
    }
    o.push((
        "lazy_update",
        (kind != Grad::RowSparseStandard) as u8 as f64,
    ));
    if mp {
        o.push(("multi_precision", 1.0));
    }
    o
}

/// Every optimizer, every half dtype, every gradient kind: 6 steps with multi_precision on a
/// half weight against 6 steps on the f32 weight holding the same values, with the same
/// gradients widened.
#[test]
fn master_copy_follows_the_f32_run_bit_for_bit() {
    let mut dense_done = Vec::new();
    for name in OPTIMIZER_NAMES {
        for h in HALVES {
            for kind in [Grad::Dense, Grad::RowSparseLazy, Grad::RowSparseStandard] {
                let wh = test_array(&SHAPE, -1.0, 1.0, 7).astype(h).unwrap();
                let w32 = wh.astype(DType::F32).unwrap();
                let mut mp = create(name, &options(name, kind, true)).unwrap();
                let mut reference = create(name, &options(name, kind, false)).unwrap();
                let mut st = mp.create_state(0, &wh).unwrap();
                let mut st32 = reference.create_state(0, &w32).unwrap();
                let master = st.array(MASTER_SLOT).expect("a master copy").clone();
                assert_eq!(master.dtype(), DType::F32, "{name}");
                for (n, a) in &st.arrays {
                    assert_eq!(a.dtype(), DType::F32, "{name}: state {n} is f32");
                }
                for k in 0..6 {
                    let g = grad(k, h, kind);
                    let g32 = g.astype(DType::F32).unwrap();
                    let r32 = reference.update(0, &w32, &g32, &mut st32);
                    let r = mp.update(0, &wh, &g, &mut st);
                    match (r32, r) {
                        (Ok(()), Ok(())) => {}
                        // A rule that refuses this gradient refuses it either way.
                        (Err(a), Err(b)) => {
                            assert_eq!(a.to_string(), b.to_string(), "{name} {kind:?}");
                            break;
                        }
                        (a, b) => panic!("{name} {h:?} {kind:?}: f32 {a:?}, multi_precision {b:?}"),
                    }
                    assert_eq!(
                        bits(&master),
                        bits(&w32),
                        "{name} {h:?} {kind:?} step {k}: master"
                    );
                    assert_eq!(
                        bits(&wh),
                        bits(&w32.astype(h).unwrap()),
                        "{name} {h:?} {kind:?} step {k}: weight = master rounded"
                    );
                    assert_eq!(wh.dtype(), h);
                    for ((n, a), (_, b)) in st
                        .arrays
                        .iter()
                        .filter(|(n, _)| n != MASTER_SLOT)
                        .zip(&st32.arrays)
                    {
                        assert_eq!(
                            bits(a),
                            bits(b),
                            "{name} {h:?} {kind:?} step {k}: state {n}"
                        );
                    }
                    assert_eq!(st.scalars, st32.scalars, "{name}");
                    if k == 5 && kind == Grad::Dense {
                        dense_done.push((name, h));
                    }
                }
            }
        }
    }
    // Every optimizer ran all 6 steps with dense gradients, in both half dtypes.
    assert_eq!(
        dense_done.len(),
        2 * OPTIMIZER_NAMES.len(),
        "{dense_done:?}"
    );
}

/// Without multi_precision a half weight and its half states take one f32 step and are
/// stored rounded: after one step from zero states they equal the f32 step rounded. LAMB runs
/// two kernels (phase 1 writes the scaled step into a half buffer, phase 2 applies it), so its
/// weight is rounded twice: within one half ulp of the f32 step rounded.
#[test]
fn without_master_half_weights_step_in_f32_and_round() {
    for name in OPTIMIZER_NAMES {
        for h in HALVES {
            let wh = test_array(&SHAPE, -1.0, 1.0, 8).astype(h).unwrap();
            let w32 = wh.astype(DType::F32).unwrap();
            let mut opt = create(name, &options(name, Grad::Dense, false)).unwrap();
            let mut reference = create(name, &options(name, Grad::Dense, false)).unwrap();
            let mut st = opt.create_state(0, &wh).unwrap();
            let mut st32 = reference.create_state(0, &w32).unwrap();
            assert!(
                st.array(MASTER_SLOT).is_none(),
                "{name}: no master without the option"
            );
            let g = grad(0, h, Grad::Dense);
            reference
                .update(0, &w32, &g.astype(DType::F32).unwrap(), &mut st32)
                .unwrap();
            opt.update(0, &wh, &g, &mut st).unwrap();
            if name == "lamb" {
                let ulp = if h == DType::F16 {
                    2f64.powi(-10)
                } else {
                    2f64.powi(-7)
                };
                let want = w32.astype(h).unwrap().to_f64_vec();
                for (a, b) in wh.to_f64_vec().iter().zip(&want) {
                    assert!(
                        (a - b).abs() <= ulp * b.abs().max(2f64.powi(-14)),
                        "lamb {h:?}: {a} vs {b}"
                    );
                }
            } else {
                assert_eq!(bits(&wh), bits(&w32.astype(h).unwrap()), "{name} {h:?}");
            }
            for ((n, a), (_, b)) in st.arrays.iter().zip(&st32.arrays) {
                assert_eq!(a.dtype(), h, "{name}: state {n} in the weight's dtype");
                assert_eq!(
                    bits(a),
                    bits(&b.astype(h).unwrap()),
                    "{name} {h:?} state {n}"
                );
            }
        }
    }
}

/// The option is a keyword of `create` (a flag) and a builder method; it changes nothing for
/// f32 weights.
#[test]
fn option_forms_and_f32_weights() {
    let e = create("adam", &[("multi_precision", 2.0)]).err().unwrap();
    assert!(e.to_string().contains("multi_precision"), "{e}");
    let opt = Adam::new(0.01).multi_precision(true);
    assert!(opt.options().multi_precision);
    let w = test_array(&SHAPE, -1.0, 1.0, 9).astype(DType::F32).unwrap();
    let st = opt.create_state(0, &w).unwrap();
    assert!(st.array(MASTER_SLOT).is_none());
    assert_eq!(st.arrays.len(), 2);
}

/// A trainer over a half parameter with multi_precision saves the master with the states and
/// loads it back; the steps after loading continue exactly where the saved run was.
#[test]
fn state_files_keep_the_master() {
    let dir = std::env::temp_dir().join(format!("sparrow-optim-mp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for h in HALVES {
        let make = || {
            let p = Parameter::new("w", &SHAPE).with_dtype(h);
            p.initialize(&Initializer::Uniform { scale: 0.5 }, Device::Cpu)
                .unwrap();
            p
        };
        let step = |p: &Parameter, t: &mut Trainer, k: u64| {
            p.data().unwrap().set_grad(Some(grad(k, h, Grad::Dense)));
            t.step(1).unwrap();
        };
        let p = make();
        assert_eq!(p.data().unwrap().dtype(), h);
        let mut t = Trainer::new(vec![p.clone()], Adam::new(0.01).multi_precision(true)).unwrap();
        for k in 0..3 {
            step(&p, &mut t, k);
        }
        let path = dir.join(format!("{}.states", h.name()));
        t.save_states(&path).unwrap();
        let master = t.state(0).unwrap().array(MASTER_SLOT).unwrap().clone();
        // A second trainer over a copy of the weight, loaded from the file.
        let q = make();
        q.set_data(&p.data().unwrap().copy()).unwrap();
        let mut u = Trainer::new(vec![q.clone()], Adam::new(0.01).multi_precision(true)).unwrap();
        u.load_states(&path).unwrap();
        let loaded = u.state(0).unwrap().array(MASTER_SLOT).unwrap().clone();
        assert_eq!(bits(&loaded), bits(&master), "{h:?}: master loaded");
        for k in 3..5 {
            step(&p, &mut t, k);
            step(&q, &mut u, k);
        }
        assert_eq!(bits(&q.data().unwrap()), bits(&p.data().unwrap()), "{h:?}");
        let m1 = t.state(0).unwrap().array(MASTER_SLOT).unwrap().clone();
        let m2 = u.state(0).unwrap().array(MASTER_SLOT).unwrap().clone();
        assert_eq!(bits(&m1), bits(&m2), "{h:?}: masters after loading");
        // States saved without the option (half) do not load into a multi_precision trainer.
        let r = make();
        let mut plain = Trainer::new(vec![r.clone()], Adam::new(0.01)).unwrap();
        step(&r, &mut plain, 0);
        let plain_path = dir.join(format!("{}-plain.states", h.name()));
        plain.save_states(&plain_path).unwrap();
        let mut v = Trainer::new(vec![r.clone()], Adam::new(0.01).multi_precision(true)).unwrap();
        let e = v.load_states(&plain_path).unwrap_err().to_string();
        assert!(e.contains("float32"), "{e}");
        // ... and do load into a trainer without it.
        let mut w = Trainer::new(vec![r], Adam::new(0.01)).unwrap();
        w.load_states(&plain_path).unwrap();
        assert_eq!(w.state(0).unwrap().arrays[0].1.dtype(), h);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
