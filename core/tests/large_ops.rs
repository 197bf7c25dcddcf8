//! Every operator family of MXNet's large-tensor tests on arrays of more than 2^31 elements:
//! creation, elementwise and broadcasting, reductions, indexing and slicing, take and
//! embedding, concat/stack/split, where, sort and topk, argmax, one_hot, dot, and sparse (csr
//! column ids past 2^31, row_sparse arrays of more than 2^31 elements, csr x dense with such a
//! csr). Each check reads values on both sides of element 2^31 exactly, so an index that wraps
//! at 32 bits (or an `i32` cast) gives a wrong value, not just a slow test.
//!
//! Memory: inputs are made zeroed (untouched pages cost no memory, and reading them maps the
//! shared zero page), then written at a few places, so an input of 8 GiB costs a few pages; an
//! operator's output is real memory (2 GiB for u8, 8 GiB for f32). The tests take one lock, so
//! at most one output of 8 GiB exists at a time and the suite fits CI's 24 GiB. The checks
//! that need more (an i64 argsort of 2^31 elements is 16 GiB) are `#[ignore]`d and run with
//! `cargo test --release -p sparrow-core --test large_ops -- --ignored --test-threads 1`
//! (README, "Arrays past 2^31 elements").
//!
//! Integer operators run on u8 arrays (2 GiB); the float-only ones (arithmetic, dot,
//! embedding) on f32. On another device the inputs are written in host memory and moved there
//! once.

use std::sync::Mutex;

use sparrow_core::testing::test_device;
use sparrow_core::{device_test, sparse, with_device, DType, Device, NDArray, SType};

/// 2^31: the first element index a 32-bit signed integer cannot hold.
const BOUND: usize = 1 << 31;
/// One-dimensional length just past the bound.
const N: usize = BOUND + 1024;
/// A 2-D shape past the bound: `ROWS x COLS` = 2^31 + 2^11, whose last row starts at 2^31.
const ROWS: usize = (1 << 20) + 1;
const COLS: usize = 1 << 11;

/// One large test at a time (see the module comment).
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A zeroed host array with the given elements set (flat indices), moved to the device under
/// test.
fn sparse_input<T: sparrow_core::Element>(
    shape: &[usize],
    dtype: DType,
    writes: &[(usize, T)],
) -> NDArray {
    let host = with_device(Device::Cpu, || NDArray::zeros(shape, dtype))
        .unwrap()
        .unwrap();
    host.with_slice_mut::<T, _>(|s| {
        for &(i, v) in writes {
            s[i] = v;
        }
    })
    .unwrap();
    host.to_device(test_device()).unwrap()
}

/// The elements `[start, start + len)` of a 1-D array, read through a slice (so only they
/// come back to the host).
fn window<T: sparrow_core::Element>(a: &NDArray, start: usize, len: usize) -> Vec<T> {
    a.slice_axis(0, Some(start as i64), Some((start + len) as i64), 1)
        .unwrap()
        .to_vec::<T>()
        .unwrap()
}

/// Row `r` of a 2-D array.
fn row<T: sparrow_core::Element>(a: &NDArray, r: usize) -> Vec<T> {
    window::<T>(a, r, 1)
}

device_test! {
fn creation_past_2_pow_31() {
    let _g = lock();
    let z = NDArray::zeros(&[N], DType::F32).unwrap();
    assert_eq!(z.size(), N);
    assert_eq!(z.sum(None, false).unwrap().to_vec::<f32>().unwrap(), vec![0.0]);
    drop(z);
    let f = NDArray::full(&[ROWS, COLS], 7.0, DType::U8).unwrap();
    assert_eq!(f.shape(), vec![ROWS, COLS]);
    assert_eq!(row::<u8>(&f, ROWS - 1), vec![7u8; COLS]);
    // Sum of u8 accumulates in i64: 7 * (2^31 + 2^11), past what 32 bits hold.
    let total = f.sum(None, false).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(total, vec![7 * (ROWS * COLS) as i64]);
}
}

