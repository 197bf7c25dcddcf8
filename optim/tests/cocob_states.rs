//! COCOB keeps its five states per weight element side by side in one array ("packed"); state
//! files of the earlier five-array layout still load (packed on the way in) and resume to the
//! same bits, and malformed ones are refused with a message naming what is wrong.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use sparrow_core::fsio::{checksum64, checksum_hex, checksum_pairs};
use sparrow_core::{Device, NDArray};
use sparrow_nn::{Initializer, Parameter};
use sparrow_optim::*;

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sparrow-optim-cocob-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn param() -> Parameter {
    let p = Parameter::new("w", &[3, 2]);
    p.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    p.set_data(&NDArray::from_vec(vec![0.1f32, 0.2, 0.3, 0.4, -0.5, 0.6], &[3, 2]).unwrap())
        .unwrap();
    p
}

fn grad(step: usize) -> NDArray {
    let s = step as f32;
    NDArray::from_vec(vec![0.3 * s, -0.7, 1.1, 0.2 - s, 0.0, 0.5], &[3, 2]).unwrap()
}

fn step(t: &mut Trainer, p: &Parameter, k: usize) {
    p.data().unwrap().set_grad(Some(grad(k)));
    t.step(1).unwrap();
}

fn weights(p: &Parameter) -> Vec<u32> {
    p.data()
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// A state file's tensors (name, dtype, shape, bytes) and metadata.
type Parts = (
    Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
    HashMap<String, String>,
);

fn read_parts(path: &Path) -> Parts {
    let bytes = std::fs::read(path).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let tensors = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    (tensors, meta)
}

/// Write tensors and metadata with fresh checksums (what a correct writer of that content
/// would produce).
fn write_parts(path: &Path, (tensors, mut meta): Parts) {
    meta.retain(|k, _| !k.starts_with("checksum:"));
    for t in &tensors {
        meta.insert(format!("checksum:{}", t.0), checksum_hex(checksum64(&t.3)));
    }
    let mc = checksum_hex(checksum_pairs(&meta, "meta_checksum"));
    meta.insert("meta_checksum".into(), mc);
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            (
                t.0.clone(),
                TensorView::new(t.1, t.2.clone(), &t.3).unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

/// The file at `packed` rewritten in the five-array layout of earlier sparrow versions:
/// slots `l, s, r, theta, w0`, each shaped like the weight; `slots` of them written.
fn legacy_file(packed: &Path, out: &Path, slots: &[&str]) {
    let (tensors, mut meta) = read_parts(packed);
    let (_, dt, shape, bytes) = tensors.into_iter().find(|t| t.0 == "0.packed").unwrap();
    let wshape = shape[..shape.len() - 1].to_vec();
    let vals: Vec<[u8; 4]> = bytes
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect();
    let all = ["l", "s", "r", "theta", "w0"];
    let legacy = slots
        .iter()
        .map(|name| {
            let k = all.iter().position(|n| n == name).unwrap();
            let b: Vec<u8> = vals.iter().skip(k).step_by(5).flatten().copied().collect();
            (format!("0.{name}"), dt, wshape.clone(), b)
        })
        .collect();
    let st = meta.get_mut("state.0").unwrap();
    let list = slots
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(",");
    *st = st.replace("[\"packed\"]", &format!("[{list}]"));
    write_parts(out, (legacy, meta));
}

#[test]
fn cocob_states_are_one_packed_array() {
    let p = param();
    let mut t = Trainer::new(vec![p.clone()], Cocob::new()).unwrap();
    step(&mut t, &p, 1);
    let st = t.state(0).unwrap();
    assert_eq!(st.arrays.len(), 1);
    assert_eq!(st.arrays[0].0, "packed");
    assert_eq!(st.arrays[0].1.shape()[..], [3, 2, 5]);
    // Element 0 saw h = 0.3: l = s = theta = 0.3, r = 0, w0 = its weight before the step.
    let v = st.arrays[0].1.to_vec::<f32>().unwrap();
    assert_eq!(&v[..5], &[0.3, 0.3, 0.0, 0.3, 0.1]);
}

#[test]
fn five_array_cocob_state_files_load_and_resume_to_the_same_bits() {
    let d = dir("legacy");
    let (packed, legacy) = (d.join("packed.states"), d.join("legacy.states"));
    let p = param();
    let mut t = Trainer::new(vec![p.clone()], Cocob::new()).unwrap();
    for k in 1..=3 {
        step(&mut t, &p, k);
    }
    t.save_states(&packed).unwrap();
    legacy_file(&packed, &legacy, &["l", "s", "r", "theta", "w0"]);
    let saved = p.data().unwrap().copy();
    // Resume from each file on a copy of the weight; both continue exactly as the original.
    for (file, what) in [(&packed, "packed"), (&legacy, "five-array")] {
        let q = param();
        q.set_data(&saved).unwrap();
        let mut tq = Trainer::new(vec![q.clone()], Cocob::new()).unwrap();
        tq.load_states(file).unwrap();
        assert_eq!(tq.state(0).unwrap().arrays[0].0, "packed", "{what}");
        assert_eq!(tq.state(0).unwrap().t, 3, "{what}");
        step(&mut tq, &q, 4);
        let r = param();
        r.set_data(&saved).unwrap();
        let mut tr = Trainer::new(vec![r.clone()], Cocob::new()).unwrap();
        tr.load_states(&packed).unwrap();
        step(&mut tr, &r, 4);
        assert_eq!(weights(&q), weights(&r), "{what}");
    }
    step(&mut t, &p, 4);
    let q = param();
    q.set_data(&saved).unwrap();
    let mut tq = Trainer::new(vec![q.clone()], Cocob::new()).unwrap();
    tq.load_states(&legacy).unwrap();
    step(&mut tq, &q, 4);
    assert_eq!(weights(&q), weights(&p));
}

#[test]
fn malformed_cocob_state_files_are_refused_with_a_reason() {
    let d = dir("bad");
    let packed = d.join("packed.states");
    let p = param();
    let mut t = Trainer::new(vec![p.clone()], Cocob::new()).unwrap();
    step(&mut t, &p, 1);
    t.save_states(&packed).unwrap();
    // Four of the five legacy arrays.
    let four = d.join("four.states");
    legacy_file(&packed, &four, &["l", "s", "r", "theta"]);
    let mut tq = Trainer::new(vec![param()], Cocob::new()).unwrap();
    let e = tq.load_states(&four).unwrap_err().to_string();
    assert!(e.contains("five arrays") && e.contains("\"theta\"]"), "{e}");
    // A packed array of the wrong shape (the weight's own).
    let (mut tensors, meta) = read_parts(&packed);
    tensors[0].2 = vec![3, 2];
    tensors[0].3.truncate(6 * 4);
    let short = d.join("short.states");
    write_parts(&short, (tensors, meta));
    let e = tq.load_states(&short).unwrap_err().to_string();
    assert!(
        e.contains("slot packed is [3, 2]") && e.contains("[3, 2, 5]"),
        "{e}"
    );
    // A negative largest |gradient| (l, the first of each five) no step makes; a negative
    // theta (the fourth) is an ordinary state.
    for (at, ok) in [(0usize, false), (3, true)] {
        let (mut tensors, meta) = read_parts(&packed);
        tensors[0].3[at * 4..at * 4 + 4].copy_from_slice(&(-1.0f32).to_le_bytes());
        let f = d.join(format!("neg{at}.states"));
        write_parts(&f, (tensors, meta));
        let r = tq.load_states(&f);
        if ok {
            r.unwrap();
        } else {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains("slot packed holds -1 at element 0") && e.contains(">= 0"),
                "{e}"
            );
        }
    }
    // Another optimizer's file is refused as before.
    let adam = d.join("adam.states");
    let ta = Trainer::new(vec![param()], Adam::new(0.1)).unwrap();
    ta.save_states(&adam).unwrap();
    let e = tq.load_states(&adam).unwrap_err().to_string();
    assert!(e.contains("'adam'"), "{e}");
}
