//! COCOB's packed state layout computes the same bits as the five-array one, for every kind of
//! gradient (dense, row_sparse standard and lazy), with and without clipping.

use super::{arr, base, bits, f64s, on_device, row_set, rsp, values, zeros};
use crate::update::{
    cocob_packed_update, cocob_update, CocobParams, RowSparseMode, UpdateArgs, COCOB_STATES,
};
use crate::{device_test, Float, NDArray};

/// Run `steps` steps of both layouts from the same weight and compare weights and states bit
/// for bit after each.
fn same_bits<T: Float>(shape: &[usize], mode: Option<RowSparseMode>, clip: bool, alpha: f64) {
    let n: usize = shape.iter().product();
    let w5 = arr::<T>(&values(1, n, 0.8), shape);
    let wp = arr::<T>(&values(1, n, 0.8), shape);
    let five: Vec<NDArray> = (0..COCOB_STATES).map(|_| zeros(shape, T::DTYPE)).collect();
    let mut pshape = shape.to_vec();
    pshape.push(COCOB_STATES);
    let packed = zeros(&pshape, T::DTYPE);
    let args: UpdateArgs<CocobParams> = {
        let a = base(clip, mode.unwrap_or(RowSparseMode::Lazy));
        UpdateArgs::new(a.lr, CocobParams { alpha })
            .with_wd(a.wd)
            .with_rescale_grad(a.rescale_grad)
            .with_clip_gradient(a.clip_gradient)
            .with_row_sparse(a.row_sparse)
    };
    let what = format!("{shape:?} {:?} {mode:?} clip {clip}", T::DTYPE);
    for t in 1..=6u64 {
        // Some steps repeat rows, some reach rows seen for the first time.
        let full = values(100 + t, n, 2.5);
        let g = match mode {
            None => arr::<T>(&full, shape),
            Some(_) => rsp::<T>(&full, &row_set(t % 3, shape[0], 0.5), shape),
        };
        let [l, s, r, th, w0] = [0, 1, 2, 3, 4].map(|k| &five[k]);
        cocob_update(&w5, &g, l, s, r, th, w0, &args).unwrap();
        cocob_packed_update(&wp, &g, &packed, &args).unwrap();
        assert_eq!(bits(&f64s(&wp)), bits(&f64s(&w5)), "{what} step {t}");
        let p = f64s(&packed);
        for (k, st) in five.iter().enumerate() {
            let from_packed: Vec<f64> = p.iter().skip(k).step_by(COCOB_STATES).copied().collect();
            assert_eq!(
                bits(&from_packed),
                bits(&f64s(st)),
                "{what} step {t} state {k}"
            );
        }
    }
}

device_test! {
    fn cocob_packed_states_give_the_five_array_bits() {
        for clip in [false, true] {
            for mode in [None, Some(RowSparseMode::Lazy), Some(RowSparseMode::Standard)] {
                for shape in [&[40, 1][..], &[13, 3], &[7], &[1100, 128]] {
                    same_bits::<f32>(shape, mode, clip, 20.0);
                    same_bits::<f64>(shape, mode, clip, 4.0);
                }
            }
        }
    }
}

device_test! {
    fn cocob_packed_state_of_another_shape_is_refused() {
        let w = arr::<f32>(&[1.0, 2.0], &[2, 1]);
        let g = arr::<f32>(&[0.5, 0.5], &[2, 1]);
        let args = UpdateArgs::new(1.0, CocobParams { alpha: 20.0 });
        // The weight's own shape (one state, not five) and five arrays' worth laid out flat.
        for bad in [&[2, 1][..], &[10], &[2, 5], &[2, 1, 4]] {
            let st = on_device(NDArray::zeros(bad, crate::DType::F32).unwrap());
            let e = cocob_packed_update(&w, &g, &st, &args).unwrap_err().to_string();
            assert!(e.contains("cocob_packed_update") && e.contains("[2, 1, 5]"), "{bad:?}: {e}");
        }
        // A non-positive alpha, as the five-array operator refuses it.
        let st = on_device(NDArray::zeros(&[2, 1, 5], crate::DType::F32).unwrap());
        let e = cocob_packed_update(&w, &g, &st, &UpdateArgs::new(1.0, CocobParams { alpha: 0.0 }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("alpha must be positive"), "{e}");
        // Nothing was written by the refused calls.
        assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
        assert!(st.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
    }
}
