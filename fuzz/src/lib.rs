//! Helpers shared by the fuzz targets: a per-process scratch path, and the three ways a target
//! turns fuzz input into a file (the raw bytes; a valid file with bytes flipped; a valid file
//! whose metadata and tensors are rewritten and whose checksums are then recomputed, so the
//! loader's validation behind the checksums is reached too).

use std::collections::HashMap;
use std::path::PathBuf;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use sparrow_core::fsio::{checksum64, checksum_hex, checksum_pairs};

/// A scratch file for target `tag`, one per process (libFuzzer may run several processes).
pub fn scratch(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sparrow-fuzz-{}-{tag}", std::process::id()))
}

/// Reads fuzz input from the front.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    /// The next byte (0 once the input is used up).
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    /// The next `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a.to_vec()
    }
    /// True once every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The file a target loads, made from `valid` (a file the code itself wrote) and the input:
/// mode 0 the raw input; mode 1 `valid` with bytes xor-ed at input-chosen places; mode 2
/// `valid` with metadata values and tensors rewritten from the input and every checksum
/// recomputed (the meta checksum under `meta_checksum`, each tensor's under
/// `checksum:<name>`), as a bug or an attacker who knows the format would write it.
pub fn make_file(valid: &[u8], data: &[u8]) -> Vec<u8> {
    let mut input = Input(data);
    match input.byte() % 3 {
        0 => input.0.to_vec(),
        1 => {
            let mut f = valid.to_vec();
            while !input.is_empty() && !f.is_empty() {
                let pos = u16::from_le_bytes([input.byte(), input.byte()]) as usize % f.len();
                f[pos] ^= input.byte();
            }
            f
        }
        _ => resealed(valid, &mut input).unwrap_or_else(|| valid.to_vec()),
    }
}

fn resealed(valid: &[u8], input: &mut Input) -> Option<Vec<u8>> {
    let st = SafeTensors::deserialize(valid).ok()?;
    let (_, header) = SafeTensors::read_metadata(valid).ok()?;
    let mut meta: HashMap<String, String> = header.metadata().clone().unwrap_or_default();
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mut keys: Vec<String> = meta.keys().cloned().collect();
    keys.sort();
    while !input.is_empty() {
        match input.byte() % 4 {
            // Change one character of a metadata value to printable ASCII (a digit of a row
            // count, a quote or brace of a JSON state).
            0 if !keys.is_empty() => {
                let k = &keys[input.byte() as usize % keys.len()];
                let (pos, c) = (input.byte() as usize, (input.byte() % 95 + 32) as char);
                if let Some(v) = meta.get_mut(k) {
                    let mut chars: Vec<char> = v.chars().collect();
                    if !chars.is_empty() {
                        let i = pos % chars.len();
                        chars[i] = c;
                        *v = chars.into_iter().collect();
                    }
                }
            }
            // Replace a metadata value (or add a key) with input text.
            0 | 1 => {
                let k = input.byte() as usize;
                let len = input.byte() as usize % 24;
                let value = String::from_utf8_lossy(&input.take(len)).into_owned();
                let key = if k < keys.len() {
                    keys[k].clone()
                } else if let Some(t) = tensors.get(k % tensors.len().max(1)) {
                    // Keys the loaders read per tensor.
                    let prefix = ["rows:", "layout:", "count:", "dtype:"][k % 4];
                    format!("{prefix}{}", t.0)
                } else {
                    continue;
                };
                meta.insert(key, value);
            }
            // Give a tensor a new shape (and data of the matching length).
            2 if !tensors.is_empty() => {
                let i = input.byte() as usize % tensors.len();
                let ndim = input.byte() as usize % 4;
                let shape: Vec<usize> = (0..ndim).map(|_| input.byte() as usize % 9).collect();
                let t = &mut tensors[i];
                let n: usize = shape.iter().product::<usize>() * (t.1.bitsize() / 8);
                t.3 = (0..n).map(|j| t.3.get(j % t.3.len().max(1)).copied().unwrap_or(0)).collect();
                t.2 = shape;
            }
            // Overwrite one value of a tensor.
            _ if !tensors.is_empty() => {
                let i = input.byte() as usize % tensors.len();
                let t = &mut tensors[i];
                if !t.3.is_empty() {
                    let pos = input.byte() as usize % t.3.len();
                    t.3[pos] = input.byte();
                }
            }
            _ => {}
        }
    }
    for t in &tensors {
        meta.insert(format!("checksum:{}", t.0), checksum_hex(checksum64(&t.3)));
    }
    meta.remove("meta_checksum");
    let mc = checksum_hex(checksum_pairs(&meta, "meta_checksum"));
    meta.insert("meta_checksum".into(), mc);
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| Some((t.0.clone(), TensorView::new(t.1, t.2.clone(), &t.3).ok()?)))
        .collect::<Option<_>>()?;
    safetensors::serialize(views, Some(meta)).ok()
}
