//! A dense MLP's training step on a GPU three ways: eager (`record` + `backward`), hybridized
//! (`HybridTrainStep`: the joint forward + backward graph out of its memory plan) and
//! hybridized with the step captured as a CUDA graph and replayed
//! (`HybridTrainStep::with_cuda_graph`), each followed by `Trainer::step` (SGD).
//!
//! ```text
//! cargo run --release --features cuda --example cuda_graph -- [--steps 50] [--rounds 5]
//! ```
//!
//! 784-512-512-10 (relu), batches of 32 and 256 (small batches are bound by kernel launches,
//! which the graph replaces by one), with softmax cross-entropy (whose class labels are
//! checked on the host each step, which waits for the device) and with L2 against one-hot
//! targets (nothing read on the host). The optimizer's host time per step (its launches,
//! outside the graph) is printed beside the captured step's. The three copies start from the
//! same weights and see the same batches: their losses after the timed steps are printed and
//! must agree (the run fails otherwise). Each figure is the median over rounds of the mean
//! step time, the three ways alternating within each round; the GPU is synchronized after
//! each timed block. Without a GPU it says so and exits.

use std::time::Instant;

use sparrow::core::{autograd, DType, Device, NDArray, Result};
use sparrow::nn::loss::{L2Loss, Loss, SoftmaxCrossEntropyLoss};
use sparrow::nn::{Block, Dense, HybridTrainStep, Initializer, Sequential};
use sparrow::optim::{Sgd, Trainer};

struct Args {
    steps: usize,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args {
        steps: 50,
        rounds: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let n: usize = match it.next().and_then(|v| v.parse().ok()) {
            Some(n) if n > 0 => n,
            _ => {
                eprintln!("usage: cuda_graph [--steps N] [--rounds N]");
                std::process::exit(2);
            }
        };
        match flag.as_str() {
            "--steps" => a.steps = n,
            "--rounds" => a.rounds = n,
            other => {
                eprintln!("unknown flag {other}; usage: cuda_graph [--steps N] [--rounds N]");
                std::process::exit(2);
            }
        }
    }
    a
}

fn mlp() -> Sequential {
    let mut s = Sequential::new();
    s.add(Dense::new(512).activation("relu"));
    s.add(Dense::new(512).activation("relu"));
    s.add(Dense::new(10));
    s
}

/// How one copy of the model trains.
enum Way<'a> {
    Eager,
    Graph(HybridTrainStep<'a>),
}

