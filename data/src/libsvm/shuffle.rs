//! Shuffling: the block order of an epoch, and the rows within a block, each from a stream
//! derived from the seed, the epoch and (for rows) the block.

use rand::seq::SliceRandom;
use rand::{rngs::StdRng, SeedableRng};

use super::shared::Shared;
use super::Rows;

/// Block visiting order of an epoch.
pub(super) fn epoch_order(sh: &Shared, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sh.blocks.len()).collect();
    if sh.p.shuffle {
        order.shuffle(&mut StdRng::seed_from_u64(mix(sh.p.seed, epoch, u64::MAX)));
    }
    order
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    // splitmix64-style mixing so nearby seeds/epochs give unrelated streams
    let mut z = seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.rotate_left(17);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The rows of block `bi`'s `pieces` in epoch `epoch`'s shuffled order, as one piece.
pub(super) fn shuffle_rows(sh: &Shared, epoch: u64, bi: usize, pieces: Vec<Rows>) -> Vec<Rows> {
    let all = super::load::concat(pieces);
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.shuffle(&mut StdRng::seed_from_u64(mix(sh.p.seed, epoch, bi as u64)));
    vec![all.gather(&order)]
}
