//! Hybridized training on every test device against eager training there: a Dense MLP with
//! softmax cross-entropy, L2 and sigmoid BCE, trained over several `Trainer` steps (SGD with
//! momentum, updating the weights in place) eagerly, through `HybridTrainStep` (the joint
//! graph out of its memory plan, on the device's buffers) and through `HybridTrainStep` with
//! the step captured as a CUDA graph and replayed. Losses and weights must agree; on a CUDA
//! device the captured copy must have replayed its graph; a loss or gradient held over a step
//! keeps its values (the replay moves it to a copy), and a view of a gradient's buffer held
//! over a step makes that step run normally and the next capture again.
//!
//! Tolerance: 1e-6 relative to each array's largest magnitude (the graph runs the eager
//! kernels; on the host the results are the same bits, as `nn/tests/hybrid_train.rs` checks).

use sparrow_core::testing::{run_on_device, test_array, test_devices};
use sparrow_core::{autograd, DType, Device, NDArray, Result};
use sparrow_nn::loss::{L2Loss, Loss, SigmoidBinaryCrossEntropyLoss, SoftmaxCrossEntropyLoss};
use sparrow_nn::{Block, Dense, HybridTrainStep, Initializer, Sequential};
use sparrow_optim::{Sgd, Trainer};

fn mlp(out: usize) -> Sequential {
    let mut s = Sequential::new();
    s.add(Dense::new(24).activation("relu"));
    s.add(Dense::new(16).activation("tanh"));
    s.add(Dense::new(out));
    s
}

fn close(a: &NDArray, b: &NDArray, what: &str) {
    let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = a.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-6 * scale,
            "{what}: element {k}: {x} against {y}"
        );
    }
}

/// Train three copies of `mlp(out)` on `device` for `steps` steps: eager, hybridized and
/// hybridized with a CUDA graph. Returns the captured copy's (replays, captures).
fn train_three(
    device: Device,
    out: usize,
    loss: &dyn Loss,
    y: &NDArray,
    steps: usize,
    keep: Keep,
) -> Result<(usize, usize)> {
    let batch = y.shape()[0];
    let x = test_array(&[batch, 12], -1.0, 1.0, 7)
        .astype(DType::F32)?
        .to_device(device)?;
    let y = y.to_device(device)?;
    let nets = [mlp(out), mlp(out), mlp(out)];
    for n in &nets {
        n.initialize(&Initializer::xavier(), device)?;
        autograd::pause(|| n.forward(&x))?;
    }
    let first = nets[0].collect_params()?;
    for n in &nets[1..] {
        let ps = n.collect_params()?;
        for (name, p) in first.iter() {
            if let Some(q) = ps.get(name) {
                q.set_data(&p.data()?.copy())?;
            }
        }
    }
    let mut trainers = Vec::new();
    for n in &nets {
        trainers.push(Trainer::from_params(
            &n.collect_params()?,
            Sgd::new(0.05).momentum(0.9),
        )?);
    }
    let mut hyb = HybridTrainStep::new(&nets[1], loss);
    let mut cap = HybridTrainStep::new(&nets[2], loss).with_cuda_graph(true);
    let mut kept = None;
    let mut last_loss: Option<(Vec<f64>, NDArray)> = None;
    for s in 0..steps {
        let le = autograd::record(|| loss.forward(&nets[0].forward(&x)?, &y))?;
        le.backward()?;
        trainers[0].step(batch)?;
        let lh = hyb.step(&x, &y)?;
        trainers[1].step(batch)?;
        let lc = cap.step(&x, &y)?;
        trainers[2].step(batch)?;
        close(
            &le,
            &lh,
            &format!("loss, hybridized, step {s} on {device:?}"),
        );
        close(
            &le,
            &lc,
            &format!("loss, CUDA graph, step {s} on {device:?}"),
        );
        if let Some((values, l)) = &last_loss {
            assert_eq!(
                values,
                &l.to_f64_vec(),
                "a held loss changed under its holder"
            );
        }
        // Hold this step's loss over the next step (as a training log does).
        last_loss = Some((lc.to_f64_vec(), lc));
        if s == 3 && keep != Keep::Nothing {
            // Hold a gradient (or a view of its buffer) across the next step.
            let p = nets[2]
                .collect_params()?
                .iter()
                .next()
                .map(|(_, p)| p.clone());
            let g = p.expect("a parameter").grad().expect("a gradient");
            let g = match keep {
                Keep::View => g.reshape(&[g.size()])?,
                _ => g,
            };
            kept = Some((g.to_f64_vec(), g));
        }
    }
    if let Some((values, g)) = kept {
        assert_eq!(
            values,
            g.to_f64_vec(),
            "a kept gradient changed under its holder"
        );
    }
    for (k, n) in nets[1..].iter().enumerate() {
        for ((name, a), (_, b)) in first.iter().zip(n.collect_params()?.iter()) {
            close(
                &a.data()?,
                &b.data()?,
                &format!("weight {name} of copy {} on {device:?}", k + 1),
            );
        }
    }
    Ok(cap.train_step().map_or((0, 0), |t| t.cuda_graph_runs()))
}