device_test! {
fn elementwise_and_broadcasting_past_2_pow_31() {
    let _g = lock();
    let last = (ROWS - 1) * COLS;
    assert_eq!(last, BOUND);
    let x = sparse_input::<f32>(
        &[ROWS, COLS],
        DType::F32,
        &[(5, 1.0), (BOUND - 1, 2.0), (last + 5, 3.0), (last + COLS - 1, 4.0)],
    );
    let bias = sparse_input::<f32>(&[1, COLS], DType::F32, &[(5, 0.5)]);
    // A row broadcast over 2^20 + 1 rows: the last row's elements sit past 2^31.
    let y = x.add(&bias).unwrap();
    let mut want = vec![0f32; COLS];
    want[5] = 3.5;
    want[COLS - 1] = 4.0;
    assert_eq!(row::<f32>(&y, ROWS - 1), want);
    let mut want0 = vec![0f32; COLS];
    want0[5] = 1.5;
    assert_eq!(row::<f32>(&y, 0), want0);
    assert_eq!(row::<f32>(&y, ROWS - 2)[COLS - 1], 2.0);
    drop(y);
    // A scalar op over the flat array.
    let s = x.mul_scalar(-2.0).unwrap();
    assert_eq!(row::<f32>(&s, ROWS - 1)[5], -6.0);
    assert_eq!(row::<f32>(&s, ROWS - 1)[COLS - 1], -8.0);
    drop(s);
    // A column broadcast along the rows.
    let col = sparse_input::<f32>(&[ROWS, 1], DType::F32, &[(ROWS - 1, 10.0)]);
    let m = x.maximum(&col).unwrap();
    let got = row::<f32>(&m, ROWS - 1);
    assert_eq!((got[0], got[5], got[COLS - 1]), (10.0, 10.0, 10.0));
    assert_eq!(row::<f32>(&m, 0)[5], 1.0);
}
}

device_test! {
fn reductions_past_2_pow_31() {
    let _g = lock();
    let last = (ROWS - 1) * COLS;
    let x = sparse_input::<u8>(
        &[ROWS, COLS],
        DType::U8,
        &[(3, 1), (last + 3, 200), (last + 9, 250), (BOUND - 1, 9)],
    );
    // Along the rows: the last row's sum reads elements past 2^31.
    let per_row = x.sum(Some(&[1]), false).unwrap();
    assert_eq!(per_row.shape(), vec![ROWS]);
    assert_eq!(window::<i64>(&per_row, ROWS - 2, 2), vec![9, 450]);
    // Along the columns: each column sums 2^20 + 1 elements spread over the whole array.
    let per_col = x.sum(Some(&[0]), false).unwrap();
    assert_eq!(window::<i64>(&per_col, 0, 10), vec![0, 0, 0, 201, 0, 0, 0, 0, 0, 250]);
    assert_eq!(window::<i64>(&per_col, COLS - 1, 1), vec![9]);
    let mean = x.mean(None, false).unwrap().to_vec::<f64>().unwrap()[0];
    let want = (1 + 200 + 250 + 9) as f64 / (ROWS * COLS) as f64;
    assert!((mean - want).abs() <= want * 1e-12, "mean {mean} vs {want}");
    assert_eq!(x.max(None, false).unwrap().to_vec::<u8>().unwrap(), vec![250]);
    let am = x.argmax(None, false).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(am, vec![(last + 9) as i64]);
    let am_rows = x.argmax(Some(1), false).unwrap();
    assert_eq!(window::<i64>(&am_rows, ROWS - 1, 1), vec![9]);
    let am_cols = x.argmax(Some(0), false).unwrap();
    assert_eq!(window::<i64>(&am_cols, 3, 1), vec![(ROWS - 1) as i64]);
    let mx_rows = x.max(Some(&[1]), false).unwrap();
    assert_eq!(window::<u8>(&mx_rows, ROWS - 2, 2), vec![9, 250]);
}
}

