//! Optimizer state files and Estimator checkpoints are checksummed, and update counts that
//! came from a file cannot overflow into NaN weights (issue #27).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use safetensors::tensor::TensorView;
use safetensors::SafeTensors;
use sparrow_core::fsio::{checksum_hex, checksum_pairs};
use sparrow_core::{Device, NDArray};
use sparrow_nn::{Block, BlockIo, Dense, Initializer, Parameter};
use sparrow_optim::*;

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sparrow-optim-sf-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn param(vals: Vec<f32>) -> Parameter {
    let p = Parameter::new("w", &[2, 2]);
    p.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    p.set_data(&NDArray::from_vec(vals, &[2, 2]).unwrap())
        .unwrap();
    p
}

fn grad() -> NDArray {
    NDArray::from_vec(vec![0.3f32, -0.7, 1.1, 0.2], &[2, 2]).unwrap()
}

/// A trainer of `opt` over one parameter, stepped `steps` times, and its states saved.
fn saved_states<O: Optimizer + 'static>(opt: O, path: &Path, steps: usize) -> Parameter {
    let p = param(vec![0.1, 0.2, 0.3, 0.4]);
    let mut t = Trainer::new(vec![p.clone()], opt).unwrap();
    for _ in 0..steps {
        p.data().unwrap().set_grad(Some(grad()));
        t.step(1).unwrap();
    }
    t.save_states(path).unwrap();
    p
}

/// Rewrite a state file's metadata with `edit`, keeping its arrays, and give it a correct
/// metadata checksum: a file as a bug or an attacker who knows the format would write it.
fn rewrite_meta(path: &Path, edit: impl FnOnce(&mut HashMap<String, String>)) {
    let bytes = std::fs::read(path).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap();
    edit(&mut meta);
    let mc = checksum_hex(checksum_pairs(&meta, "meta_checksum"));
    meta.insert("meta_checksum".into(), mc);
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let views: Vec<(String, TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                TensorView::new(t.dtype(), t.shape().to_vec(), t.data()).unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

/// One flipped bit anywhere in a state file is refused, or loads the very states saved (a
/// flip in JSON whitespace, say); it never panics. Without checksums a flipped byte in an
/// array loaded, and a step later every weight was NaN.
#[test]
fn every_single_bit_flip_in_a_state_file_is_refused_or_harmless() {
    let d = dir("flip");
    let path = d.join("adam.states");
    let p = saved_states(Adam::new(0.01), &path, 2);
    let mut t = Trainer::new(vec![p.clone()], Adam::new(0.01)).unwrap();
    t.load_states(&path).unwrap();
    let snapshot = |t: &Trainer| {
        let s = t.state(0).unwrap();
        let arrays: Vec<(String, Vec<u32>)> = s
            .arrays
            .iter()
            .map(|(n, a)| {
                let v = a.to_vec::<f32>().unwrap();
                (n.clone(), v.iter().map(|x| x.to_bits()).collect())
            })
            .collect();
        (s.t, arrays, s.scalars.clone())
    };
    let good = snapshot(&t);
    let bytes = std::fs::read(&path).unwrap();
    let flipped = d.join("flipped.states");
    let mut refused = 0;
    for pos in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[pos] ^= bit;
            std::fs::write(&flipped, &b).unwrap();
            let mut tt = Trainer::new(vec![p.clone()], Adam::new(0.01)).unwrap();
            match catch_unwind(AssertUnwindSafe(|| tt.load_states(&flipped))) {
                Err(_) => panic!("byte {pos} ^ {bit:#x}: load panicked"),
                Ok(Err(_)) => refused += 1,
                Ok(Ok(())) => assert_eq!(
                    snapshot(&tt),
                    good,
                    "byte {pos} ^ {bit:#x} loaded different states"
                ),
            }
        }
    }
    assert!(
        refused > bytes.len(),
        "{refused} of {} refused",
        2 * bytes.len()
    );
    // The arrays' bytes specifically (the file's tail) are always refused.
    for pos in bytes.len() - 32..bytes.len() {
        let mut b = bytes.clone();
        b[pos] ^= 0x01;
        std::fs::write(&flipped, &b).unwrap();
        let msg = t.load_states(&flipped).unwrap_err().to_string();
        assert!(msg.contains("checksum"), "{msg}");
        assert!(msg.contains("flipped.states"), "{msg}");
    }
}

