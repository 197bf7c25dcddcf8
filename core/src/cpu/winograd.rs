//! Winograd F(2x2, 3x3) for 2-D 3x3 convolutions with stride 1, dilation 1 and one group: the
//! forward ([`conv`]) and the data gradient ([`data_grad`], itself a 3x3 stride-1 correlation
//! of the head gradient with the flipped, transposed kernel). `cpu::conv` routes every such
//! f32 / f64 problem here ([`applies`]), and the weight gradient by F(3x3, 2x2)
//! ([`weight_grad`]), and keeps im2col + GEMM for the rest.
//!
//! Each 2x2 block of outputs (a tile) is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` for its 4x4 input patch
//! `d` and each 3x3 kernel `g`: 16 multiplies per tile and channel pair instead of 36, so the
//! products do 2.25x fewer multiply-adds than im2col's. The 16 element-wise products summed over
//! input channels are 16 GEMMs, one per position `e` of the 4x4 transform:
//! `M_e (out x tiles) = U_e (out x in) . V_e (in x tiles)`, so the GEMM crate still does the
//! heavy work; the transforms are additions only.
//!
//! Accuracy: the transforms use only 0.5 (exact) and sums of at most 4 + 3 + 4 terms, so the
//! result differs from the direct sum by a few ulps of the inputs' magnitude (the tests hold
//! f32 to 1e-5 of the largest output against the im2col path, f64 to 1e-13).
//!
//! Work split: the tile rows of the whole batch (entry, tile row) are cut into one contiguous
//! run per thread, each run processed in blocks of about [`BLOCK_TILES`] tiles (so a block's
//! transformed inputs and products stay in cache) with single-threaded GEMMs. A block
//! may span entries, which keeps the GEMMs wide for small images; a single large image still
//! uses every thread.

use rayon::prelude::*;

use super::cast::SendPtr;
use super::conv::with_scratch;
use super::gemm::{gemm_serial, GemmScalar};
use crate::storage::ConvGeom;

/// Tiles per block: 16 x 64 channels x 256 tiles x 4 bytes = 1 MiB of transformed inputs (and
/// as much of products) at the ResNet layer's 64 channels.
const BLOCK_TILES: usize = 256;

/// Whether the Winograd kernels compute `g`: a 2-D (lifted) 3x3 kernel, stride 1, dilation 1,
/// one group. Any padding works (tiles read zeros outside the input).
pub(super) fn applies(g: &ConvGeom) -> bool {
    g.kernel == [1, 3, 3]
        && g.stride == [1; 3]
        && g.dilation == [1; 3]
        && g.groups == 1
        && g.input[0] == 1
        && g.output[0] == 1
        && g.pad[0] == 0
}

/// One stride-1 3x3 correlation on the tiles: `y[n][o][i][j] = sum over c, a, b of
/// x[n][c][i + off0 + a][j + off1 + b] * kernel(o, c, a, b)` (zero outside `x`), the kernel
/// given transformed as `u`.
struct Plan {
    batch: usize,
    cin: usize,
    cout: usize,
    in_hw: [usize; 2],
    out_hw: [usize; 2],
    /// Where tap (0, 0) of output (0, 0) reads, in input coordinates (negative in the padding).
    off: [isize; 2],
}

impl Plan {
    /// Tile rows and tile columns of one output plane.
    fn tiles(&self) -> [usize; 2] {
        [self.out_hw[0].div_ceil(2), self.out_hw[1].div_ceil(2)]
    }
}