/// What the test holds from step 3 on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Keep {
    Nothing,
    /// A gradient: the replay moves it to a copy first.
    Gradient,
    /// A view sharing a gradient's buffer: the next step cannot replay.
    View,
}

fn labels(n: usize, classes: usize) -> NDArray {
    NDArray::from_vec((0..n).map(|i| ((i * 7) % classes) as f32).collect(), &[n]).unwrap()
}

#[test]
fn hybridized_and_cuda_graph_steps_match_eager_on_every_device() {
    for device in test_devices() {
        let r = run_on_device::<String>("hybrid devices", device, || {
            let ce = SoftmaxCrossEntropyLoss::new();
            let l2 = L2Loss::new();
            let bce = SigmoidBinaryCrossEntropyLoss::new();
            let y_ce = labels(16, 5);
            let y_l2 = test_array(&[16, 3], -1.0, 1.0, 3)
                .astype(DType::F32)
                .unwrap();
            let y_bce = test_array(&[16, 1], 0.0, 1.0, 4)
                .astype(DType::F32)
                .unwrap();
            for (name, loss, out, y) in [
                ("softmax ce", &ce as &dyn Loss, 5, &y_ce),
                ("l2", &l2, 3, &y_l2),
                ("sigmoid bce", &bce, 1, &y_bce),
            ] {
                let (replays, captures) = train_three(device, out, loss, y, 6, Keep::Nothing)
                    .map_err(|e| e.to_string())?;
                eprintln!(
                    "{name} on {device:?}: CUDA graph replays {replays}, captures {captures}"
                );
                if matches!(device, Device::Cuda(_)) {
                    // Step 0 traces (eager), step 1 plans, step 2 captures (and launches),
                    // steps 3 to 5 replay.
                    assert_eq!((replays, captures), (4, 1), "{name} on {device:?}");
                } else {
                    assert_eq!((replays, captures), (0, 0), "{name} on {device:?}");
                }
            }
            // A gradient held over step 4 moves to a copy and the graph replays; a view of its
            // buffer makes step 4 run normally and step 5 capture again.
            let runs =
                train_three(device, 5, &ce, &y_ce, 6, Keep::Gradient).map_err(|e| e.to_string())?;
            let view_runs =
                train_three(device, 5, &ce, &y_ce, 6, Keep::View).map_err(|e| e.to_string())?;
            if matches!(device, Device::Cuda(_)) {
                assert_eq!(runs, (4, 1), "kept gradient on {device:?}");
                assert_eq!(view_runs, (3, 2), "kept view on {device:?}");
            }
            Ok(())
        });
        r.unwrap();
    }
}
