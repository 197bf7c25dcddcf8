//! Elementwise loops over host slices: maps, zips and in-place updates, in parallel above
//! [`PAR_THRESHOLD`] and compiled twice (baseline and AVX2+FMA, chosen at run time).

/// Arrays with at least this many elements are processed in parallel with rayon; smaller ones
/// stay on the calling thread so they do not pay the fork/join overhead (~5-20 us).
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

/// Map a unary function over a slice, in parallel above [`PAR_THRESHOLD`].
pub(crate) fn map_slice<S: Copy + Send + Sync, D: Send>(
    src: &[S],
    f: impl Fn(S) -> D + Sync + Send,
) -> Vec<D> {
    if src.len() >= PAR_THRESHOLD {
        fill_parallel(src.len(), |start, out| {
            simd::map_into(&src[start..start + out.len()], out, &f)
        })
    } else {
        let mut out = Vec::with_capacity(src.len());
        simd::map_into(src, &mut out.spare_capacity_mut()[..src.len()], &f);
        // SAFETY: `map_into` initialised all `src.len()` slots, within the capacity.
        unsafe { out.set_len(src.len()) };
        out
    }
}

/// [`map_slice`] written into `dst` (of `src`'s length): the same loop, in parallel above
/// [`PAR_THRESHOLD`], so the same bits.
pub(crate) fn map_slice_to<S: Copy + Send + Sync, D: Copy + Send>(
    src: &[S],
    dst: &mut [D],
    f: impl Fn(S) -> D + Sync + Send,
) {
    use rayon::prelude::*;
    let n = src.len().min(dst.len());
    // SAFETY: `MaybeUninit<D>` has `D`'s layout; the loop only writes initialized `D`s, and
    // `D: Copy` has no drop to skip.
    let out = unsafe {
        std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<std::mem::MaybeUninit<D>>(), n)
    };
    if n >= PAR_THRESHOLD {
        let chunk = MIN_CHUNK_BYTES / std::mem::size_of::<D>().max(1);
        out.par_chunks_mut(chunk.max(1))
            .zip(src[..n].par_chunks(chunk.max(1)))
            .for_each(|(o, s)| simd::map_into(s, o, &f));
    } else {
        simd::map_into(&src[..n], out, &f);
    }
}

/// `dst` viewed as slots to write (what the `fill` closures of [`fill_parallel`] take).
pub(crate) fn as_slots<D: Copy>(dst: &mut [D]) -> &mut [std::mem::MaybeUninit<D>] {
    // SAFETY: `MaybeUninit<D>` has `D`'s layout; writers only store initialized `D`s, and
    // `D: Copy` has no drop to skip.
    unsafe {
        std::slice::from_raw_parts_mut(
            dst.as_mut_ptr().cast::<std::mem::MaybeUninit<D>>(),
            dst.len(),
        )
    }
}

/// Run `fill(start, part)` over all of `dst`: in parallel pieces above [`PAR_THRESHOLD`], as
/// [`fill_parallel`] does for a new vector. For kernels whose every element is computed on its
/// own (maps, zips, broadcasts), so the pieces do not change the values.
pub(crate) fn fill_to<D: Copy + Send>(
    dst: &mut [D],
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<D>]) + Sync + Send,
) {
    use rayon::prelude::*;
    let n = dst.len();
    let out = as_slots(dst);
    if n >= PAR_THRESHOLD {
        let tasks = rayon::current_num_threads().max(1) * TASKS_PER_THREAD;
        let chunk = n
            .div_ceil(tasks)
            .max(MIN_CHUNK_BYTES / std::mem::size_of::<D>().max(1))
            .max(1);
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(c, part)| fill(c * chunk, part));
    } else {
        fill(0, out);
    }
}

/// [`zip_slices`] written into `dst` (of the operands' length): the same per-element loop.
pub(crate) fn zip_slices_to<A: Copy + Send + Sync, B: Copy + Send + Sync, D: Copy + Send>(
    a: &[A],
    b: &[B],
    dst: &mut [D],
    f: impl Fn(A, B) -> D + Sync + Send,
) {
    debug_assert!(a.len() == dst.len() && b.len() == dst.len());
    fill_to(dst, |start, out| {
        let end = start + out.len();
        simd::zip_into(&a[start..end], &b[start..end], out, &f)
    })
}