/// `U_e = (G g Gᵀ)_e` for every (out, in) pair, laid out `[16][cout][cin]` (one GEMM operand per
/// transform position), `tap(o, i, a, b)` giving the 3x3 kernel of the pair.
fn transform_kernel<T: GemmScalar>(
    cout: usize,
    cin: usize,
    tap: impl Fn(usize, usize, usize, usize) -> T,
) -> Vec<T> {
    let zero = <T as num_traits::Zero>::zero();
    let one = <T as num_traits::One>::one();
    let half = one / (one + one);
    let plane = cout * cin;
    let mut u = vec![zero; 16 * plane];
    for o in 0..cout {
        for i in 0..cin {
            // G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2 (per column).
            let g: [[T; 3]; 3] = std::array::from_fn(|a| std::array::from_fn(|b| tap(o, i, a, b)));
            let gg = [
                g[0],
                std::array::from_fn(|b| (g[0][b] + g[1][b] + g[2][b]) * half),
                std::array::from_fn(|b| (g[0][b] - g[1][b] + g[2][b]) * half),
                g[2],
            ];
            for (r, row) in gg.iter().enumerate() {
                let [a, b, c] = *row;
                let t = [a, (a + b + c) * half, (a - b + c) * half, c];
                for (col, &v) in t.iter().enumerate() {
                    u[(r * 4 + col) * plane + o * cin + i] = v;
                }
            }
        }
    }
    u
}

/// The forward `y = conv(x, w) (+ bias)` of a geometry [`applies`] accepts.
pub(super) fn conv<T: GemmScalar>(g: &ConvGeom, x: &[T], w: &[T], bias: Option<&[T]>) -> Vec<T> {
    let (cin, cout) = (g.in_channels, g.out_channels);
    let u = transform_kernel(cout, cin, |o, i, a, b| w[((o * cin + i) * 3 + a) * 3 + b]);
    let plan = Plan {
        batch: g.batch,
        cin,
        cout,
        in_hw: [g.input[1], g.input[2]],
        out_hw: [g.output[1], g.output[2]],
        off: [-(g.pad[1] as isize), -(g.pad[2] as isize)],
    };
    run(&plan, x, &u, bias)
}

/// The data gradient `dx` of a geometry [`applies`] accepts: `dx[c][s][t] = sum over k, a, b
/// of dy[k][s + p - a][t + p - b] * w[k][c][a][b]`, which with `a' = 2 - a` is a correlation of
/// `dy` with the kernel `w'[c][k][a'][b'] = w[k][c][2 - a'][2 - b']` reading from offset `p - 2`.
pub(super) fn data_grad<T: GemmScalar>(g: &ConvGeom, dy: &[T], w: &[T]) -> Vec<T> {
    let (cin, cout) = (g.in_channels, g.out_channels);
    let u = transform_kernel(cin, cout, |c, k, a, b| {
        w[((k * cin + c) * 3 + (2 - a)) * 3 + (2 - b)]
    });
    let plan = Plan {
        batch: g.batch,
        cin: cout,
        cout: cin,
        in_hw: [g.output[1], g.output[2]],
        out_hw: [g.input[1], g.input[2]],
        off: [g.pad[1] as isize - 2, g.pad[2] as isize - 2],
    };
    run(&plan, dy, &u, None)
}

