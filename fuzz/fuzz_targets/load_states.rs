//! Optimizer state files (and so the `.states` half of an Estimator checkpoint; the
//! `.params` half is `load_params`' file): whatever the bytes, `Trainer::load_states` returns
//! Ok or an error, never panics; a load that succeeds holds only finite state values (a
//! crafted state with NaN or a negative variance turned the weights NaN one step later), and a
//! step after it runs without panicking.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sparrow_core::{Device, NDArray};
use sparrow_nn::{Initializer, Parameter};
use sparrow_optim::{Adam, Ftrl, Optimizer, Trainer};

fn param() -> Parameter {
    let p = Parameter::new("w", &[3, 2]);
    p.initialize(&Initializer::Constant(0.5), Device::Cpu)
        .expect("initialize");
    p
}

fn grad() -> NDArray {
    NDArray::from_vec(vec![0.3f32, -0.7, 1.1, 0.2, 0.0, -2.0], &[3, 2]).expect("grad")
}

/// A trainer over one parameter, stepped twice; `kind` 0 is Adam, 1 FTRL.
fn trainer(kind: u8) -> (Parameter, Trainer) {
    let p = param();
    let opt: Box<dyn Optimizer> = if kind == 0 {
        Box::new(Adam::new(0.01))
    } else {
        Box::new(Ftrl::new(0.1))
    };
    let t = Trainer::new(vec![p.clone()], opt).expect("trainer");
    (p, t)
}

fn valid(kind: u8) -> &'static [u8] {
    static VALID: [OnceLock<Vec<u8>>; 2] = [OnceLock::new(), OnceLock::new()];
    VALID[kind as usize].get_or_init(|| {
        let (p, mut t) = trainer(kind);
        for _ in 0..2 {
            p.data().expect("data").set_grad(Some(grad()));
            t.step(1).expect("step");
        }
        let path = sparrow_fuzz::scratch(&format!("states-valid-{kind}"));
        t.save_states(&path).expect("save");
        std::fs::read(&path).expect("read back")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let kind = kind % 2;
    let file = sparrow_fuzz::make_file(valid(kind), rest);
    let path = sparrow_fuzz::scratch("states");
    std::fs::write(&path, &file).expect("scratch write");
    let (p, mut t) = trainer(kind);
    if t.load_states(&path).is_ok() {
        if let Some(s) = t.state(0) {
            for (slot, a) in &s.arrays {
                let v = a.to_vec::<f32>().expect("f32 state");
                assert!(v.iter().all(|x| x.is_finite()), "slot {slot}: {v:?}");
            }
        }
        p.data().expect("data").set_grad(Some(grad()));
        // Finite states can still be extreme enough to overflow a step (a mean of 1e38): the
        // step may give infinite weights, but it returns, and never panics.
        let _ = t.step(1);
    }
});