device_test! {
fn indexing_and_slicing_past_2_pow_31() {
    let _g = lock();
    let last = (ROWS - 1) * COLS;
    let x = sparse_input::<u8>(&[ROWS, COLS], DType::U8, &[(last + 1, 5), (BOUND - 1, 6)]);
    // Slices of a 2-D array across the boundary, along each axis.
    let s = x.slice_axis(0, Some((ROWS - 2) as i64), None, 1).unwrap();
    assert_eq!(s.shape(), vec![2, COLS]);
    assert_eq!(row::<u8>(&s, 1)[1], 5);
    assert_eq!(row::<u8>(&s, 0)[COLS - 1], 6);
    let c = x.slice_axis(1, Some(1), Some(2), 1).unwrap();
    assert_eq!(window::<u8>(&c.reshape(&[ROWS]).unwrap(), ROWS - 1, 1), vec![5]);
    // take along both axes.
    let ids = NDArray::from_vec(vec![(ROWS - 1) as i64, 0, -2], &[3])
        .unwrap()
        .to_device(test_device())
        .unwrap();
    let t = x.take(&ids, 0).unwrap();
    assert_eq!(t.shape(), vec![3, COLS]);
    assert_eq!(row::<u8>(&t, 0)[1], 5);
    assert_eq!(row::<u8>(&t, 2)[COLS - 1], 6);
    let cid = NDArray::from_vec(vec![1i64], &[1]).unwrap().to_device(test_device()).unwrap();
    let tc = x.take(&cid, 1).unwrap();
    assert_eq!(window::<u8>(&tc.reshape(&[ROWS]).unwrap(), ROWS - 1, 1), vec![5]);
    // flip moves the last elements to the front and the first past 2^31.
    let flat = x.reshape(&[ROWS * COLS]).unwrap();
    let f = flat.flip(0).unwrap();
    assert_eq!(window::<u8>(&f, COLS - 2, 1), vec![5]);
    assert_eq!(window::<u8>(&f, COLS, 1), vec![6]);
    drop(f);
    // index_copy writes a row that starts at 2^31.
    let new = NDArray::full(&[1, COLS], 3.0, DType::U8).unwrap();
    let at = NDArray::from_vec(vec![(ROWS - 1) as i64], &[1])
        .unwrap()
        .to_device(test_device())
        .unwrap();
    let ic = x.index_copy(&at, &new).unwrap();
    assert_eq!(row::<u8>(&ic, ROWS - 1), vec![3u8; COLS]);
    assert_eq!(row::<u8>(&ic, ROWS - 2)[COLS - 1], 6);
}
}

device_test! {
fn take_and_embedding_past_2_pow_31() {
    let _g = lock();
    // A (2^24 + 2) x 128 f32 table: row 2^24 + 1 starts at element 2^31 + 128.
    let rows = (1usize << 24) + 2;
    let width = 128;
    let far = rows - 1;
    let table = sparse_input::<f32>(
        &[rows, width],
        DType::F32,
        &[(far * width, 1.5), (far * width + width - 1, -2.5), (3 * width, 4.0)],
    );
    // i64 ids: an f32 id cannot name row 2^24 + 1 (it rounds to 2^24).
    let ids = NDArray::from_vec(vec![far as i64, 3, far as i64], &[3])
        .unwrap()
        .to_device(test_device())
        .unwrap();
    let e = sparse::embedding(&table, &ids).unwrap();
    assert_eq!(e.shape(), vec![3, width]);
    let r0 = row::<f32>(&e, 0);
    assert_eq!((r0[0], r0[width - 1], r0[1]), (1.5, -2.5, 0.0));
    assert_eq!(row::<f32>(&e, 1)[0], 4.0);
    assert_eq!(row::<f32>(&e, 2), r0);
    let idx = NDArray::from_vec(vec![far as i64], &[1]).unwrap().to_device(test_device()).unwrap();
    let t = table.take(&idx, 0).unwrap();
    assert_eq!(row::<f32>(&t, 0), r0);
}
}