/// Run `p` over the batch: `x` is `(batch, cin, in_hw)`, the result `(batch, cout, out_hw)`.
fn run<T: GemmScalar>(p: &Plan, x: &[T], u: &[T], bias: Option<&[T]>) -> Vec<T> {
    let [ho, wo] = p.out_hw;
    let mut y = crate::recycle::overwritable_vec::<T>(p.batch * p.cout * ho * wo);
    if y.is_empty() {
        return y;
    }
    let [th, tw] = p.tiles();
    let rows = p.batch * th;
    let rows_per_block = (BLOCK_TILES / tw).max(1);
    let runs = rayon::current_num_threads()
        .min(rows.div_ceil(rows_per_block))
        .max(1);
    let out = SendPtr(y.as_mut_ptr());
    let job = |r: usize| {
        let (start, end) = (r * rows / runs, (r + 1) * rows / runs);
        with_scratch(|buf: &mut Vec<T>| {
            let tiles = rows_per_block.min(end - start) * tw;
            let (v_len, m_len) = (16 * p.cin * tiles, 16 * p.cout * tiles);
            buf.resize(
                v_len + m_len + 16 * (tw + 1),
                <T as num_traits::Zero>::zero(),
            );
            let (v, rest) = buf.split_at_mut(v_len);
            let (m, lines) = rest.split_at_mut(m_len);
            let mut r0 = start;
            while r0 < end {
                let r1 = (r0 + rows_per_block).min(end);
                let nt = (r1 - r0) * tw;
                let (v, m) = (&mut v[..16 * p.cin * nt], &mut m[..16 * p.cout * nt]);
                transform_input(p, x, r0..r1, v, lines);
                for e in 0..16 {
                    gemm_serial(
                        p.cout,
                        nt,
                        p.cin,
                        &u[e * p.cout * p.cin..(e + 1) * p.cout * p.cin],
                        p.cin as isize,
                        1,
                        &v[e * p.cin * nt..(e + 1) * p.cin * nt],
                        nt as isize,
                        1,
                        &mut m[e * p.cout * nt..(e + 1) * p.cout * nt],
                        false,
                    );
                }
                // SAFETY: the tile rows r0..r1 own the output rows they write (each output row
                // of each entry and channel belongs to exactly one tile row, and the runs cut
                // the tile rows into disjoint ranges); `y` outlives the parallel loop.
                unsafe { transform_output(p, m, r0..r1, bias, out) };
                r0 = r1;
            }
        })
    };
    if runs == 1 {
        job(0);
    } else {
        (0..runs).into_par_iter().for_each(job);
    }
    y
}

/// Fill `even` and `odd` (equal lengths) with input row `row` of `plane` (width `w`), even and
/// odd tile columns apart: `even[q]` is column `2q + off`, `odd[q]` column `2q + 1 + off`, zero
/// outside the plane (also for a row outside it, `row == None`).
fn load_row<T: GemmScalar>(
    plane: &[T],
    row: Option<usize>,
    w: usize,
    off: isize,
    even: &mut [T],
    odd: &mut [T],
) {
    let zero = <T as num_traits::Zero>::zero();
    let Some(row) = row else {
        even.fill(zero);
        odd.fill(zero);
        return;
    };
    let src = &plane[row * w..(row + 1) * w];
    let at = |col: isize| {
        if col >= 0 && (col as usize) < w {
            src[col as usize]
        } else {
            zero
        }
    };
    let n = even.len();
    // The pairs q with both columns inside the row: 2q + off >= 0 and 2q + 1 + off <= w - 1;
    // they are copied without checks, the few at the edges (padding) through `at`.
    let lo = ((-off).max(0) as usize).div_ceil(2).min(n);
    let last = w as isize - 2 - off;
    let hi = if last < 0 {
        lo
    } else {
        (last as usize / 2 + 1).clamp(lo, n)
    };
    for q in (0..lo).chain(hi..n) {
        let col = 2 * q as isize + off;
        even[q] = at(col);
        odd[q] = at(col + 1);
    }
    if lo < hi {
        let start = (2 * lo as isize + off) as usize;
        let pairs = src[start..start + 2 * (hi - lo)].chunks_exact(2);
        for ((e, o), pr) in even[lo..hi].iter_mut().zip(&mut odd[lo..hi]).zip(pairs) {
            *e = pr[0];
            *o = pr[1];
        }
    }
}