/// `dst[i] = f(dst[i])` in place, in parallel above [`PAR_THRESHOLD`] (as [`map_slice`]).
pub(crate) fn map_in_place<T: Copy + Send>(dst: &mut [T], f: impl Fn(T) -> T + Sync + Send) {
    use rayon::prelude::*;
    if dst.len() >= PAR_THRESHOLD {
        let chunk = (MIN_CHUNK_BYTES / std::mem::size_of::<T>().max(1)).max(1);
        dst.par_chunks_mut(chunk)
            .for_each(|c| simd::map_assign(c, &f));
    } else {
        simd::map_assign(dst, &f);
    }
}

/// Zip two equal-length slices through a binary function, in parallel above [`PAR_THRESHOLD`].
pub(crate) fn zip_slices<A: Copy + Send + Sync, B: Copy + Send + Sync, D: Send>(
    a: &[A],
    b: &[B],
    f: impl Fn(A, B) -> D + Sync + Send,
) -> Vec<D> {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    if n >= PAR_THRESHOLD {
        fill_parallel(n, |start, out| {
            let end = start + out.len();
            simd::zip_into(&a[start..end], &b[start..end], out, &f)
        })
    } else {
        let mut out = Vec::with_capacity(n);
        simd::zip_into(&a[..n], &b[..n], &mut out.spare_capacity_mut()[..n], &f);
        // SAFETY: `zip_into` initialised all `n` slots, within the capacity.
        unsafe { out.set_len(n) };
        out
    }
}

/// `dst[i] = f(dst[i], src[i])` in place, on the calling thread, with the same AVX2 copy as
/// [`zip_slices`] where the CPU has it. For optimizer updates of a few rows: the row_sparse SGD
/// step of the sparse tutorial updates ~100 rows of 128 floats per batch, which the baseline
/// (SSE2) loop ran 4 lanes wide. Results are bit-identical to the plain loop (no contraction
/// into fused multiply-adds happens without fast-math flags).
pub(crate) fn zip_assign<T: Copy, A: Copy>(dst: &mut [T], src: &[A], f: impl Fn(T, A) -> T) {
    debug_assert_eq!(dst.len(), src.len());
    let n = dst.len().min(src.len());
    simd::zip_assign(&mut dst[..n], &src[..n], &f)
}

/// [`zip_assign`] over scattered rows: for each `i`, row `rows[i]` of `dst` (rows of
/// `row_len` elements) is updated with row `i` of `src`, `d = f(d, s)`, on the calling thread.
/// One AVX2 dispatch for all rows, and each row a few ahead is prefetched: this is the whole
/// lazy row_sparse SGD step, whose ~100 rows per batch lie at random places of a weight far
/// larger than the caches. A per-row [`zip_assign`] call cost ~60 instructions of call,
/// dispatch and loop set-up per 128-float row. Bit-identical to the plain loops.
///
/// Fails, before writing anything, when a row id is negative or past `dst`'s rows, or when
/// `src` holds fewer than `rows.len()` rows. Repeated ids are updated once per occurrence.
/// With `row_len == 0` there is nothing to read or write and the ids are not looked at.
pub(crate) fn zip_assign_rows<T: Copy, A: Copy>(
    dst: &mut [T],
    row_len: usize,
    rows: &[i64],
    src: &[A],
    f: impl Fn(T, A) -> T,
) -> crate::Result<()> {
    if row_len == 0 {
        return Ok(());
    }
    let n_rows = dst.len() / row_len;
    // One branch-free pass over the ids (a negative id is a huge u64), vectorized; the
    // position of a bad id is looked for only when there is one.
    let max_id = rows.iter().map(|&r| r as u64).fold(0, u64::max);
    if max_id >= n_rows as u64 {
        let (i, r) = rows
            .iter()
            .enumerate()
            .find(|&(_, &r)| r as u64 >= n_rows as u64)
            .map_or((0, 0), |(i, &r)| (i, r));
        return Err(crate::Error::index(
            "zip_assign_rows",
            format!("row id {r} at position {i} is outside 0..{n_rows}"),
        ));
    }
    if src.len() / row_len < rows.len() {
        return Err(crate::Error::shape(
            "zip_assign_rows",
            format!(
                "{} rows of {row_len} need {} source values, got {}",
                rows.len(),
                rows.len() * row_len,
                src.len()
            ),
        ));
    }
    // SAFETY: row_len > 0, every id is inside dst's rows and src is long enough (all checked
    // above).
    unsafe { simd::zip_assign_rows(dst, row_len, rows, src, &f) };
    Ok(())
}