device_test! {
fn concat_stack_split_past_2_pow_31() {
    let _g = lock();
    let half = N / 2;
    let a = sparse_input::<u8>(&[half], DType::U8, &[(half - 1, 1)]);
    let b = sparse_input::<u8>(&[half], DType::U8, &[(0, 2), (half - 1, 3)]);
    let c = NDArray::concat(&[&a, &b], 0).unwrap();
    assert_eq!(c.shape(), vec![N]);
    assert_eq!(window::<u8>(&c, half - 1, 2), vec![1, 2]);
    assert_eq!(window::<u8>(&c, N - 1, 1), vec![3]);
    let parts = c.split(2, 0).unwrap();
    assert_eq!(window::<u8>(&parts[1], half - 1, 1), vec![3]);
    drop((c, parts));
    let s = NDArray::stack(&[&a, &b], 0).unwrap();
    assert_eq!(s.shape(), vec![2, half]);
    let flat = s.reshape(&[N]).unwrap();
    assert_eq!(window::<u8>(&flat, half - 1, 2), vec![1, 2]);
    assert_eq!(window::<u8>(&flat, N - 1, 1), vec![3]);
    // Stacked along the last axis, b's last element lands at 2 * half - 1 = N - 1.
    let s1 = NDArray::stack(&[&a, &b], 1).unwrap();
    assert_eq!(s1.shape(), vec![half, 2]);
    assert_eq!(row::<u8>(&s1, half - 1), vec![1, 3]);
}
}

device_test! {
fn where_past_2_pow_31() {
    let _g = lock();
    let cond = sparse_input::<u8>(&[N], DType::U8, &[(BOUND + 3, 1), (1, 1)]);
    let x = sparse_input::<u8>(&[N], DType::U8, &[(BOUND + 3, 9), (1, 8)]);
    let y = NDArray::full(&[1], 4.0, DType::U8).unwrap();
    let w = NDArray::where_(&cond, &x, &y).unwrap();
    assert_eq!(w.shape(), vec![N]);
    assert_eq!(window::<u8>(&w, BOUND + 2, 3), vec![4, 9, 4]);
    assert_eq!(window::<u8>(&w, 0, 3), vec![4, 8, 4]);
}
}

device_test! {
fn sort_topk_argmax_past_2_pow_31() {
    let _g = lock();
    let a = sparse_input::<u8>(
        &[N],
        DType::U8,
        &[(10, 3), (BOUND - 1, 200), (BOUND + 17, 255), (N - 1, 9)],
    );
    let (vals, idx) = a.topk(3, 0, false).unwrap();
    assert_eq!(vals.to_vec::<u8>().unwrap(), vec![255, 200, 9]);
    assert_eq!(
        idx.to_vec::<i64>().unwrap(),
        vec![(BOUND + 17) as i64, (BOUND - 1) as i64, (N - 1) as i64]
    );
    let (vals, idx) = a.topk(1, 0, true).unwrap();
    assert_eq!(vals.to_vec::<u8>().unwrap(), vec![0]);
    assert!(idx.to_vec::<i64>().unwrap()[0] >= 0);
    assert_eq!(a.argmax(None, false).unwrap().to_vec::<i64>().unwrap(), vec![(BOUND + 17) as i64]);
    assert_eq!(a.argmin(None, false).unwrap().to_vec::<i64>().unwrap(), vec![0]);
    let s = a.sort(0, true).unwrap();
    assert_eq!(window::<u8>(&s, N - 4, 4), vec![3, 9, 200, 255]);
    assert_eq!(window::<u8>(&s, BOUND, 1), vec![0]);
    let d = a.sort(0, false).unwrap();
    assert_eq!(window::<u8>(&d, 0, 5), vec![255, 200, 9, 3, 0]);
}
}

device_test! {
#[ignore = "an i64 result of 2^31 elements is 16 GiB: run with --ignored (README)"]
fn argsort_past_2_pow_31() {
    let _g = lock();
    let a = sparse_input::<u8>(&[N], DType::U8, &[(BOUND + 17, 255), (BOUND - 1, 200)]);
    let order = a.argsort(0, false).unwrap();
    assert_eq!(window::<i64>(&order, 0, 2), vec![(BOUND + 17) as i64, (BOUND - 1) as i64]);
}
}