/// `V_e = (Bᵀ d B)_e` for every tile of the tile rows `rows` (global: entry * tile rows + tile
/// row) and input channel, into `v` laid out `[16][cin][tiles]`; `lines` is scratch of `16 *
/// (tw + 1)`.
fn transform_input<T: GemmScalar>(
    p: &Plan,
    x: &[T],
    rows: std::ops::Range<usize>,
    v: &mut [T],
    lines: &mut [T],
) {
    let [h, w] = p.in_hw;
    let [th, tw] = p.tiles();
    let nt = rows.len() * tw;
    let len = tw + 1;
    // Raw input rows (4 even halves, 4 odd halves), then their column transforms.
    let (raw, cols) = lines.split_at_mut(8 * len);
    for c in 0..p.cin {
        let mut loaded: Option<usize> = None;
        for (lr, gr) in rows.clone().enumerate() {
            let (n, ty) = (gr / th, gr % th);
            let plane = &x[(n * p.cin + c) * h * w..(n * p.cin + c + 1) * h * w];
            // The next tile row of the same entry starts two input rows lower: its first two
            // rows are the last two already loaded.
            let first = if ty > 0 && loaded == Some(gr - 1) {
                raw.copy_within(2 * len..4 * len, 0);
                raw.copy_within(6 * len..8 * len, 4 * len);
                2
            } else {
                0
            };
            loaded = Some(gr);
            let (evens, odds) = raw.split_at_mut(4 * len);
            for a in first..4 {
                let r = (2 * ty + a) as isize + p.off[0];
                let row = (r >= 0 && (r as usize) < h).then_some(r as usize);
                let e = &mut evens[a * len..(a + 1) * len];
                let o = &mut odds[a * len..(a + 1) * len];
                load_row(plane, row, w, p.off[1], e, o);
            }
            // Bᵀ d down the columns: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3).
            let (cols_e, cols_o) = cols.split_at_mut(4 * len);
            for (src, dst) in [(&*evens, cols_e), (&*odds, cols_o)] {
                let (d01, d23) = src.split_at(2 * len);
                let (d0, d1) = d01.split_at(len);
                let (d2, d3) = d23.split_at(len);
                let (t01, t23) = dst.split_at_mut(2 * len);
                let (t0, t1) = t01.split_at_mut(len);
                let (t2, t3) = t23.split_at_mut(len);
                for q in 0..len {
                    let (a, b, c, d) = (d0[q], d1[q], d2[q], d3[q]);
                    t0[q] = a - c;
                    t1[q] = b + c;
                    t2[q] = c - b;
                    t3[q] = b - d;
                }
            }
            // (Bᵀ d) B along each row: tile tx covers columns even[tx], odd[tx], even[tx + 1],
            // odd[tx + 1], giving (a - c, b + c, c - b, b - d).
            let at = c * nt + lr * tw;
            for i in 0..4 {
                let ev = &cols[i * len..(i + 1) * len];
                let od = &cols[(4 + i) * len..(5 + i) * len];
                let (v0, rest) = v[(4 * i) * p.cin * nt..].split_at_mut(p.cin * nt);
                let (v1, rest) = rest.split_at_mut(p.cin * nt);
                let (v2, v3) = rest.split_at_mut(p.cin * nt);
                let (v0, v1) = (&mut v0[at..at + tw], &mut v1[at..at + tw]);
                let (v2, v3) = (&mut v2[at..at + tw], &mut v3[at..at + tw]);
                for tx in 0..tw {
                    let (a, b, c, d) = (ev[tx], od[tx], ev[tx + 1], od[tx + 1]);
                    v0[tx] = a - c;
                    v1[tx] = b + c;
                    v2[tx] = c - b;
                    v3[tx] = b - d;
                }
            }
        }
    }
}

