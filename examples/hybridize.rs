//! Eager against hybridized (`sparrow::nn::Hybridize`): step time, allocations and peak heap
//! bytes per step, and the memory plan of a deep MLP.
//!
//! ```text
//! cargo run --release --example hybridize -- [--steps 30] [--rounds 5]
//! ```
//!
//! * `mlp`: 784-512-512-10 (relu), batch 256: one inference forward (hybridized: the graph's
//!   executor, buffers reused across calls), and one training step with softmax cross-entropy
//!   and SGD.
//! * `tutorial`: the sparse tutorial's variant (c) model on a synthetic csr batch (10 rows of
//!   1,000,000 features, 10 non-zeros a row): Dense(128, sigmoid, row_sparse weight gradient),
//!   Dense(8, sigmoid), Dense(1, sigmoid), sigmoid BCE, lazy SGD.
//! * `lstm`: LSTM(128) over 35 steps of 128 features (`NTC`), batch 32, then Dense(10) over
//!   the flattened output, softmax cross-entropy and SGD.
//! * `mlp20`: a 20-layer MLP (512 wide, relu), batch 256: peak heap bytes above the
//!   parameters of one inference forward and of one training step, eager and hybridized, and
//!   the graph's memory plan (intermediates kept by a run that holds them all, the peak with
//!   release after the last reader, and the planned peak with buffer sharing and in-place),
//!   and the joint graph step's time and planned activation memory with every activation kept
//!   and with recomputation from checkpoints (`Recompute::Sqrt`).
//!
//! Eager and hybridized steps alternate in rounds (so drift hits both); each figure is the
//! median over rounds of the per-step mean. Allocations and peaks come from a counting global
//! allocator around the system one.
//!
//! With `SPARROW_ALLOC_SITES=1` in the environment, the measured graph training step of each
//! model also names its allocation sites: each allocation's call stack (the frames of sparrow's
//! own functions) is captured and the distinct stacks are printed with their counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use sparrow::core::graph::{Executor, Graph, MemoryPlan, Recompute};
use sparrow::core::{autograd, DType, Device, NDArray, Result, SType};
use sparrow::nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss, SoftmaxCrossEntropyLoss};
use sparrow::nn::{
    Block, Dense, HybridTrainStep, Hybridize, Initializer, Layout as SeqLayout, Sequential, LSTM,
};
use sparrow::optim::{Sgd, Trainer};

/// The system allocator, counting allocations and live bytes (and their peak).
struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
    site();
}

/// Capture allocation sites (`SPARROW_ALLOC_SITES`) while set.
static SITES_ON: AtomicBool = AtomicBool::new(false);
/// The captured call stacks (sparrow frames only, innermost first).
static SITES: Mutex<Vec<String>> = Mutex::new(Vec::new());

thread_local! {
    /// Set while this thread captures a stack (whose own allocations are not sites).
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

/// Record the call stack of the allocation being made, when capture is on.
fn site() {
    if !SITES_ON.load(Ordering::Relaxed) || CAPTURING.with(|c| c.replace(true)) {
        return;
    }
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    // Frames of sparrow's functions (the allocator's own and the standard library's dropped),
    // as `name` lines: the innermost few name the site.
    let frames: Vec<&str> = bt
        .lines()
        .map(str::trim)
        .filter_map(|l| l.split_once(": ").map(|(_, f)| f))
        .filter(|f| f.contains("sparrow") && !f.contains("hybridize::"))
        .take(4)
        .collect();
    let key = if frames.is_empty() {
        "(outside sparrow)".to_string()
    } else {
        frames.join("\n      <- ")
    };
    SITES.lock().map(|mut v| v.push(key)).ok();
    CAPTURING.with(|c| c.set(false));
}

/// Run `f` with allocation sites captured (when `SPARROW_ALLOC_SITES` is set) and print them.
fn with_sites<R>(name: &str, f: impl FnOnce() -> R) -> R {
    if std::env::var_os("SPARROW_ALLOC_SITES").is_none() {
        return f();
    }
    SITES_ON.store(true, Ordering::SeqCst);
    let r = f();
    SITES_ON.store(false, Ordering::SeqCst);
    let sites = std::mem::take(&mut *SITES.lock().expect("not poisoned"));
    let mut counts: Vec<(String, usize)> = Vec::new();
    for s in sites {
        match counts.iter_mut().find(|(k, _)| *k == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s, 1)),
        }
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    println!("{name:9} allocation sites of one graph training step:");
    for (s, n) in counts {
        println!("  {n:4} x {s}");
    }
    r
}