fn sync(dev: Device) -> Result<()> {
    match dev {
        Device::Cuda(i) => sparrow::core::cuda::synchronize(i),
        _ => Ok(()),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(batch: usize, dev: Device, ce: bool, a: &Args) -> Result<()> {
    let x = sparrow::core::testing::test_array(&[batch, 784], -1.0, 1.0, 1)
        .astype(DType::F32)?
        .to_device(dev)?;
    let classes: Vec<f32> = (0..batch).map(|i| (i % 10) as f32).collect();
    let (loss, y): (Box<dyn Loss>, NDArray) = if ce {
        (
            Box::new(SoftmaxCrossEntropyLoss::new()),
            NDArray::from_vec(classes, &[batch])?,
        )
    } else {
        let mut t = vec![0f32; batch * 10];
        for (i, c) in classes.iter().enumerate() {
            t[i * 10 + *c as usize] = 1.0;
        }
        (Box::new(L2Loss::new()), NDArray::from_vec(t, &[batch, 10])?)
    };
    let (loss, y) = (loss.as_ref(), y.to_device(dev)?);
    let nets = [mlp(), mlp(), mlp()];
    for n in &nets {
        n.initialize(&Initializer::xavier(), dev)?;
        autograd::pause(|| n.forward(&x))?;
    }
    // The same weights in all three (own buffers each: the graph's copy updates its own).
    let first = nets[0].collect_params()?;
    for n in &nets[1..] {
        let ps = n.collect_params()?;
        for (name, p) in first.iter() {
            if let Some(q) = ps.get(name) {
                q.set_data(&p.data()?.copy())?;
            }
        }
    }
    let mut ways = [
        Way::Eager,
        Way::Graph(HybridTrainStep::new(&nets[1], loss)),
        Way::Graph(HybridTrainStep::new(&nets[2], loss).with_cuda_graph(true)),
    ];
    let mut trainers = Vec::new();
    for n in &nets {
        trainers.push(Trainer::from_params(&n.collect_params()?, Sgd::new(0.01))?);
    }
    let mut last = [0.0f64; 3];
    // Host time spent in the captured way's optimizer calls (launches; nothing waits).
    let mut opt_host = 0.0f64;
    let mut step = |k: usize, way: &mut Way, tr: &mut Trainer| -> Result<NDArray> {
        let l = match way {
            Way::Eager => {
                let l = autograd::record(|| loss.forward(&nets[k].forward(&x)?, &y))?;
                l.backward()?;
                l
            }
            Way::Graph(s) => s.step(&x, &y)?,
        };
        let t0 = Instant::now();
        tr.step(batch)?;
        if k == 2 {
            opt_host += t0.elapsed().as_secs_f64();
        }
        Ok(l)
    };
    // Warm-up: the graph ways trace, plan and capture here.
    for _ in 0..3 {
        for (k, (w, t)) in ways.iter_mut().zip(trainers.iter_mut()).enumerate() {
            step(k, w, t)?;
        }
    }
    sync(dev)?;
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..a.rounds {
        for (k, (w, t)) in ways.iter_mut().zip(trainers.iter_mut()).enumerate() {
            let t0 = Instant::now();
            let mut l = None;
            for _ in 0..a.steps {
                l = Some(step(k, w, t)?);
            }
            sync(dev)?;
            times[k].push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
            if let Some(l) = l {
                let v = l.to_f64_vec();
                last[k] = v.iter().sum::<f64>() / v.len().max(1) as f64;
            }
        }
    }
    let opt_us = opt_host * 1e6 / (3 + a.rounds * a.steps) as f64;
    let [te, th, tc] = times.map(median);
    let runs = match &ways[2] {
        Way::Graph(s) => s.train_step().map(|t| t.cuda_graph_runs()),
        Way::Eager => None,
    };
    let name = if ce { "softmax CE" } else { "L2" };
    println!(
        "batch {batch:4}, {name:10}: step us: eager {te:8.1}  hybridized {th:8.1}  hybridized + \
         CUDA graph {tc:8.1}  (eager / graph {:.2}x, hybridized / graph {:.2}x); graph replays, \
         captures: {runs:?}; optimizer host us/step {opt_us:.1}",
        te / tc,
        th / tc
    );
    println!(
        "            mean loss after {} steps: eager {:.9}  hybridized {:.9}  graph {:.9}",
        3 + a.rounds * a.steps,
        last[0],
        last[1],
        last[2]
    );
    let tol = 1e-5 * last[0].abs().max(1.0);
    if (last[1] - last[0]).abs() > tol || (last[2] - last[0]).abs() > tol {
        return Err(sparrow::core::Error::arg(
            "cuda_graph",
            format!("the three ways disagree: {last:?}"),
        ));
    }
    // Where the captured step's time goes: the replay alone (forward + backward, no
    // optimizer; the weights stay as they are), synchronized per block as above.
    if let Way::Graph(s) = &mut ways[2] {
        let mut alone = Vec::new();
        for _ in 0..a.rounds {
            let t0 = Instant::now();
            for _ in 0..a.steps {
                s.step(&x, &y)?;
            }
            sync(dev)?;
            alone.push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
        }
        println!(
            "            captured forward + backward alone (no optimizer): {:.1} us/step",
            median(alone)
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let a = args();
    let dev = Device::Cuda(0);
    if !dev.is_available() {
        println!("cuda_graph: SKIPPED (no CUDA device: {dev:?} is not available)");
        return Ok(());
    }
    for batch in [32, 256] {
        for ce in [true, false] {
            run(batch, dev, ce, &a)?;
        }
    }
    Ok(())
}