/// `Y = Aᵀ M A` (+ bias) for every tile of the tile rows `rows` and output channel, from `m`
/// laid out `[16][cout][tiles]`, written into the output at `out` (the part of each 2x2 tile
/// that lies inside the output plane).
///
/// # Safety
/// `out` must be valid for writes of `batch * cout * out_hw` elements, and no other thread may
/// write the output rows of the tile rows `rows` while this runs.
unsafe fn transform_output<T: GemmScalar>(
    p: &Plan,
    m: &[T],
    rows: std::ops::Range<usize>,
    bias: Option<&[T]>,
    out: SendPtr<T>,
) {
    let [ho, wo] = p.out_hw;
    let [th, tw] = p.tiles();
    let nt = rows.len() * tw;
    let zero = <T as num_traits::Zero>::zero();
    let full = wo / 2;
    for (lr, gr) in rows.enumerate() {
        let (n, ty) = (gr / th, gr % th);
        let two_rows = 2 * ty + 1 < ho;
        for o in 0..p.cout {
            let bv = bias.map_or(zero, |b| b[o]);
            let me = |e: usize| &m[(e * p.cout + o) * nt + lr * tw..][..tw];
            let mm: [&[T]; 16] = std::array::from_fn(me);
            let base = ((n * p.cout + o) * ho + 2 * ty) * wo;
            // SAFETY: rows 2ty and (when inside the plane) 2ty + 1 of channel o of entry n lie
            // inside the output and belong to this tile row only (the caller's contract).
            let y0 = unsafe { std::slice::from_raw_parts_mut(out.get().add(base), wo) };
            let y1 = two_rows
                .then(|| unsafe { std::slice::from_raw_parts_mut(out.get().add(base + wo), wo) });
            let tile = |tx: usize| {
                let v = |i: usize, j: usize| mm[i * 4 + j][tx];
                // Z = Aᵀ M (2 x 4), then Y = Z A (2 x 2).
                let z0: [T; 4] = std::array::from_fn(|j| v(0, j) + v(1, j) + v(2, j));
                let z1: [T; 4] = std::array::from_fn(|j| v(1, j) - v(2, j) - v(3, j));
                [
                    [z0[0] + z0[1] + z0[2] + bv, z0[1] - z0[2] - z0[3] + bv],
                    [z1[0] + z1[1] + z1[2] + bv, z1[1] - z1[2] - z1[3] + bv],
                ]
            };
            // Whole tiles by output pairs (exact chunks, so the loop carries no bounds checks),
            // then an odd width's last tile, its left column only.
            let (y0f, y0_last) = y0.split_at_mut(2 * full);
            match y1 {
                Some(y1) => {
                    let (y1f, y1_last) = y1.split_at_mut(2 * full);
                    let pairs = y0f.chunks_exact_mut(2).zip(y1f.chunks_exact_mut(2));
                    for (tx, (a, b)) in pairs.enumerate() {
                        let t = tile(tx);
                        a.copy_from_slice(&t[0]);
                        b.copy_from_slice(&t[1]);
                    }
                    if full < tw {
                        let t = tile(full);
                        y0_last[0] = t[0][0];
                        y1_last[0] = t[1][0];
                    }
                }
                None => {
                    for (tx, a) in y0f.chunks_exact_mut(2).enumerate() {
                        a.copy_from_slice(&tile(tx)[0]);
                    }
                    if full < tw {
                        y0_last[0] = tile(full)[0][0];
                    }
                }
            }
        }
    }
}

