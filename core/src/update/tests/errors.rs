//! Bad arguments: every operator refuses them with an error naming it, and writes nothing.

use crate::update::{RowSparseMode, UpdateArgs};
use crate::{device_test, DType, NDArray, SType};

use super::cases::{cases, Case};
use super::{bits, f64s, on_device, values};

const SHAPE: [usize; 2] = [4, 3];

fn weight() -> NDArray {
    on_device(NDArray::from_vec(values(7, 12, 0.8), &SHAPE).unwrap())
}

fn states(case: &Case) -> Vec<NDArray> {
    let shape = (case.state_shape)(&SHAPE);
    (0..case.states)
        .map(|_| on_device(NDArray::zeros(&shape, DType::F64).unwrap()))
        .collect()
}

/// Run `case` on these arrays and arguments, expect an error that names the operator and
/// contains `needle`, and check that neither the weight nor any state changed.
fn refused(
    case: &Case,
    (w, g, st): (&NDArray, &NDArray, &[NDArray]),
    args: &UpdateArgs,
    t: u64,
    poison: bool,
    needle: &str,
) {
    let before: Vec<Vec<u64>> = std::iter::once(w)
        .chain(st)
        .map(|a| bits(&f64s(a)))
        .collect();
    let e = (case.run)(w, g, st, args, t, poison)
        .expect_err(&format!("{}: {needle}", case.name))
        .to_string();
    assert!(e.contains(case.name), "{}: {e}", case.name);
    assert!(
        e.contains(needle),
        "{}: expected {needle:?} in {e}",
        case.name
    );
    let after: Vec<Vec<u64>> = std::iter::once(w)
        .chain(st)
        .map(|a| bits(&f64s(a)))
        .collect();
    assert_eq!(
        before, after,
        "{}: {needle}: something was written",
        case.name
    );
}

device_test! {
    fn non_finite_or_out_of_range_arguments_are_refused() {
        for case in &cases() {
            let (w, st) = (weight(), states(case));
            let g = on_device(NDArray::from_vec(values(8, 12, 1.0), &SHAPE).unwrap());
            let ok = case.args(true, RowSparseMode::Lazy);
            for (bad, needle) in [
                (UpdateArgs { lr: f64::NAN, ..ok }, "lr must be finite"),
                (
                    UpdateArgs {
                        wd: f64::INFINITY,
                        ..ok
                    },
                    "wd must be finite",
                ),
                (
                    UpdateArgs {
                        rescale_grad: f64::NAN,
                        ..ok
                    },
                    "rescale_grad must be finite",
                ),
                (
                    ok.with_clip_gradient(Some(0.0)),
                    "clip_gradient must be > 0",
                ),
                (
                    ok.with_clip_gradient(Some(-1.0)),
                    "clip_gradient must be > 0",
                ),
                (
                    ok.with_clip_gradient(Some(f64::NAN)),
                    "clip_gradient must be > 0",
                ),
            ] {
                refused(case, (&w, &g, &st), &bad, 1, false, needle);
            }
            if case.has_hyper {
                refused(case, (&w, &g, &st), &ok, 1, true, "must be finite, got NaN");
            }
            // Operators that count updates refuse update number 0 (their bias corrections would
            // divide by zero).
            if ["nadam_update", "ftml_update", "lamb_update"].contains(&case.name) {
                refused(
                    case,
                    (&w, &g, &st),
                    &ok,
                    0,
                    false,
                    "t counts updates from 1",
                );
            }
            (case.run)(&w, &g, &st, &ok, 1, false).unwrap();
        }
    }
}

device_test! {
    fn arrays_of_the_wrong_shape_dtype_or_storage_are_refused() {
        for case in &cases() {
            let ok = case.args(false, RowSparseMode::Lazy);
            let (w, st) = (weight(), states(case));
            let g = on_device(NDArray::from_vec(values(8, 12, 1.0), &SHAPE).unwrap());
            let run = |w: &NDArray, g: &NDArray, st: &[NDArray], needle: &str| {
                refused(case, (w, g, st), &ok, 1, false, needle)
            };
            let g_shape = on_device(NDArray::from_vec(values(8, 12, 1.0), &[3, 4]).unwrap());
            run(&w, &g_shape, &st, "weight [4, 3] vs gradient [3, 4]");
            let g32 = g.astype(DType::F32).unwrap();
            run(&w, &g32, &st, "F64 and F32");
            run(
                &w,
                &g.tostype(SType::Csr).unwrap(),
                &st,
                "csr gradients are not supported",
            );
            run(&w, &w, &st, "weight and gradient are the same array");
            let wi = on_device(NDArray::from_vec(vec![1i64; 12], &SHAPE).unwrap());
            let gi = on_device(NDArray::from_vec(vec![1i64; 12], &SHAPE).unwrap());
            run(&wi, &gi, &st, "weight must be float32 or float64");
            let w_rsp = w.tostype(SType::RowSparse).unwrap();
            run(&w_rsp, &g, &st, "weight must be dense");
            let scalar = on_device(NDArray::from_vec(vec![1.0f64], &[]).unwrap());
            let g_rsp0 = on_device(NDArray::row_sparse_unchecked(Vec::<f64>::new(), vec![], &[]));
            let st0: Vec<NDArray> = (0..case.states)
                .map(|_| on_device(NDArray::zeros(&[], DType::F64).unwrap()))
                .collect();
            run(
                &scalar,
                &g_rsp0,
                &st0,
                "row_sparse gradient of a 0-d weight",
            );
            if case.states > 0 {
                let mut bad = st.clone();
                bad[0] = on_device(NDArray::zeros(&[2, 6], DType::F64).unwrap());
                run(&w, &g, &bad, "[2, 6]");
                bad[0] = on_device(NDArray::zeros(&SHAPE, DType::F32).unwrap());
                run(&w, &g, &bad, "float32");
                let rsp = NDArray::zeros_stype(&SHAPE, DType::F64, SType::RowSparse).unwrap();
                bad[0] = on_device(rsp);
                run(&w, &g, &bad, "RowSparse");
                bad[0] = w.clone();
                run(&w, &g, &bad, "aliases the weight or gradient");
            }
            if case.states > 1 {
                // The same array twice would deadlock the driver's write locks.
                let mut bad = st.clone();
                bad[1] = bad[0].clone();
                run(&w, &g, &bad, "are the same array");
            }
        }
    }
}

