//! Character-level LSTM language model (issue 28's recipe): Embedding (row_sparse gradient)
//! -> LSTM -> Dense over the characters, truncated backpropagation through time with the
//! hidden state carried (detached) across windows, Adam, global-norm clipping; reports the
//! held-out perplexity after each epoch. `examples/char_lm_torch.py` is the same model,
//! split, order and schedule in PyTorch.
//!
//! The corpus is a text file given by argument (`scripts/char_corpus.sh OUT` extracts the
//! one the recipe uses from a registry package); the last 10% is held out.
//!
//! `cargo run --release --example char_lm -- CORPUS [--epochs E] [--hidden H] [--max-chars M]`

use std::time::Instant;

use sparrow::core::{autograd, DType, Device, NDArray, Result};
use sparrow::nn::loss::{Loss, SoftmaxCrossEntropyLoss};
use sparrow::nn::{Block, Dense, Embedding, Initializer, LSTM};
use sparrow::optim::{Adam, Trainer};

const BATCH: usize = 32;
const BPTT: usize = 50;
const EMBED: usize = 32;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a whole number"))
        .unwrap_or(default)
}

/// `ids` cut into `BATCH` contiguous streams, as `(len, BATCH)` time-major rows.
fn batchify(ids: &[u32]) -> (Vec<f32>, usize) {
    let len = ids.len() / BATCH;
    let mut v = vec![0f32; len * BATCH];
    for b in 0..BATCH {
        for t in 0..len {
            v[t * BATCH + b] = ids[b * len + t] as f32;
        }
    }
    (v, len)
}

struct Model {
    embed: Embedding,
    lstm: LSTM,
    out: Dense,
}

impl Model {
    /// Logits `(T * BATCH, vocab)` and the final states for the window `x` `(T, BATCH)`.
    fn forward(&self, x: &NDArray, states: &[NDArray]) -> Result<(NDArray, Vec<NDArray>)> {
        let e = self.embed.forward(x)?;
        let (h, finals) = self.lstm.forward_with(&e, Some(states), None)?;
        let s = h.shape();
        let logits = self.out.forward(&h.reshape(&[s[0] * s[1], s[2]])?)?;
        Ok((logits, finals))
    }
}

/// Mean cross-entropy (nats per character) over the stream `data` (`(len, BATCH)`).
fn evaluate(m: &Model, data: &[f32], len: usize) -> Result<f64> {
    let loss = SoftmaxCrossEntropyLoss::new();
    let mut states = m.lstm.begin_state(BATCH)?;
    let (mut total, mut count) = (0.0, 0usize);
    let mut t0 = 0;
    while t0 + 1 < len {
        let t = BPTT.min(len - 1 - t0);
        let x = NDArray::from_vec(data[t0 * BATCH..(t0 + t) * BATCH].to_vec(), &[t, BATCH])?;
        let y = NDArray::from_vec(
            data[(t0 + 1) * BATCH..(t0 + 1 + t) * BATCH].to_vec(),
            &[t * BATCH],
        )?;
        let (logits, finals) = m.forward(&x, &states)?;
        total += loss.forward(&logits, &y)?.sum_all()?.item()?;
        count += t * BATCH;
        states = finals;
        t0 += t;
    }
    Ok(total / count as f64)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .filter(|a| !a.starts_with("--"))
        .unwrap_or_else(|| {
            eprintln!("usage: char_lm CORPUS [--epochs E] [--hidden H] [--max-chars M]");
            std::process::exit(2)
        });
    let (epochs, hidden) = (arg(&args, "--epochs", 3), arg(&args, "--hidden", 128));
    let text = std::fs::read(path).unwrap_or_else(|e| {
        eprintln!("cannot read {path}: {e}");
        std::process::exit(2)
    });
    let text = &text[..text.len().min(arg(&args, "--max-chars", usize::MAX))];
    // The vocabulary: the bytes that occur, in byte order (the PyTorch script does the same).
    let mut seen = [false; 256];
    text.iter().for_each(|&b| seen[b as usize] = true);
    let alphabet: Vec<u8> = (0..=255u8).filter(|&b| seen[b as usize]).collect();
    let mut index = [0u32; 256];
    for (i, &b) in alphabet.iter().enumerate() {
        index[b as usize] = i as u32;
    }
    let ids: Vec<u32> = text.iter().map(|&b| index[b as usize]).collect();
    let split = ids.len() * 9 / 10;
    let (train, train_len) = batchify(&ids[..split]);
    let (valid, valid_len) = batchify(&ids[split..]);
    let vocab = alphabet.len();

    sparrow::nn::init::seed(7);
    let m = Model {
        embed: Embedding::with_options(vocab, EMBED, true, DType::F32),
        lstm: LSTM::new(hidden).input_size(EMBED),
        out: Dense::new(vocab).in_units(hidden),
    };
    let init = Initializer::Uniform { scale: 0.1 };
    for b in [&m.embed as &dyn Block, &m.lstm, &m.out] {
        b.initialize(&init, Device::Cpu)?;
    }
    let mut params = m.embed.collect_params()?;
    for (n, p) in m.lstm.collect_params()?.iter() {
        params.insert(format!("lstm.{n}"), p.clone())?;
    }
    for (n, p) in m.out.collect_params()?.iter() {
        params.insert(format!("out.{n}"), p.clone())?;
    }
    // Standard (non-lazy) row_sparse Adam: the same rule as PyTorch's dense Adam.
    let mut trainer = Trainer::from_params(&params, Adam::new(2e-3).lazy(false))?;
    let loss = SoftmaxCrossEntropyLoss::new();
    println!(
        "corpus {path}: {} chars, vocab {vocab}, train {} x {BATCH}, valid {} x {BATCH}; \
         LSTM {EMBED} -> {hidden}, bptt {BPTT}, Adam 2e-3, clip 1.0",
        text.len(),
        train_len,
        valid_len
    );
    for epoch in 0..epochs {
        let start = Instant::now();
        let mut states = m.lstm.begin_state(BATCH)?;
        let (mut total, mut count) = (0.0, 0usize);
        let mut t0 = 0;
        while t0 + 1 < train_len {
            let t = BPTT.min(train_len - 1 - t0);
            let x = NDArray::from_vec(train[t0 * BATCH..(t0 + t) * BATCH].to_vec(), &[t, BATCH])?;
            let y = NDArray::from_vec(
                train[(t0 + 1) * BATCH..(t0 + 1 + t) * BATCH].to_vec(),
                &[t * BATCH],
            )?;
            let (l, finals) = autograd::record(|| {
                let (logits, finals) = m.forward(&x, &states)?;
                Ok::<_, sparrow::core::Error>((
                    loss.forward(&logits, &y)?.mean(None, false)?,
                    finals,
                ))
            })?;
            l.backward()?;
            trainer.clip_global_norm(1.0)?;
            trainer.step(1)?;
            total += l.item()? * (t * BATCH) as f64;
            count += t * BATCH;
            states = finals.iter().map(NDArray::detach).collect();
            t0 += t;
        }
        let train_ce = total / count as f64;
        let valid_ce = evaluate(&m, &valid, valid_len)?;
        println!(
            "epoch {}: train ppl {:.3}, valid ppl {:.3} ({:.3} bits/char), {:.1} s",
            epoch + 1,
            train_ce.exp(),
            valid_ce.exp(),
            valid_ce / std::f64::consts::LN_2,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