/// The weight gradient `dw` of a geometry [`applies`] accepts, by Winograd F(3x3, 2x2): each
/// 2x2 tile of `dy` (the "kernel") against the 4x4 input patch the forward's tile read gives
/// that tile's contribution to the 3x3 `dw` as `A'ᵀ [(G' dy_t G'ᵀ) ⊙ (B'ᵀ d B')] A'`. The sum
/// over tiles and entries is linear, so it happens inside 16 GEMMs
/// `M_e (out x in) += U_e (out x tiles) . V_eᵀ (tiles x in)` and `A'ᵀ M A'` runs once per
/// channel pair at the end: 16 multiplies per tile and pair instead of 36.
///
/// `B'ᵀ` differs from the forward's `Bᵀ` only in the sign of its last row, so the forward's
/// input transform is reused and the sign `s_e` (-1 where exactly one of row, column is 3)
/// goes into `U_e` instead. Each thread sums its run of tile rows into its own `M`; the runs'
/// partials are added in run order, so the result does not depend on scheduling.
pub(super) fn weight_grad<T: GemmScalar>(g: &ConvGeom, x: &[T], dy: &[T]) -> Vec<T> {
    let (cin, cout) = (g.in_channels, g.out_channels);
    let zero = <T as num_traits::Zero>::zero();
    let mut dw = vec![zero; g.w_len()];
    if dw.is_empty() || g.batch == 0 || g.out_plane() == 0 {
        return dw;
    }
    let p = Plan {
        batch: g.batch,
        cin,
        cout,
        in_hw: [g.input[1], g.input[2]],
        out_hw: [g.output[1], g.output[2]],
        off: [-(g.pad[1] as isize), -(g.pad[2] as isize)],
    };
    let [th, tw] = p.tiles();
    let rows = p.batch * th;
    let rows_per_block = (BLOCK_TILES / tw).max(1);
    let runs = rayon::current_num_threads()
        .min(rows.div_ceil(rows_per_block))
        .max(1);
    let plane = cout * cin;
    let job = |r: usize| -> Vec<T> {
        let (start, end) = (r * rows / runs, (r + 1) * rows / runs);
        let mut m = vec![zero; 16 * plane];
        with_scratch(|buf: &mut Vec<T>| {
            let tiles = rows_per_block.min(end - start) * tw;
            let (v_len, u_len) = (16 * cin * tiles, 16 * cout * tiles);
            buf.resize(v_len + u_len + 16 * (tw + 1), zero);
            let (v, rest) = buf.split_at_mut(v_len);
            let (u, lines) = rest.split_at_mut(u_len);
            let mut r0 = start;
            while r0 < end {
                let r1 = (r0 + rows_per_block).min(end);
                let nt = (r1 - r0) * tw;
                let (v, u) = (&mut v[..16 * cin * nt], &mut u[..16 * cout * nt]);
                transform_input(&p, x, r0..r1, v, lines);
                transform_head(&p, dy, r0..r1, u, lines);
                for e in 0..16 {
                    gemm_serial(
                        cout,
                        cin,
                        nt,
                        &u[e * cout * nt..(e + 1) * cout * nt],
                        nt as isize,
                        1,
                        &v[e * cin * nt..(e + 1) * cin * nt],
                        1,
                        nt as isize,
                        &mut m[e * plane..(e + 1) * plane],
                        true,
                    );
                }
                r0 = r1;
            }
        });
        m
    };
    let partials: Vec<Vec<T>> = if runs == 1 {
        vec![job(0)]
    } else {
        (0..runs).into_par_iter().map(job).collect()
    };
    let mut m = partials[0].clone();
    for part in &partials[1..] {
        m.iter_mut().zip(part).for_each(|(a, &b)| *a = *a + b);
    }
    // dw = A'ᵀ M A' per pair, A'ᵀ = [[1, 1, 1, 0], [0, 1, -1, 0], [0, 1, 1, 1]].
    for pair in 0..plane {
        let v = |i: usize, j: usize| m[(i * 4 + j) * plane + pair];
        let z: [[T; 4]; 3] = [
            std::array::from_fn(|j| v(0, j) + v(1, j) + v(2, j)),
            std::array::from_fn(|j| v(1, j) - v(2, j)),
            std::array::from_fn(|j| v(1, j) + v(2, j) + v(3, j)),
        ];
        let out = &mut dw[pair * 9..(pair + 1) * 9];
        for (a, zr) in z.iter().enumerate() {
            out[a * 3] = zr[0] + zr[1] + zr[2];
            out[a * 3 + 1] = zr[1] - zr[2];
            out[a * 3 + 2] = zr[1] + zr[2] + zr[3];
        }
    }
    dw
}