/// An update count of 2^31 - 1 from a state file: the next step's `t as i32` wrapped to
/// -2^31, the bias correction became infinite and the weights NaN. Now the step is finite and
/// continues the sequence; a count that cannot be incremented at all is an error that leaves
/// the weight unchanged.
#[test]
fn huge_update_counts_from_a_file_never_give_nan() {
    let d = dir("count");
    for opt in ["adam", "adamax", "nadam", "lamb"] {
        for (count, ok) in [(i32::MAX as u64, true), (u64::MAX, false)] {
            let path = d.join(format!("{opt}.states"));
            let make = |p: &Parameter| -> Trainer {
                let params = vec![p.clone()];
                match opt {
                    "adam" => Trainer::new(params, Adam::new(0.01)),
                    "adamax" => Trainer::new(params, Adamax::new(0.01)),
                    "nadam" => Trainer::new(params, Nadam::new(0.01)),
                    _ => Trainer::new(params, Lamb::new(0.01)),
                }
                .unwrap()
            };
            let p = param(vec![0.1, 0.2, 0.3, 0.4]);
            {
                let mut t = make(&p);
                p.data().unwrap().set_grad(Some(grad()));
                t.step(1).unwrap();
                t.save_states(&path).unwrap();
            }
            rewrite_meta(&path, |m| {
                let s = m.get_mut("state.0").unwrap();
                *s = s.replacen("\"t\":1", &format!("\"t\":{count}"), 1);
                m.insert("num_update".into(), count.to_string());
            });
            let mut t = make(&p);
            t.load_states(&path).unwrap();
            assert_eq!(t.state(0).unwrap().t, count, "{opt}");
            let before = p.data().unwrap().to_vec::<f32>().unwrap();
            p.data().unwrap().set_grad(Some(grad()));
            let r = catch_unwind(AssertUnwindSafe(|| t.step(1)))
                .unwrap_or_else(|_| panic!("{opt}: step panicked at t = {count}"));
            let after = p.data().unwrap().to_vec::<f32>().unwrap();
            if ok {
                r.unwrap();
                assert!(after.iter().all(|x| x.is_finite()), "{opt}: {after:?}");
                assert_ne!(after, before, "{opt}");
            } else {
                assert!(r.is_err(), "{opt}: t = u64::MAX stepped");
                assert_eq!(after, before, "{opt}");
            }
        }
    }
}

/// Estimator checkpoints are nn parameter files: checksummed (a flipped byte is refused by
/// `load_parameters`; the old encoder wrote no checksums and it loaded) and with the weights'
/// layout.
#[test]
fn checkpoint_parameter_files_are_checksummed() {
    let d = dir("ckpt");
    let net = Dense::new(3).in_units(2);
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let path = d.join("model.params");
    sparrow_optim::fit::save_params(&net.collect_params().unwrap(), &path).unwrap();
    let other = Dense::new(3).in_units(2);
    other.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    other.load_parameters(&path).unwrap();
    assert_eq!(
        other.weight().data().unwrap().to_vec::<f32>().unwrap(),
        net.weight().data().unwrap().to_vec::<f32>().unwrap()
    );
    let mut b = std::fs::read(&path).unwrap();
    let n = b.len();
    b[n - 5] ^= 0x04;
    std::fs::write(&path, &b).unwrap();
    let msg = other.load_parameters(&path).unwrap_err().to_string();
    assert!(msg.contains("checksum mismatch"), "{msg}");
}

/// A state file whose arrays were rewritten and whose checksums were recomputed (crafted, or
/// from a buggy writer) is refused when a value is one no step makes: a negative Adam
/// variance or a NaN. Loaded, a negative variance turned the weight NaN one step later (the
/// fuzz target `load_states` found it).
#[test]
fn state_values_no_step_makes_are_refused_even_with_good_checksums() {
    let d = dir("values");
    for (slot, value, needle) in [
        ("var", -1.0f32, "must be finite and >= 0"),
        ("mean", f32::NAN, "must be finite"),
    ] {
        let path = d.join(format!("{slot}.states"));
        let p = saved_states(Adam::new(0.01), &path, 2);
        let bytes = std::fs::read(&path).unwrap();
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
        let mut meta = header.metadata().clone().unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
            .tensors()
            .into_iter()
            .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
            .collect();
        let target = tensors
            .iter_mut()
            .find(|t| t.0.ends_with(&format!(".{slot}")))
            .unwrap();
        target.3[..4].copy_from_slice(&value.to_le_bytes());
        for t in &tensors {
            meta.insert(
                format!("checksum:{}", t.0),
                checksum_hex(sparrow_core::fsio::checksum64(&t.3)),
            );
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
        std::fs::write(&path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
        let mut t = Trainer::new(vec![p], Adam::new(0.01)).unwrap();
        let e = t.load_states(&path).unwrap_err().to_string();
        assert!(
            e.contains(&format!("slot {slot}")) && e.contains(needle),
            "{e}"
        );
    }
}