device_test! {
fn one_hot_past_2_pow_31() {
    let _g = lock();
    // (2^21 + 1) ids x depth 1024 = 2^31 + 1024 elements; the last id's row starts at 2^31.
    let n = (1usize << 21) + 1;
    let mut ids = vec![0i64; n];
    ids[n - 1] = 1000;
    ids[n - 2] = 1023;
    ids[1] = 2000; // out of range: an all-off row
    let ids = NDArray::from_vec(ids, &[n]).unwrap().to_device(test_device()).unwrap();
    let h = ids.one_hot(1024, 1.0, 0.0, DType::U8).unwrap();
    assert_eq!(h.shape(), vec![n, 1024]);
    let last = row::<u8>(&h, n - 1);
    assert_eq!((last[1000], last.iter().map(|&v| v as u32).sum::<u32>()), (1, 1));
    assert_eq!(row::<u8>(&h, n - 2)[1023], 1);
    assert_eq!(row::<u8>(&h, 1), vec![0u8; 1024]);
    assert_eq!(h.sum(None, false).unwrap().to_vec::<i64>().unwrap(), vec![(n - 1) as i64]);
}
}

device_test! {
fn dot_past_2_pow_31() {
    let _g = lock();
    // X: (2^24 + 8) x 128 f32 (2^31 + 1024 elements, 8 GiB of zero pages); its last rows sit
    // past element 2^31.
    let rows = (1usize << 24) + 8;
    let k = 128;
    let mut writes: Vec<(usize, f32)> = (0..k).map(|j| ((rows - 1) * k + j, 1.0)).collect();
    writes.push((0, 2.0));
    writes.push(((rows - 2) * k + 7, 3.0));
    let x = sparse_input::<f32>(&[rows, k], DType::F32, &writes);
    let w = NDArray::from_vec(
        (0..k * 2).map(|i| if i % 2 == 0 { 1.0f32 } else { (i / 2) as f32 }).collect(),
        &[k, 2],
    )
    .unwrap()
    .to_device(test_device())
    .unwrap();
    let y = x.dot(&w).unwrap();
    assert_eq!(y.shape(), vec![rows, 2]);
    let sum_j = (k * (k - 1) / 2) as f32;
    assert_eq!(row::<f32>(&y, rows - 1), vec![k as f32, sum_j]);
    assert_eq!(row::<f32>(&y, rows - 2), vec![3.0, 21.0]);
    assert_eq!(row::<f32>(&y, 0), vec![2.0, 0.0]);
    // X^T . G reduces over all 2^24 + 8 rows.
    let g = sparse_input::<f32>(&[rows, 1], DType::F32, &[(rows - 1, 1.0), (0, 1.0)]);
    let xtg = x.dot_t(&g, true, false).unwrap();
    assert_eq!(xtg.shape(), vec![k, 1]);
    let v = xtg.to_vec::<f32>().unwrap();
    assert_eq!((v[0], v[1], v[7]), (3.0, 1.0, 1.0));
}
}

device_test! {
fn csr_with_column_ids_past_2_pow_31() {
    let _g = lock();
    // 3 x (2^31 + 16) csr; W is (2^31 + 16) x 1 f32 (8 GiB of zero pages).
    let cols = BOUND + 16;
    let far = [(BOUND + 7) as i64, (BOUND + 15) as i64];
    let x = NDArray::csr_from_parts(
        vec![1.0f32, 2.0, 3.0, 4.0],
        vec![5, far[0], far[1], far[1]],
        vec![0, 3, 3, 4],
        [3, cols],
    )
    .unwrap()
    .to_device(test_device())
    .unwrap();
    assert_eq!(x.shape(), vec![3, cols]);
    let w = sparse_input::<f32>(&[cols, 1], DType::F32, &[(5, 10.0), (BOUND + 7, 100.0), (BOUND + 15, 1000.0)]);
    let y = x.dot(&w).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![10.0 + 200.0 + 3000.0, 0.0, 4000.0]);
    // X^T . G as row_sparse: its row ids are X's column ids, past 2^31.
    let g = NDArray::from_vec(vec![1.0f32, 5.0, -1.0], &[3, 1])
        .unwrap()
        .to_device(test_device())
        .unwrap();
    let xtg = sparse::dot_csr_t_dense(&x, &g, SType::RowSparse).unwrap();
    assert_eq!(xtg.shape(), vec![cols, 1]);
    assert_eq!(xtg.row_ids().unwrap(), vec![5, far[0], far[1]]);
    let (_, vals) = xtg.row_sparse_parts().unwrap();
    assert_eq!(vals.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0 - 4.0]);
    // Row slices keep the far columns.
    let r = x.slice_axis(0, Some(2), Some(3), 1).unwrap();
    assert_eq!(r.dot(&w).unwrap().to_vec::<f32>().unwrap(), vec![4000.0]);
}
}