// SAFETY: every call forwards to the system allocator with the same layout; the counters are
// bookkeeping only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        grow(l.size());
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        grow(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        grow(n);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and peak live bytes above the starting level while `f` runs.
fn measure<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let a0 = ALLOCS.load(Ordering::Relaxed);
    let r = f();
    let allocs = ALLOCS.load(Ordering::Relaxed) - a0;
    (r, allocs, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Args {
    steps: usize,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args {
        steps: 30,
        rounds: 5,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for w in v.chunks(2) {
        let n = w.get(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: hybridize [--steps N] [--rounds N]");
            std::process::exit(2)
        });
        match w[0].as_str() {
            "--steps" => a.steps = n,
            "--rounds" => a.rounds = n,
            other => {
                eprintln!("unknown flag {other}; usage: hybridize [--steps N] [--rounds N]");
                std::process::exit(2)
            }
        }
    }
    a
}

/// One training step: forward and loss under `record`, backward, optimizer step.
fn train_step(
    net: &dyn Block,
    loss: &dyn Loss,
    tr: &mut Trainer,
    x: &NDArray,
    y: &NDArray,
) -> Result<()> {
    let l = autograd::record(|| loss.forward(&net.forward(x)?, y)?.sum_all())?;
    l.backward()?;
    tr.step(x.shape()[0])
}

/// Time, allocations and peak bytes per training step of `eager` and `hybrid` (same model,
/// two copies with the same seed-independent initialization: both start from the same
/// weights copied over).
fn compare(
    name: &str,
    eager: &dyn Block,
    hybrid: &dyn Block,
    loss: &dyn Loss,
    x: &NDArray,
    y: &NDArray,
    a: &Args,
) -> Result<()> {
    let sgd = || Sgd::new(0.01);
    let mut te = Trainer::from_params(&eager.collect_params()?, sgd())?;
    let mut th = Trainer::from_params(&hybrid.collect_params()?, sgd())?;
    for _ in 0..3 {
        train_step(eager, loss, &mut te, x, y)?;
        train_step(hybrid, loss, &mut th, x, y)?;
    }
    let (mut t_e, mut t_h) = (Vec::new(), Vec::new());
    let (mut al_e, mut al_h, mut pk_e, mut pk_h) = (0, 0, 0, 0);
    for _ in 0..a.rounds {
        for (times, tr, net, al, pk) in [
            (&mut t_e, &mut te, eager, &mut al_e, &mut pk_e),
            (&mut t_h, &mut th, hybrid, &mut al_h, &mut pk_h),
        ] {
            let t0 = Instant::now();
            for _ in 0..a.steps {
                train_step(net, loss, tr, x, y)?;
            }
            times.push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
            let (r, n, p) = measure(|| train_step(net, loss, tr, x, y));
            r?;
            *al = n;
            *pk = p;
        }
    }
    let (me, mh) = (median(t_e), median(t_h));
    println!(
        "{name:9} step us: eager {me:9.1}  hybridized {mh:9.1}  (eager/hybridized {:.3});  \
         allocations/step: eager {al_e}, hybridized {al_h};  peak heap/step: eager {:.2} MB, \
         hybridized {:.2} MB",
        me / mh,
        pk_e as f64 / 1e6,
        pk_h as f64 / 1e6
    );
    Ok(())
}

/// Time, allocations and peak bytes per training step, eager (`record` + `backward`) against
/// the joint forward + backward graph (`HybridTrainStep`), each followed by `Trainer::step`;
/// `eager` and `graph` are two copies of one model with the same weights. Eager and graph
/// rounds alternate.
fn compare_graph_train(
    name: &str,
    eager: &dyn Block,
    graph: &dyn Block,
    loss: &dyn Loss,
    x: &NDArray,
    y: &NDArray,
    a: &Args,
) -> Result<()> {
    let batch = x.shape()[0];
    let sgd = || Sgd::new(0.01);
    let mut te = Trainer::from_params(&eager.collect_params()?, sgd())?;
    let mut tg = Trainer::from_params(&graph.collect_params()?, sgd())?;
    let mut step = HybridTrainStep::new(graph, loss);
    let eager_step = |tr: &mut Trainer| -> Result<()> {
        let l = autograd::record(|| loss.forward(&eager.forward(x)?, y))?;
        l.backward()?;
        tr.step(batch)
    };
    for _ in 0..3 {
        eager_step(&mut te)?;
        step.step(x, y)?;
        tg.step(batch)?;
    }
    let (mut t_e, mut t_g) = (Vec::new(), Vec::new());
    // Allocations over every timed step (all threads; rayon's queue grows by a block now and
    // then, so a single step's count would be 0 or 1 by chance).
    let (mut al_e, mut al_g, mut pk_e, mut pk_g) = (0, 0, 0, 0);
    for _ in 0..a.rounds {
        let (t0, a0) = (Instant::now(), ALLOCS.load(Ordering::Relaxed));
        for _ in 0..a.steps {
            eager_step(&mut te)?;
        }
        t_e.push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
        al_e += ALLOCS.load(Ordering::Relaxed) - a0;
        let (r, _, p) = measure(|| eager_step(&mut te));
        r?;
        pk_e = p;
        let (t0, a0) = (Instant::now(), ALLOCS.load(Ordering::Relaxed));
        for _ in 0..a.steps {
            step.step(x, y)?;
            tg.step(batch)?;
        }
        t_g.push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
        al_g += ALLOCS.load(Ordering::Relaxed) - a0;
        let (r, _, p) = measure(|| -> Result<()> {
            step.step(x, y)?;
            tg.step(batch)
        });
        if t_g.len() == a.rounds {
            with_sites(name, || -> Result<()> {
                step.step(x, y)?;
                tg.step(batch)
            })?;
        }
        r?;
        pk_g = p;
    }
    let steps = (a.rounds * a.steps) as f64;
    let (al_e, al_g) = (al_e as f64 / steps, al_g as f64 / steps);
    if let Some(ts) = step.train_step() {
        let plan = ts.plan();
        println!(
            "{name:9} joint graph: {} forward + {} backward nodes; planned {:.2} MB in {} \
             buffers ({} in place), every value kept {:.2} MB; nodes that allocate: {:?}",
            ts.forward_nodes(),
            ts.graph().nodes().len() - ts.forward_nodes(),
            plan.planned_bytes() as f64 / 1e6,
            plan.slot_bytes.len(),
            plan.in_place,
            plan.total_bytes as f64 / 1e6,
            ts.fallback_ops()
        );
    }
    for r in step.fallback_reasons() {
        println!("{name:9} {r}");
    }
    let (me, mg) = (median(t_e.clone()), median(t_g.clone()));
    let range = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        format!("{lo:.1}-{hi:.1}")
    };
    println!(
        "{name:9} graph training step us: eager {me:9.1} ({})  graph {mg:9.1} ({})  \
         (eager/graph {:.3});  allocations/step (mean): eager {al_e:.1}, graph {al_g:.2};  peak \
         heap/step: eager {:.2} MB, graph {:.2} MB",
        range(&t_e),
        range(&t_g),
        me / mg,
        pk_e as f64 / 1e6,
        pk_g as f64 / 1e6
    );
    Ok(())
}

/// Time, allocations and peak bytes per inference forward (nothing recorded) of `eager` and
/// `hybrid`; the outputs are dropped before the next call, so a hybridized forward can reuse
/// its output buffer (see `sparrow_core::graph::Executor`).
fn compare_inference(
    name: &str,
    eager: &dyn Block,
    hybrid: &dyn Block,
    hybrid_graph: Option<Arc<Graph>>,
    x: &NDArray,
    a: &Args,
) -> Result<()> {
    let step = |net: &dyn Block| -> Result<()> {
        autograd::pause(|| net.forward(x))?;
        Ok(())
    };
    for _ in 0..3 {
        step(eager)?;
        step(hybrid)?;
    }
    let (mut t_e, mut t_h) = (Vec::new(), Vec::new());
    let (mut al_e, mut al_h, mut pk_e, mut pk_h) = (0, 0, 0, 0);
    for _ in 0..a.rounds {
        for (times, net, al, pk) in [
            (&mut t_e, eager, &mut al_e, &mut pk_e),
            (&mut t_h, hybrid, &mut al_h, &mut pk_h),
        ] {
            let t0 = Instant::now();
            for _ in 0..a.steps {
                step(net)?;
            }
            times.push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
            let (r, n, p) = measure(|| step(net));
            r?;
            *al = n;
            *pk = p;
        }
    }
    let (me, mh) = (median(t_e), median(t_h));
    if let Some(g) = hybrid_graph {
        let e = Executor::new(g);
        println!(
            "{name:9} graph: {} nodes, {} fused map chains, nodes that allocate (no planned \
             form): {:?}",
            e.graph().nodes().len(),
            e.fused_chains().len(),
            e.fallback_ops()
        );
    }
    println!(
        "{name:9} inference us: eager {me:9.1}  hybridized {mh:9.1}  (eager/hybridized {:.3});  \
         allocations/forward: eager {al_e}, hybridized {al_h};  peak heap/forward: eager {:.2} \
         MB, hybridized {:.2} MB",
        me / mh,
        pk_e as f64 / 1e6,
        pk_h as f64 / 1e6
    );
    Ok(())
}

fn copy_params(from: &dyn Block, to: &dyn Block) -> Result<()> {
    let (f, t) = (from.collect_params()?, to.collect_params()?);
    for (n, p) in f.iter() {
        if let Some(q) = t.get(n) {
            q.set_data(&p.data()?)?;
        }
    }
    Ok(())
}

fn mlp(widths: &[usize], grad_first: SType) -> Sequential {
    let mut s = Sequential::new();
    for (i, &w) in widths.iter().enumerate() {
        let last = i + 1 == widths.len();
        let mut d = Dense::new(w);
        if !last {
            d = d.activation("relu");
        }
        if i == 0 {
            d = d.grad_stype(grad_first);
        }
        s.add(d);
    }
    s
}

fn main() -> Result<()> {
    let a = args();
    println!("threads: {}", rayon::current_num_threads());
    // 784-512-512-10, batch 256.
    let x = sparrow::core::testing::test_array(&[256, 784], -1.0, 1.0, 1).astype(DType::F32)?;
    let y = NDArray::from_vec((0..256).map(|i| (i % 10) as f32).collect(), &[256])?;
    let eager = mlp(&[512, 512, 10], SType::Dense);
    let hybrid = mlp(&[512, 512, 10], SType::Dense).hybridize();
    for n in [&eager as &dyn Block, &hybrid] {
        n.initialize(&Initializer::xavier(), Device::Cpu)?;
        autograd::pause(|| n.forward(&x))?;
    }
    copy_params(&eager, &hybrid)?;
    compare_inference("mlp", &eager, &hybrid, hybrid.graph(), &x, &a)?;
    compare(
        "mlp",
        &eager,
        &hybrid,
        &SoftmaxCrossEntropyLoss::new(),
        &x,
        &y,
        &a,
    )?;
    copy_params(&eager, &hybrid)?;
    compare_graph_train(
        "mlp",
        &eager,
        hybrid.inner(),
        &SoftmaxCrossEntropyLoss::new(),
        &x,
        &y,
        &a,
    )?;

    // The tutorial's (c) model on a synthetic csr batch.
    let xc = sparrow::core::testing::test_csr(10, 1_000_000, 1e-5, 3, DType::F32);
    // Grouped by column ahead, as `LibSVMIter` does for every batch on its producer thread.
    xc.prepare_csr_transpose();
    let yc = NDArray::from_vec((0..10).map(|i| (i % 2) as f32).collect(), &[10])?;
    let tut = |h: bool| {
        let mut s = Sequential::new();
        s.add(
            Dense::new(128)
                .activation("sigmoid")
                .grad_stype(SType::RowSparse),
        );
        s.add(Dense::new(8).in_units(128).activation("sigmoid"));
        s.add(Dense::new(1).in_units(8).activation("sigmoid"));
        (s, h)
    };
    let (te, _) = tut(false);
    let th = tut(true).0.hybridize();
    for n in [&te as &dyn Block, &th] {
        n.initialize(&Initializer::xavier(), Device::Cpu)?;
        autograd::pause(|| n.forward(&xc))?;
    }
    copy_params(&te, &th)?;
    compare_inference("tutorial", &te, &th, th.graph(), &xc, &a)?;
    compare(
        "tutorial",
        &te,
        &th,
        &SigmoidBinaryCrossEntropyLoss::new(),
        &xc,
        &yc,
        &a,
    )?;
    copy_params(&te, &th)?;
    compare_graph_train(
        "tutorial",
        &te,
        th.inner(),
        &SigmoidBinaryCrossEntropyLoss::new(),
        &xc,
        &yc,
        &a,
    )?;

    // A recurrent model: LSTM(128) over 35 steps (NTC), a Dense head over its flattened
    // output.
    let (n, t, width) = (32, 35, 128);
    let xl = sparrow::core::testing::test_array(&[n, t, width], -1.0, 1.0, 4).astype(DType::F32)?;
    let yl = NDArray::from_vec((0..n).map(|i| (i % 10) as f32).collect(), &[n])?;
    let lstm = || {
        let mut s = Sequential::new();
        s.add(LSTM::new(width).input_size(width).layout(SeqLayout::Ntc));
        s.add(Dense::new(10));
        s
    };
    let le = lstm();
    let lh = lstm().hybridize();
    for n in [&le as &dyn Block, &lh] {
        n.initialize(&Initializer::Uniform { scale: 0.08 }, Device::Cpu)?;
        autograd::pause(|| n.forward(&xl))?;
    }
    copy_params(&le, &lh)?;
    compare_inference("lstm", &le, &lh, lh.graph(), &xl, &a)?;
    let ce = SoftmaxCrossEntropyLoss::new();
    compare("lstm", &le, &lh, &ce, &xl, &yl, &a)?;
    copy_params(&le, &lh)?;
    compare_graph_train("lstm", &le, lh.inner(), &ce, &xl, &yl, &a)?;

    // Memory of a 20-layer MLP.
    let widths = [512; 20];
    let x = sparrow::core::testing::test_array(&[256, 512], -1.0, 1.0, 2).astype(DType::F32)?;
    let y = NDArray::from_vec((0..256).map(|i| (i % 512) as f32).collect(), &[256])?;
    let eager = mlp(&widths, SType::Dense);
    let hybrid = mlp(&widths, SType::Dense).hybridize();
    let loss = SoftmaxCrossEntropyLoss::new();
    for n in [&eager as &dyn Block, &hybrid] {
        n.initialize(&Initializer::xavier(), Device::Cpu)?;
        // Warm-up: both signatures (inference and training) traced, pools filled.
        for _ in 0..2 {
            autograd::pause(|| n.forward(&x))?;
            let l = autograd::record(|| loss.forward(&n.forward(&x)?, &y)?.sum_all())?;
            l.backward()?;
        }
    }
    // The joint graph step, keeping every activation the backward reads and recomputing them
    // from checkpoints (`Recompute::Sqrt`): step time (eager and both graph steps in
    // alternating rounds) and planned activation memory.
    let (r, _, act_eager) = measure(|| autograd::record(|| loss.forward(&eager.forward(&x)?, &y)));
    drop(r?);
    let modes = [Recompute::Off, Recompute::Sqrt];
    let mut steps: Vec<HybridTrainStep> = modes
        .iter()
        .map(|&m| HybridTrainStep::new(hybrid.inner(), &loss).with_recompute(m))
        .collect();
    let mut heap = Vec::new();
    for st in steps.iter_mut() {
        for _ in 0..3 {
            st.step(&x, &y)?;
        }
        let (r, n, p) = measure(|| st.step(&x, &y));
        r?;
        heap.push((n, p));
    }
    let (mut t_e, mut t_g) = (Vec::new(), vec![Vec::new(); modes.len()]);
    for _ in 0..a.rounds {
        let t0 = Instant::now();
        for _ in 0..a.steps {
            let l = autograd::record(|| loss.forward(&eager.forward(&x)?, &y)?.sum_all())?;
            l.backward()?;
        }
        t_e.push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
        for (st, t) in steps.iter_mut().zip(t_g.iter_mut()) {
            let t0 = Instant::now();
            for _ in 0..a.steps {
                st.step(&x, &y)?;
            }
            t.push(t0.elapsed().as_secs_f64() * 1e6 / a.steps as f64);
        }
    }
    let time_eager = median(t_e);
    println!(
        "mlp20 eager: activations held for the backward (heap peak of the recorded forward) \
         {:.2} MB; forward + backward {time_eager:.0} us",
        act_eager as f64 / 1e6
    );
    for (((mode, st), t), (n_g, p_g)) in modes.iter().zip(&steps).zip(t_g).zip(heap) {
        let Some(ts) = st.train_step() else {
            continue;
        };
        let plan = ts.plan();
        let tm = median(t);
        println!(
            "mlp20 graph step, recompute {mode:?}: {tm:.0} us (eager/graph {:.3}); planned \
             activations {:.2} MB (peak of live activations {:.2} MB), all planned buffers \
             {:.2} MB in {} ({} in place); every value kept {:.2} MB; heap above the plan {:.2} \
             MB ({n_g} allocations); {:?}",
            time_eager / tm,
            MemoryPlan::activation_bytes(ts.graph()) as f64 / 1e6,
            plan.activation_peak_bytes as f64 / 1e6,
            plan.planned_bytes() as f64 / 1e6,
            plan.slot_bytes.len(),
            plan.in_place,
            plan.total_bytes as f64 / 1e6,
            p_g as f64 / 1e6,
            ts.recompute()
        );
    }
    for (name, net) in [("eager", &eager as &dyn Block), ("hybridized", &hybrid)] {
        let (r, n_inf, p_inf) = measure(|| autograd::pause(|| net.forward(&x)));
        r?;
        let (r, n_tr, p_tr) = measure(|| -> Result<()> {
            let l = autograd::record(|| loss.forward(&net.forward(&x)?, &y)?.sum_all())?;
            l.backward()
        });
        r?;
        println!(
            "mlp20 {name:10}: inference peak {:.2} MB ({n_inf} allocations); training step \
             (forward + backward) peak {:.2} MB ({n_tr} allocations)",
            p_inf as f64 / 1e6,
            p_tr as f64 / 1e6
        );
    }
    let g = hybrid.graph().expect("traced");
    let plan = MemoryPlan::of(&g);
    println!(
        "mlp20 plan: intermediates all kept {:.2} MB; released after last reader {:.2} MB; \
         planned (shared buffers, {} in place) {:.2} MB in {} buffers, {} nodes without a \
         planned form ({:.2} MB)",
        plan.total_bytes as f64 / 1e6,
        plan.live_peak_bytes as f64 / 1e6,
        plan.in_place,
        plan.planned_bytes() as f64 / 1e6,
        plan.slot_bytes.len(),
        plan.fallback.len(),
        plan.fallback_bytes(&g) as f64 / 1e6
    );
    Ok(())
}
