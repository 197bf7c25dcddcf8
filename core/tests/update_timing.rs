//! A rough timing of the lazy row_sparse GroupAdaGrad step on an embedding-sized table,
//! against AdaGrad's on the same gradient (and, by hand, NumPy's fancy-indexed update with the
//! same sizes). Ignored: run with
//! `cargo test --release -p sparrow-core --test update_timing -- --ignored --nocapture`.

use std::time::Instant;

use sparrow_core::update::{
    adagrad_update, group_adagrad_update, AdaGradParams, GroupAdaGradParams, UpdateArgs,
};
use sparrow_core::{DType, NDArray};

#[test]
#[ignore]
fn timing_group_adagrad_lazy_step() {
    let (rows, dim, touched) = (1_000_000usize, 64usize, 10_000usize);
    let w = NDArray::zeros(&[rows, dim], DType::F32).unwrap();
    let h_group = NDArray::zeros(&[rows, 1], DType::F32).unwrap();
    let h_full = NDArray::zeros(&[rows, dim], DType::F32).unwrap();
    // Every 100th row, values in [-1, 1].
    let ids: Vec<i64> = (0..touched as i64).map(|i| i * 100).collect();
    let vals: Vec<f32> = (0..touched * dim)
        .map(|k| ((k * 7919) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let g = NDArray::row_sparse_from_parts(vals, ids, &[rows, dim]).unwrap();
    let best = |f: &dyn Fn()| {
        f();
        (0..7)
            .map(|_| {
                let s = Instant::now();
                f();
                s.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let group = UpdateArgs::new(0.01, GroupAdaGradParams { epsilon: 1e-5 });
    let t_group = best(&|| group_adagrad_update(&w, &g, &h_group, &group).unwrap());
    let ada = UpdateArgs::new(0.01, AdaGradParams { epsilon: 1e-7 });
    let t_ada = best(&|| adagrad_update(&w, &g, &h_full, &ada).unwrap());
    assert!(w.to_vec::<f32>().unwrap().iter().all(|x| x.is_finite()));
    eprintln!(
        "lazy step, {touched} rows of {dim} in a {rows}-row table: group_adagrad_update \
         {:.3} ms (state {rows} x 1), adagrad_update {:.3} ms (state {rows} x {dim})",
        t_group * 1e3,
        t_ada * 1e3
    );
}