device_test! {
fn row_sparse_past_2_pow_31() {
    let _g = lock();
    // (2^24 + 8) x 128: 2^31 + 1024 elements, two stored rows, one of them past 2^31.
    let rows = (1usize << 24) + 8;
    let k = 128;
    let far = (rows - 1) as i64;
    let a = NDArray::row_sparse_from_parts(
        (0..2 * k).map(|i| i as f32).collect(),
        vec![3, far],
        &[rows, k],
    )
    .unwrap()
    .to_device(test_device())
    .unwrap();
    let b = NDArray::row_sparse_from_parts(vec![1.0f32; k], vec![far], &[rows, k])
        .unwrap()
        .to_device(test_device())
        .unwrap();
    let s = a.add(&b).unwrap();
    assert_eq!(s.stype(), SType::RowSparse);
    assert_eq!(s.row_ids().unwrap(), vec![3, far]);
    let (_, v) = s.row_sparse_parts().unwrap();
    let v = v.to_vec::<f32>().unwrap();
    assert_eq!((v[0], v[k], v[2 * k - 1]), (0.0, k as f32 + 1.0, (2 * k - 1) as f32 + 1.0));
    let m = a.mul_scalar(2.0).unwrap();
    assert_eq!(m.stype(), SType::RowSparse);
    let total = m.sum(None, false).unwrap().to_vec::<f32>().unwrap()[0];
    assert_eq!(total, (2 * k * (2 * k - 1)) as f32);
    // csr (3 x rows) . row_sparse: reads row `far` of the table.
    let x = NDArray::csr_from_parts(vec![1.0f32, 2.0], vec![3, far], vec![0, 1, 1, 2], [3, rows])
        .unwrap()
        .to_device(test_device())
        .unwrap();
    let y = x.dot(&a).unwrap();
    assert_eq!(y.shape(), vec![3, k]);
    assert_eq!(row::<f32>(&y, 2)[0], 2.0 * k as f32);
    assert_eq!(row::<f32>(&y, 0)[1], 1.0);
    // Keeping only the far row.
    let kept = sparse::retain_rows(&a, &[far]).unwrap();
    assert_eq!(kept.row_ids().unwrap(), vec![far]);
}
}

device_test! {
#[ignore = "densifies 8 GiB and draws 8 GiB of random values: run with --ignored (README)"]
fn row_sparse_densified_and_random_init_past_2_pow_31() {
    let _g = lock();
    let rows = (1usize << 24) + 8;
    let k = 128;
    let far = (rows - 1) as i64;
    let a = NDArray::row_sparse_from_parts(vec![5.0f32; k], vec![far], &[rows, k])
        .unwrap()
        .to_device(test_device())
        .unwrap();
    let d = a.tostype(SType::Dense).unwrap();
    assert_eq!(row::<f32>(&d, rows - 1), vec![5.0; k]);
    assert_eq!(row::<f32>(&d, rows - 2), vec![0.0; k]);
    drop(d);
    sparrow_core::random::seed(7);
    let u = sparrow_core::random::uniform(-1.0, 1.0, &[rows, k], DType::F32).unwrap();
    let last = row::<f32>(&u, rows - 1);
    assert!(last.iter().all(|v| (-1.0..1.0).contains(v)));
    assert!(last.iter().any(|&v| v != 0.0), "the rows past 2^31 were drawn");
}
}
