//! Maps and sets keyed by array id, for the backward pass's bookkeeping.
//!
//! A training step's graph has a dozen arrays or so: there a vector searched from the end beats
//! hashing (hashbrown's insert was ~65 instructions, 22 per tutorial step). Past [`SMALL`]
//! entries the map moves into a hash map, so deep graphs keep constant-time lookups.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Entries kept in the vector before moving to the hash map.
const SMALL: usize = 32;

/// Array ids are unique sequential integers, so they are their own hash: SipHash (std's
/// default) cost more than the rest of the bookkeeping in a small training step's backward.
#[derive(Default)]
struct IdHasher(u64);
impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // Spread sequential ids over hashbrown's control bits (it uses the top 7 bits).
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A map from array id to `V`: a vector while small, a hash map beyond [`SMALL`] entries.
pub(super) struct IdMap<V> {
    small: Vec<(u64, V)>,
    large: Option<HashMap<u64, V, BuildHasherDefault<IdHasher>>>,
}

impl<V> IdMap<V> {
    pub(super) fn new() -> Self {
        IdMap {
            small: Vec::with_capacity(SMALL),
            large: None,
        }
    }

    /// Insert `v` under `k`, returning the value it replaces.
    pub(super) fn insert(&mut self, k: u64, v: V) -> Option<V> {
        if let Some(m) = &mut self.large {
            return m.insert(k, v);
        }
        // Recently inserted ids are the likeliest to be looked up again: search from the end.
        if let Some(e) = self.small.iter_mut().rev().find(|e| e.0 == k) {
            return Some(std::mem::replace(&mut e.1, v));
        }
        if self.small.len() < SMALL {
            self.small.push((k, v));
        } else {
            let mut m: HashMap<u64, V, BuildHasherDefault<IdHasher>> =
                HashMap::with_capacity_and_hasher(4 * SMALL, Default::default());
            m.extend(self.small.drain(..));
            m.insert(k, v);
            self.large = Some(m);
        }
        None
    }

    /// Remove and return the value under `k`.
    pub(super) fn remove(&mut self, k: u64) -> Option<V> {
        if let Some(m) = &mut self.large {
            return m.remove(&k);
        }
        let i = self.small.iter().rposition(|e| e.0 == k)?;
        Some(self.small.swap_remove(i).1)
    }

    /// Whether `k` has a value.
    pub(super) fn contains(&self, k: u64) -> bool {
        match &self.large {
            Some(m) => m.contains_key(&k),
            None => self.small.iter().rev().any(|e| e.0 == k),
        }
    }

    /// Number of entries.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.large.as_ref().map_or(self.small.len(), |m| m.len())
    }
}

/// A set of array ids ([`IdMap`] without values).
pub(super) struct IdSet(IdMap<()>);

impl IdSet {
    pub(super) fn new() -> Self {
        IdSet(IdMap::new())
    }
    /// Add `k`; `true` when it was not in the set.
    pub(super) fn insert(&mut self, k: u64) -> bool {
        self.0.insert(k, ()).is_none()
    }
    /// Whether `k` is in the set.
    pub(super) fn contains(&self, k: u64) -> bool {
        self.0.contains(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random inserts, replacements, removals and lookups across the move to the hash map,
    /// against std's HashMap.
    #[test]
    fn behaves_like_a_hash_map_below_and_above_the_small_size() {
        use rand::rngs::Xoshiro256PlusPlus;
        use rand::{RngExt, SeedableRng};
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        for keys in [8u64, 40, 200] {
            let mut ours: IdMap<u32> = IdMap::new();
            let mut std_map: HashMap<u64, u32> = HashMap::new();
            for step in 0..4000u32 {
                let k = rng.random_range(0..keys);
                match rng.random_range(0..3) {
                    0 => assert_eq!(ours.insert(k, step), std_map.insert(k, step)),
                    1 => assert_eq!(ours.remove(k), std_map.remove(&k)),
                    _ => assert_eq!(ours.contains(k), std_map.contains_key(&k)),
                }
                assert_eq!(ours.len(), std_map.len(), "keys {keys} step {step}");
            }
            let mut set = IdSet::new();
            assert!(set.insert(keys) && !set.insert(keys) && set.contains(keys));
        }
    }
}