/// `dst[i] = f(dst[i])` in place, on the calling thread (AVX2 copy where available).
pub(crate) fn map_assign<T: Copy>(dst: &mut [T], f: impl Fn(T) -> T) {
    simd::map_assign(dst, &f)
}

/// Whether the CPU has AVX2 and FMA, the features of the crate's hand-written x86 kernels.
/// `std` caches the detection (two atomic loads); inlined because hot loops ask once per row
/// (the row_sparse SGD step, the small segment sums).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// The elementwise loops of [`map_slice`] and [`zip_slices`], compiled twice: for the build's
/// baseline (SSE2 on x86_64, 4 f32 lanes) and with AVX2+FMA (8 lanes, fused multiply-add),
/// chosen at run time. The closures are inlined into each copy, so maps over branch-free
/// kernels such as [`expf::exp_f32`] (sigmoid, tanh, their fused gradients) run 8 lanes wide
/// on the machines that have it, without building the whole crate for a newer CPU.
pub(crate) mod simd {
    #[cfg(target_arch = "x86_64")]
    use super::has_avx2_fma;
    use crate::cpu::rows::prefetch_bytes;
    use std::mem::MaybeUninit;

    #[inline(always)]
    fn map_loop<S: Copy, D>(src: &[S], out: &mut [MaybeUninit<D>], f: &impl Fn(S) -> D) {
        for (o, &x) in out.iter_mut().zip(src) {
            o.write(f(x));
        }
    }

