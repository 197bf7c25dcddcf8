//! The strided broadcasting kernel of NumPy-style binary operators.

/// Row-major strides of `shape` aligned to an output of rank `n`, with 0 for broadcast dims.
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let n = out.len();
    let mut strides = vec![0; n];
    let mut s = 1;
    for i in (0..shape.len()).rev() {
        let oi = i + n - shape.len();
        strides[oi] = if shape[i] == 1 && out[oi] != 1 { 0 } else { s };
        s *= shape[i];
    }
    strides
}

/// Apply `f` elementwise with broadcasting. Fast paths for equal shapes and scalar operands.
pub(crate) fn broadcast_apply<A, B, D>(
    a: &[A],
    ash: &[usize],
    b: &[B],
    bsh: &[usize],
    out_shape: &[usize],
    f: impl Fn(A, B) -> D + Sync + Send,
) -> Vec<D>
where
    A: Copy + Send + Sync,
    B: Copy + Send + Sync,
    D: Send + Copy,
{
    let n: usize = out_shape.iter().product();
    if ash == bsh && a.len() == n {
        return super::elementwise::zip_slices(a, b, f);
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return super::elementwise::map_slice(a, |x| f(x, y));
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return super::elementwise::map_slice(b, |y| f(x, y));
    }
    if n == 0 {
        return Vec::new();
    }
    if n >= super::elementwise::PAR_THRESHOLD {
        return crate::cpu::elementwise::fill_parallel(n, |start, dst| {
            fill_broadcast(a, ash, b, bsh, out_shape, start, dst, &f)
        });
    }
    let mut out = Vec::with_capacity(n);
    fill_broadcast(
        a,
        ash,
        b,
        bsh,
        out_shape,
        0,
        &mut out.spare_capacity_mut()[..n],
        &f,
    );
    // SAFETY: `fill_broadcast` wrote all n slots; capacity is n.
    unsafe { out.set_len(n) };
    out
}

/// [`broadcast_apply`] written into `dst` (the output's length): the same values, no new
/// buffer (the strides live on the stack up to 8 dimensions).
pub(crate) fn broadcast_apply_to<A, B, D>(
    a: &[A],
    ash: &[usize],
    b: &[B],
    bsh: &[usize],
    out_shape: &[usize],
    dst: &mut [D],
    f: impl Fn(A, B) -> D + Sync + Send,
) where
    A: Copy + Send + Sync,
    B: Copy + Send + Sync,
    D: Send + Copy,
{
    use super::elementwise::{fill_to, simd};
    let n = dst.len();
    if ash == bsh && a.len() == n {
        return super::elementwise::zip_slices_to(a, b, dst, f);
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return fill_to(dst, |s, o| {
            simd::map_into(&a[s..s + o.len()], o, &|x| f(x, y))
        });
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return fill_to(dst, |s, o| {
            simd::map_into(&b[s..s + o.len()], o, &|y| f(x, y))
        });
    }
    if n == 0 {
        return;
    }
    fill_to(dst, |start, o| {
        fill_broadcast(a, ash, b, bsh, out_shape, start, o, &f)
    })
}

/// Output elements `[start, start + dst.len())` of the broadcast `f(a, b)`, row piece by row
/// piece; the offsets of a row start in `a` and `b` come from its outer multi-index, computed
/// once per row piece.
#[allow(clippy::too_many_arguments)]
fn fill_broadcast<A: Copy, B: Copy, D>(
    a: &[A],
    ash: &[usize],
    b: &[B],
    bsh: &[usize],
    out_shape: &[usize],
    start: usize,
    dst: &mut [std::mem::MaybeUninit<D>],
    f: &impl Fn(A, B) -> D,
) {
    let sa = strides_on_stack(ash, out_shape);
    let sb = strides_on_stack(bsh, out_shape);
    let nd = out_shape.len();
    let inner = out_shape[nd - 1];
    let (ia, ib) = (sa[nd - 1], sb[nd - 1]);
    let mut pos = start;
    let mut k = 0;
    while k < dst.len() {
        let (row, j0) = (pos / inner, pos % inner);
        let (mut oa, mut ob, mut rem) = (0, 0, row);
        for d in (0..nd - 1).rev() {
            let idx = rem % out_shape[d];
            rem /= out_shape[d];
            oa += idx * sa[d];
            ob += idx * sb[d];
        }
        let len = (inner - j0).min(dst.len() - k);
        for (j, o) in (j0..j0 + len).zip(&mut dst[k..k + len]) {
            o.write(f(a[oa + j * ia], b[ob + j * ib]));
        }
        k += len;
        pos += len;
    }
}

/// [`broadcast_strides`] in a stack vector (no allocation up to 8 dimensions).
fn strides_on_stack(shape: &[usize], out: &[usize]) -> smallvec::SmallVec<[usize; 8]> {
    let n = out.len();
    let mut strides = smallvec::SmallVec::from_elem(0, n);
    let mut s = 1;
    for i in (0..shape.len()).rev() {
        let oi = i + n - shape.len();
        strides[oi] = if shape[i] == 1 && out[oi] != 1 { 0 } else { s };
        s *= shape[i];
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::broadcast_apply;

    /// Naive reference: the output element at every multi-index, read through broadcast indices.
    fn reference(a: &[f64], ash: &[usize], b: &[f64], bsh: &[usize], out: &[usize]) -> Vec<f64> {
        let n: usize = out.iter().product();
        let at = |v: &[f64], sh: &[usize], mut flat: usize| {
            let (mut off, mut stride) = (0, 1);
            for d in (0..out.len()).rev() {
                let idx = flat % out[d];
                flat /= out[d];
                if let Some(k) = (d + sh.len()).checked_sub(out.len()) {
                    if sh[k] != 1 {
                        off += idx * stride;
                    }
                    stride *= sh[k];
                }
            }
            v[off]
        };
        (0..n)
            .map(|i| at(a, ash, i) * 10.0 + at(b, bsh, i))
            .collect()
    }

    fn check(ash: &[usize], bsh: &[usize]) {
        let out = crate::ops::broadcast_shapes("test", ash, bsh).unwrap();
        let a: Vec<f64> = (0..ash.iter().product::<usize>())
            .map(|i| i as f64)
            .collect();
        let b: Vec<f64> = (0..bsh.iter().product::<usize>())
            .map(|i| -(i as f64))
            .collect();
        let got = broadcast_apply(&a, ash, &b, bsh, &out, |x, y| x * 10.0 + y);
        assert_eq!(got, reference(&a, ash, &b, bsh, &out), "{ash:?} {bsh:?}");
    }

    #[test]
    fn general_path_matches_reference_small_and_parallel() {
        // Small (sequential), and above PAR_THRESHOLD with rows that straddle the parallel
        // chunks (inner 7 divides no chunk length), plus a > 2 MiB output that takes the
        // huge-page-aligned chunking with a head piece.
        check(&[3, 1, 4], &[1, 5, 4]);
        check(&[300, 1, 7], &[1, 50, 7]);
        check(&[1, 7], &[40_000, 1]);
        check(&[3000, 1], &[1, 333]);
    }

    #[test]
    fn contiguous_and_scalar_paths_match_reference() {
        // 3M f64 = 24 MiB: several huge-page chunks and an unaligned head.
        check(&[3 << 20], &[3 << 20]);
        check(&[3 << 20], &[1]);
        check(&[1], &[100_003]);
        check(&[0, 4], &[1, 4]);
    }
}
