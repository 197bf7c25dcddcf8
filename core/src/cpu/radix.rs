//! Stable LSD radix sort of `(key << 32) | position` words by their key half: the grouping step
//! of the row_sparse products (csr^T x dense, embedding backward), where ~30k column ids below
//! 2^20 are sorted per call. Two 11-bit passes beat a comparison sort of the same words ~4x, and
//! stability keeps the positions of equal keys ascending, so the order is deterministic and
//! equal to sorting the whole words.

/// Bits per pass: a 2048-bucket histogram (8 KB) stays in L1.
const DIGIT: u32 = 11;

/// Sort `words` by `word >> 32`, stably. `key_bits` bounds the keys (`key < 2^key_bits`,
/// at most 32); only that many bits are sorted on.
pub(crate) fn sort_by_high_half(words: &mut Vec<u64>, key_bits: u32) {
    let key_bits = key_bits.min(32);
    let passes = key_bits.div_ceil(DIGIT);
    if passes == 0 || words.len() < 2 {
        return;
    }
    let mut tmp = vec![0u64; words.len()];
    // Every pass's digit counts in one read of the words (they do not depend on the order).
    let mut counts = vec![[0usize; 1 << DIGIT]; passes as usize];
    for &w in words.iter() {
        for (pass, c) in counts.iter_mut().enumerate() {
            c[((w >> (32 + pass as u32 * DIGIT)) & ((1 << DIGIT) - 1)) as usize] += 1;
        }
    }
    for (pass, mut start) in (0..passes).zip(counts) {
        let shift = 32 + pass * DIGIT;
        let digit = |w: u64| ((w >> shift) & ((1 << DIGIT) - 1)) as usize;
        let mut sum = 0;
        for s in start.iter_mut() {
            let c = *s;
            *s = sum;
            sum += c;
        }
        for &w in words.iter() {
            let d = digit(w);
            tmp[start[d]] = w;
            start[d] += 1;
        }
        std::mem::swap(words, &mut tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_full_sort() {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for &(n, bits) in &[
            (0usize, 20u32),
            (1, 20),
            (7, 3),
            (5000, 20),
            (5000, 32),
            (300, 0),
        ] {
            let mut words: Vec<u64> = (0..n as u64)
                .map(|e| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    let key = if bits == 0 { 0 } else { s >> (64 - bits) };
                    (key << 32) | e
                })
                .collect();
            let mut want = words.clone();
            want.sort_unstable();
            sort_by_high_half(&mut words, bits);
            assert_eq!(words, want, "n {n} bits {bits}");
        }
    }
}