device_test! {
    fn bad_row_sparse_gradients_are_refused() {
        for mode in [RowSparseMode::Lazy, RowSparseMode::Standard] {
            for case in &cases() {
                let args = case.args(false, mode);
                let (w, st) = (weight(), states(case));
                for (rows, needle) in [
                    (vec![4i64], "row id 4 at position 0"),
                    (vec![1, 1], "row id 1 at position 1"),
                    (vec![2, 0], "row id 0 at position 1"),
                    (vec![-1], "row id -1 at position 0"),
                ] {
                    let data = vec![1.0f64; rows.len() * 3];
                    let g = on_device(NDArray::row_sparse_unchecked(data, rows, &SHAPE));
                    refused(case, (&w, &g, &st), &args, 1, false, needle);
                }
                // Fewer stored values than the row ids need (only an unchecked build makes one).
                let short = NDArray::row_sparse_unchecked(vec![1.0f64; 5], vec![0, 2], &SHAPE);
                let g = on_device(short);
                let e = (case.run)(&w, &g, &st, &args, 1, false).unwrap_err();
                assert!(e.to_string().contains("need 6 values, got 5"), "{e}");
            }
        }
    }
}

device_test! {
    fn empty_and_zero_width_gradients_change_nothing_lazily() {
        for case in &cases() {
            let args = case.args(true, RowSparseMode::Lazy);
            let (w, st) = (weight(), states(case));
            let before = bits(&f64s(&w));
            let empty = NDArray::row_sparse_from_parts(Vec::<f64>::new(), vec![], &SHAPE);
            let g = on_device(empty.unwrap());
            (case.run)(&w, &g, &st, &args, 1, false).unwrap();
            assert_eq!(bits(&f64s(&w)), before, "{}", case.name);
            // Rows of no values: nothing to read or write.
            let w0 = on_device(NDArray::zeros(&[4, 0], DType::F64).unwrap());
            let st0: Vec<NDArray> = (0..case.states)
                .map(|_| on_device(NDArray::zeros(&(case.state_shape)(&[4, 0]), DType::F64).unwrap()))
                .collect();
            let no_values = NDArray::row_sparse_from_parts(Vec::<f64>::new(), vec![1, 3], &[4, 0]);
            let g0 = on_device(no_values.unwrap());
            (case.run)(&w0, &g0, &st0, &args, 1, false).unwrap();
        }
    }
}

device_test! {
    fn group_adagrad_refuses_weight_decay_and_a_history_not_of_one_value_per_row() {
        use crate::update::{group_adagrad_update, GroupAdaGradParams};
        let case = cases()
            .into_iter()
            .find(|c| c.name == "group_adagrad_update")
            .unwrap();
        let (w, st) = (weight(), states(&case));
        let g = on_device(NDArray::from_vec(values(8, 12, 1.0), &SHAPE).unwrap());
        let ok = case.args(false, RowSparseMode::Lazy);
        refused(&case, (&w, &g, &st), &ok.with_wd(1e-4), 1, false, "weight decay is not supported");
        // A history shaped like the weight (every other rule's state) is the wrong shape.
        let full = vec![on_device(NDArray::zeros(&SHAPE, DType::F64).unwrap())];
        refused(&case, (&w, &g, &full), &ok, 1, false, "must be dense [4, 1] float64");
        let flat = vec![on_device(NDArray::zeros(&[4], DType::F64).unwrap())];
        refused(&case, (&w, &g, &flat), &ok, 1, false, "must be dense [4, 1] float64");
        for eps in [0.0, -1e-5] {
            let args = crate::update::UpdateArgs {
                hyper: GroupAdaGradParams { epsilon: eps },
                ..crate::update::UpdateArgs::new(0.1, GroupAdaGradParams { epsilon: 1e-5 })
            };
            let e = group_adagrad_update(&w, &g, &st[0], &args).unwrap_err().to_string();
            assert!(e.contains("group_adagrad_update") && e.contains("epsilon must be > 0"), "{e}");
        }
        // A 0-d weight has no rows (a dense gradient passes the generic checks).
        let scalar = on_device(NDArray::from_vec(vec![1.0f64], &[]).unwrap());
        let gs = on_device(NDArray::from_vec(vec![1.0f64], &[]).unwrap());
        let h = vec![on_device(NDArray::zeros(&[1, 1], DType::F64).unwrap())];
        refused(&case, (&scalar, &gs, &h), &ok, 1, false, "0-d weight has no rows");
        (case.run)(&w, &g, &st, &ok, 1, false).unwrap();
    }
}