/// `s_e (G' g G'ᵀ)_e` for the 2x2 tile `g` of the head gradient `dy` (`(batch, cout,
/// out_hw)`, zero past its edge) of every tile of the tile rows `rows` and output channel, into
/// `u` laid out `[16][cout][tiles]`; `G' = [[1, 0], [1/2, 1/2], [1/2, -1/2], [0, 1]]` and `s_e`
/// the sign of [`weight_grad`]. `lines` is scratch of at least `4 * (tw + 1)`.
fn transform_head<T: GemmScalar>(
    p: &Plan,
    dy: &[T],
    rows: std::ops::Range<usize>,
    u: &mut [T],
    lines: &mut [T],
) {
    let [ho, wo] = p.out_hw;
    let [th, tw] = p.tiles();
    let nt = rows.len() * tw;
    let one = <T as num_traits::One>::one();
    let half = one / (one + one);
    let (evens, odds) = lines.split_at_mut(2 * (tw + 1));
    for (lr, gr) in rows.enumerate() {
        let (n, ty) = (gr / th, gr % th);
        for k in 0..p.cout {
            let plane = &dy[(n * p.cout + k) * ho * wo..(n * p.cout + k + 1) * ho * wo];
            for a in 0..2 {
                let r = 2 * ty + a;
                let (e, o) = (
                    &mut evens[a * (tw + 1)..(a + 1) * (tw + 1)],
                    &mut odds[a * (tw + 1)..(a + 1) * (tw + 1)],
                );
                load_row(plane, (r < ho).then_some(r), wo, 0, e, o);
            }
            let at = k * nt + lr * tw;
            // G' g down the columns: rows g0, (g0 + g1) / 2, (g0 - g1) / 2, g1; then along the
            // row the same for (even, odd), with the sign s_e = -1 where exactly one of the
            // transform row i and column j is 3.
            for i in 0..4 {
                let col = |h: &[T], q: usize| {
                    let (g0, g1) = (h[q], h[tw + 1 + q]);
                    match i {
                        0 => g0,
                        1 => (g0 + g1) * half,
                        2 => (g0 - g1) * half,
                        _ => -g1,
                    }
                };
                let (u0, rest) = u[(4 * i) * p.cout * nt..].split_at_mut(p.cout * nt);
                let (u1, rest) = rest.split_at_mut(p.cout * nt);
                let (u2, u3) = rest.split_at_mut(p.cout * nt);
                let (u0, u1) = (&mut u0[at..at + tw], &mut u1[at..at + tw]);
                let (u2, u3) = (&mut u2[at..at + tw], &mut u3[at..at + tw]);
                for tx in 0..tw {
                    let (a, b) = (col(evens, tx), col(odds, tx));
                    u0[tx] = a;
                    u1[tx] = (a + b) * half;
                    u2[tx] = (a - b) * half;
                    u3[tx] = -b;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::Rng;

    /// A 2-D geometry with a 3x3 kernel, stride 1.
    fn geom(batch: usize, cin: usize, cout: usize, hw: [usize; 2], pad: [usize; 2]) -> ConvGeom {
        let out = |i: usize| hw[i] + 2 * pad[i] - 2;
        ConvGeom {
            batch,
            in_channels: cin,
            out_channels: cout,
            groups: 1,
            input: [1, hw[0], hw[1]],
            kernel: [1, 3, 3],
            output: [1, out(0), out(1)],
            stride: [1; 3],
            pad: [0, pad[0], pad[1]],
            dilation: [1; 3],
        }
    }

    fn uniform(seed: u64, n: usize) -> Vec<f32> {
        Rng::new(seed)
            .uniform(-1.0, 1.0, &[n], crate::DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    }

    /// Largest |a - b| over the largest |b| (the error relative to the output's scale).
    fn rel_err(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        let scale = b.iter().fold(0f32, |s, v| s.max(v.abs())).max(1e-30);
        a.iter().zip(b).fold(0f32, |s, (x, y)| s.max((x - y).abs())) / scale
    }

    /// (batch, in channels, out channels, input size, padding).
    type Case = (usize, usize, usize, [usize; 2], [usize; 2]);

    /// Shapes that reach every edge case: odd and even sizes, padding 0, 1 and 2, batch 1,
    /// channel counts that are no multiple of the GEMM's register tiles, planes smaller than a
    /// tile and blocks that span entries.
    const CASES: [Case; 9] = [
        (2, 3, 5, [7, 9], [1, 1]),
        (1, 4, 3, [6, 6], [0, 0]),
        (3, 5, 7, [5, 8], [1, 0]),
        (1, 1, 1, [3, 3], [0, 0]),
        (2, 2, 3, [1, 2], [1, 1]),
        (4, 6, 2, [11, 4], [2, 1]),
        (1, 17, 9, [13, 30], [1, 1]),
        (3, 8, 8, [40, 3], [1, 2]),
        (1, 3, 2, [4, 3], [0, 1]),
    ];

    #[test]
    fn forward_matches_im2col() {
        for (batch, cin, cout, hw, pad) in CASES {
            let g = geom(batch, cin, cout, hw, pad);
            assert!(applies(&g));
            let x = uniform(1, g.x_len());
            let w = uniform(2, g.w_len());
            let b = uniform(3, cout);
            let want = super::super::conv::conv_im2col(&g, &x, &w, Some(&b));
            let got = conv(&g, &x, &w, Some(&b));
            let err = rel_err(&got, &want);
            assert!(
                err <= 1e-5,
                "{:?}: relative error {err}",
                (batch, cin, cout, hw, pad)
            );
        }
    }

    #[test]
    fn data_grad_matches_im2col() {
        for (batch, cin, cout, hw, pad) in CASES {
            let g = geom(batch, cin, cout, hw, pad);
            let dy = uniform(4, g.y_len());
            let w = uniform(5, g.w_len());
            let want = super::super::conv::data_grad_im2col(&g, &dy, &w);
            let got = data_grad(&g, &dy, &w);
            let err = rel_err(&got, &want);
            assert!(
                err <= 1e-5,
                "{:?}: relative error {err}",
                (batch, cin, cout, hw, pad)
            );
        }
    }

    #[test]
    fn weight_grad_matches_im2col() {
        for (batch, cin, cout, hw, pad) in CASES {
            let g = geom(batch, cin, cout, hw, pad);
            let x = uniform(8, g.x_len());
            let dy = uniform(9, g.y_len());
            let want = super::super::conv::weight_grad_im2col(&g, &x, &dy);
            let got = weight_grad(&g, &x, &dy);
            let err = rel_err(&got, &want);
            assert!(
                err <= 1e-5,
                "{:?}: relative error {err}",
                (batch, cin, cout, hw, pad)
            );
        }
    }

    #[test]
    fn f64_is_exact_to_rounding() {
        let g = geom(2, 5, 4, [9, 7], [1, 1]);
        let x: Vec<f64> = uniform(6, g.x_len()).into_iter().map(f64::from).collect();
        let w: Vec<f64> = uniform(7, g.w_len()).into_iter().map(f64::from).collect();
        let want = super::super::conv::conv_im2col(&g, &x, &w, None);
        let got = conv(&g, &x, &w, None);
        let scale = want.iter().fold(0f64, |s, v| s.max(v.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0f64, |s, (a, b)| s.max((a - b).abs()));
        assert!(err <= 1e-13 * scale, "f64 error {err}");
    }

    #[test]
    fn other_geometries_are_not_taken() {
        let base = geom(1, 2, 2, [5, 5], [1, 1]);
        let mut s = base;
        s.stride = [1, 2, 2];
        let mut d = base;
        d.dilation = [1, 2, 1];
        let mut k = base;
        k.kernel = [1, 5, 5];
        let mut gr = base;
        gr.groups = 2;
        let mut z = base;
        z.input = [3, 5, 5];
        z.output = [3, 5, 5];
        for g in [s, d, k, gr, z] {
            assert!(!applies(&g), "{g:?}");
        }
    }
}