    #[inline(always)]
    fn zip_loop<A: Copy, B: Copy, D>(
        a: &[A],
        b: &[B],
        out: &mut [MaybeUninit<D>],
        f: &impl Fn(A, B) -> D,
    ) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            o.write(f(x, y));
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn map_avx2<S: Copy, D>(src: &[S], out: &mut [MaybeUninit<D>], f: &impl Fn(S) -> D) {
        map_loop(src, out, f)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zip_avx2<A: Copy, B: Copy, D>(
        a: &[A],
        b: &[B],
        out: &mut [MaybeUninit<D>],
        f: &impl Fn(A, B) -> D,
    ) {
        zip_loop(a, b, out, f)
    }

    /// `out[i] = f(src[i])` for every `i < out.len()` (`src` at least as long).
    pub(crate) fn map_into<S: Copy, D>(src: &[S], out: &mut [MaybeUninit<D>], f: &impl Fn(S) -> D) {
        debug_assert!(src.len() >= out.len());
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma() {
            // SAFETY: the CPU supports the features the copy was compiled for (checked above).
            return unsafe { map_avx2(src, out, f) };
        }
        map_loop(src, out, f)
    }

    /// `out[i] = f(a[i], b[i])` for every `i < out.len()` (`a`, `b` at least as long).
    pub(crate) fn zip_into<A: Copy, B: Copy, D>(
        a: &[A],
        b: &[B],
        out: &mut [MaybeUninit<D>],
        f: &impl Fn(A, B) -> D,
    ) {
        debug_assert!(a.len() >= out.len() && b.len() >= out.len());
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma() {
            // SAFETY: the CPU supports the features the copy was compiled for (checked above).
            return unsafe { zip_avx2(a, b, out, f) };
        }
        zip_loop(a, b, out, f)
    }

    #[inline(always)]
    fn zip_assign_loop<T: Copy, A: Copy>(dst: &mut [T], src: &[A], f: &impl Fn(T, A) -> T) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = f(*d, x);
        }
    }

    #[inline(always)]
    fn map_assign_loop<T: Copy>(dst: &mut [T], f: &impl Fn(T) -> T) {
        for d in dst.iter_mut() {
            *d = f(*d);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zip_assign_avx2<T: Copy, A: Copy>(dst: &mut [T], src: &[A], f: &impl Fn(T, A) -> T) {
        zip_assign_loop(dst, src, f)
    }

    /// Rows ahead whose load [`zip_assign_rows_loop`] starts early.
    const ROWS_AHEAD: usize = 4;

    /// Elements per step of [`zip_assign_rows_loop`]'s inner loop: a constant length lets LLVM
    /// unroll it into straight-line vector code with no remainder tests (32 f32 = 4 AVX2 lanes).
    const ROW_CHUNK: usize = 32;

    /// The loop of [`super::zip_assign_rows`].
    ///
    /// # Safety
    /// Every id in `rows` is in `0..dst.len() / rl` and `src` holds at least `rows.len() * rl`
    /// elements (checked by the caller). Raw row pointers then replace the three bounds and
    /// overflow checks per row and per prefetched row, and the fixed-size chunks the generic
    /// loop's remainder handling: ~45 of the ~147 instructions per 128-float row (callgrind).
    #[inline(always)]
    unsafe fn zip_assign_rows_loop<T: Copy, A: Copy>(
        dst: &mut [T],
        rl: usize,
        rows: &[i64],
        src: &[A],
        f: &impl Fn(T, A) -> T,
    ) {
        let base = dst.as_mut_ptr();
        let row_bytes = rl * std::mem::size_of::<T>();
        for (i, (&r, s)) in rows.iter().zip(src.chunks_exact(rl)).enumerate() {
            if let Some(&ahead) = rows.get(i + ROWS_AHEAD) {
                // SAFETY: `ahead` is a checked row id; the prefetch covers its row only.
                prefetch_bytes(
                    unsafe { base.add(ahead as usize * rl) } as *const u8,
                    row_bytes,
                );
            }
            // SAFETY: `r` is a checked row id, so its `rl` elements lie inside `dst`, and no
            // other reference into `dst` is live while this row is updated.
            let d = unsafe { std::slice::from_raw_parts_mut(base.add(r as usize * rl), rl) };
            let mut dc = d.chunks_exact_mut(ROW_CHUNK);
            let mut sc = s.chunks_exact(ROW_CHUNK);
            for (d, s) in (&mut dc).zip(&mut sc) {
                zip_assign_loop(d, s, f);
            }
            zip_assign_loop(dc.into_remainder(), sc.remainder(), f);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zip_assign_rows_avx2<T: Copy, A: Copy>(
        dst: &mut [T],
        rl: usize,
        rows: &[i64],
        src: &[A],
        f: &impl Fn(T, A) -> T,
    ) {
        // SAFETY: forwarded from this function's own contract (ids and length checked).
        unsafe { zip_assign_rows_loop(dst, rl, rows, src, f) }
    }

    /// See [`super::zip_assign_rows`].
    ///
    /// # Safety
    /// `rl > 0`, every id in `rows` is in `0..dst.len() / rl` and `src` holds at least
    /// `rows.len() * rl` elements: [`super::zip_assign_rows`] checks all three.
    pub(super) unsafe fn zip_assign_rows<T: Copy, A: Copy>(
        dst: &mut [T],
        rl: usize,
        rows: &[i64],
        src: &[A],
        f: &impl Fn(T, A) -> T,
    ) {
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma() {
            // SAFETY: the CPU supports the features the copy was compiled for (checked above).
            return unsafe { zip_assign_rows_avx2(dst, rl, rows, src, f) };
        }
        // SAFETY: forwarded from this function's own contract.
        unsafe { zip_assign_rows_loop(dst, rl, rows, src, f) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn map_assign_avx2<T: Copy>(dst: &mut [T], f: &impl Fn(T) -> T) {
        map_assign_loop(dst, f)
    }

    /// `dst[i] = f(dst[i], src[i])` for every `i < dst.len()` (`src` at least as long).
    pub(super) fn zip_assign<T: Copy, A: Copy>(dst: &mut [T], src: &[A], f: &impl Fn(T, A) -> T) {
        debug_assert!(src.len() >= dst.len());
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma() {
            // SAFETY: the CPU supports the features the copy was compiled for (checked above).
            return unsafe { zip_assign_avx2(dst, src, f) };
        }
        zip_assign_loop(dst, src, f)
    }

    /// `dst[i] = f(dst[i])` for every element.
    pub(super) fn map_assign<T: Copy>(dst: &mut [T], f: &impl Fn(T) -> T) {
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma() {
            // SAFETY: the CPU supports the features the copy was compiled for (checked above).
            return unsafe { map_assign_avx2(dst, f) };
        }
        map_assign_loop(dst, f)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn collect<D: Copy>(n: usize, fill: impl Fn(&mut [MaybeUninit<D>])) -> Vec<D> {
            let mut v = Vec::with_capacity(n);
            fill(&mut v.spare_capacity_mut()[..n]);
            // SAFETY: `fill` wrote all n slots.
            unsafe { v.set_len(n) };
            v
        }

        #[test]
        fn wide_and_baseline_copies_agree_bit_for_bit() {
            let sig = |x: f32| crate::ops::sigmoid(x);
            let grad = |g: f32, y: f32| g * y * (1.0 - y);
            for n in [0usize, 1, 7, 8, 9, 31, 1000, 1371] {
                let a: Vec<f32> = (0..n)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
                    .collect();
                let b: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
                let base = collect(n, |o| map_loop(&a, o, &sig));
                let base_zip = collect(n, |o| zip_loop(&a, &b, o, &grad));
                assert_eq!(collect(n, |o| map_into(&a, o, &sig)), base);
                assert_eq!(collect(n, |o| zip_into(&a, &b, o, &grad)), base_zip);
                #[cfg(target_arch = "x86_64")]
                if has_avx2_fma() {
                    // SAFETY: features checked.
                    let wide = collect(n, |o| unsafe { map_avx2(&a, o, &sig) });
                    let wide_zip = collect(n, |o| unsafe { zip_avx2(&a, &b, o, &grad) });
                    assert_eq!(wide, base, "n = {n}");
                    assert_eq!(wide_zip, base_zip, "n = {n}");
                    // In-place copies: the SGD step's shape of update.
                    let step = |w: f32, g: f32| 0.999 * w - 0.1 * g;
                    let mut plain = a.clone();
                    zip_assign_loop(&mut plain, &b, &step);
                    let mut wide_in = a.clone();
                    // SAFETY: features checked.
                    unsafe { zip_assign_avx2(&mut wide_in, &b, &step) };
                    assert_eq!(wide_in, plain, "n = {n}");
                    let mut plain_map = a.clone();
                    map_assign_loop(&mut plain_map, &|w: f32| 0.999 * w);
                    let mut wide_map = a.clone();
                    // SAFETY: features checked.
                    unsafe { map_assign_avx2(&mut wide_map, &|w: f32| 0.999 * w) };
                    assert_eq!(wide_map, plain_map, "n = {n}");
                } else {
                    eprintln!("no AVX2+FMA on this CPU: only the baseline copy was checked");
                }
            }
        }
    }
}

/// A new vector of `n` elements whose chunks are written in parallel by `fill(start, chunk)`;
/// `fill` must initialise every element of its chunk.
///
/// The buffer is uninitialised and advised for transparent huge pages before the first write
/// ([`crate::sys::uninit_vec`]): on kernels where THP is `madvise`-only (as on the project
/// machine) a fresh 64 MiB output otherwise costs 16,384 first-touch page faults, which dominated
/// elementwise ops (numpy makes the same request for large arrays).
///
/// Chunking: a few chunks per thread (for balance when a core is busy with something else), never
/// below [`MIN_CHUNK_BYTES`], and for large outputs whole huge pages starting at huge-page
/// boundaries. Each 2 MiB page then belongs to one task, so the two threads fault in (and the
/// kernel zeroes) different pages side by side instead of queueing on the same page, which is
/// what 64 KiB chunks did. Measured on a 64 MiB add: 16K-element chunks 11.6 ms, 2M-element
/// chunks 9.8 ms.
pub(crate) fn fill_parallel<D: Send>(
    n: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<D>]) + Sync + Send,
) -> Vec<D> {
    use crate::sys::HUGE_PAGE;
    use rayon::prelude::*;
    let size = std::mem::size_of::<D>().max(1);
    let mut out: Vec<D> = crate::sys::uninit_vec(n);
    let tasks = rayon::current_num_threads().max(1) * TASKS_PER_THREAD;
    let mut chunk = n.div_ceil(tasks).max(MIN_CHUNK_BYTES / size).max(1);
    // Elements before the first huge-page boundary of the output (all of them if it has none).
    let mut head = 0;
    if n * size >= 2 * HUGE_PAGE && HUGE_PAGE.is_multiple_of(size) {
        let per_page = HUGE_PAGE / size;
        chunk = chunk.div_ceil(per_page) * per_page;
        let addr = out.as_ptr() as usize;
        head = ((HUGE_PAGE - addr % HUGE_PAGE) % HUGE_PAGE / size).min(n);
    }
    let (first, rest) = out.spare_capacity_mut()[..n].split_at_mut(head);
    rayon::join(
        || {
            if !first.is_empty() {
                fill(0, first)
            }
        },
        || {
            rest.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(c, part)| fill(head + c * chunk, part))
        },
    );
    // SAFETY: `first` and the chunks of `rest` cover the first n slots, and `fill` initialised
    // every element of each (its contract); the capacity is at least n.
    unsafe { out.set_len(n) };
    out
}

/// Parallel fills aim for this many chunks per rayon thread: one per thread is fastest on an
/// idle machine, a few more keep both cores busy when one of them is shared.
const TASKS_PER_THREAD: usize = 4;

/// Smallest chunk of a parallel fill in bytes: below this the fork/join cost per task is no
/// longer small against the work.
const MIN_CHUNK_BYTES: usize = 64 << 10;

#[cfg(test)]
mod row_update_tests {
    use super::{zip_assign, zip_assign_rows};

    #[test]
    fn zip_assign_rows_matches_per_row_zip_assign_bit_for_bit() {
        let (decay, step) = (0.999_f32, 0.1_f32);
        let f = |w: f32, g: f32| decay * w - step * g;
        // Row lengths around the 8-lane vector width, sorted, unsorted and repeated ids.
        for (rl, rows) in [
            (128usize, vec![0i64, 3, 17, 18, 63]),
            (5, vec![9, 2, 40, 2]),
            (8, vec![]),
            (17, vec![63, 0]),
        ] {
            let n_rows = 64;
            let w0: Vec<f32> = (0..n_rows * rl)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
                .collect();
            let g: Vec<f32> = (0..rows.len() * rl)
                .map(|i| ((i * 11 % 29) as f32 - 14.0) * 0.07)
                .collect();
            let mut expect = w0.clone();
            for (i, &r) in rows.iter().enumerate() {
                let r = r as usize;
                zip_assign(
                    &mut expect[r * rl..(r + 1) * rl],
                    &g[i * rl..(i + 1) * rl],
                    f,
                );
            }
            let mut got = w0.clone();
            zip_assign_rows(&mut got, rl, &rows, &g, f).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&expect), "row_len {rl}, rows {rows:?}");
        }
    }

    #[test]
    fn zip_assign_rows_rejects_bad_ids_and_short_sources_before_writing() {
        let f = |w: f64, g: f64| w - g;
        let mut w = vec![1.0f64; 12]; // 4 rows of 3
        let g = vec![0.5f64; 6];
        for rows in [vec![0i64, 4], vec![-1, 0], vec![3, 7]] {
            let e = zip_assign_rows(&mut w, 3, &rows, &g, f).unwrap_err();
            assert!(e.to_string().contains("outside 0..4"), "{e}");
        }
        let e = zip_assign_rows(&mut w, 3, &[0, 1, 2], &g, f).unwrap_err();
        assert!(e.to_string().contains("need 9 source values, got 6"), "{e}");
        assert!(w.iter().all(|&x| x == 1.0), "nothing written on error");
        // Zero-length rows: nothing to do, whatever the ids.
        zip_assign_rows(&mut w, 0, &[99], &[], f).unwrap();
        zip_assign_rows(&mut w, 3, &[1, 3], &g, f).unwrap();
        assert_eq!(&w[3..6], &[0.5; 3]);
        assert_eq!(&w[9..12], &[0.5; 3]);
        assert_eq!(&w[0..3], &[1.0; 3]);
    }
}
