//! `Estimator::fit` with multi-input batches: a closure source yielding
//! `((user ids, item ids), rating)` batches feeds a two-input block through `forward_multi`,
//! trains it exactly as the hand-written loop over the same batches does, validates on a
//! multi-input source, and refuses batches without inputs or blocks that give several
//! outputs.

use sparrow_core::autograd;
use sparrow_core::{Device, NDArray, Result};
use sparrow_nn::loss::{L2Loss, Loss};
use sparrow_nn::{Block, Dense, Initializer, SparseEmbedding};
use sparrow_optim::*;

/// `score(u, i) = <user_u, item_i>`.
#[derive(Block)]
#[block(inputs = 2)]
struct Mf {
    user: SparseEmbedding,
    item: SparseEmbedding,
}

impl Mf {
    fn new() -> Mf {
        Mf {
            user: SparseEmbedding::new(20, 3),
            item: SparseEmbedding::new(15, 3),
        }
    }
    fn forward(&self, u: &NDArray, i: &NDArray) -> Result<NDArray> {
        let (a, b) = (self.user.forward(u)?, self.item.forward(i)?);
        a.mul(&b)?.sum(Some(&[1]), false)
    }
}

/// Two inputs, two outputs.
#[derive(Block)]
#[block(inputs = 2)]
struct TwoHeads {
    head: Dense,
}

impl TwoHeads {
    fn forward(&self, a: &NDArray, b: &NDArray) -> Result<(NDArray, NDArray)> {
        Ok((self.head.forward(a)?, self.head.forward(b)?))
    }
}

/// `n` ratings of a rank-2 model: `(users, items, ratings)`.
fn ratings(n: usize, seed: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let p = |u: usize| {
        [
            ((u * 7) % 5) as f32 / 5.0 - 0.4,
            ((u * 3) % 4) as f32 / 4.0 - 0.3,
        ]
    };
    let q = |i: usize| {
        [
            ((i * 5) % 7) as f32 / 7.0 - 0.5,
            ((i * 2) % 3) as f32 / 3.0 - 0.3,
        ]
    };
    let (mut us, mut is, mut rs) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..n {
        let (u, i) = ((k * 13 + seed) % 20, (k * 7 + 3 * seed) % 15);
        let (a, b) = (p(u), q(i));
        us.push(u as f32);
        is.push(i as f32);
        rs.push(4.0 * (a[0] * b[0] + a[1] * b[1]));
    }
    (us, is, rs)
}

type Batch = ((NDArray, NDArray), NDArray);

/// The batches of `batch` ratings, in order.
fn batches(data: &(Vec<f32>, Vec<f32>, Vec<f32>), batch: usize) -> Vec<Batch> {
    let (us, is, rs) = data;
    (0..us.len())
        .step_by(batch)
        .map(|s| {
            let e = (s + batch).min(us.len());
            let a = |v: &[f32]| NDArray::from_vec(v[s..e].to_vec(), &[e - s]).unwrap();
            ((a(us), a(is)), a(rs))
        })
        .collect()
}

/// A closure source over `b`, a fresh pass each epoch.
fn source(b: Vec<Batch>) -> impl FnMut() -> std::vec::IntoIter<Result<Batch>> {
    move || {
        b.iter()
            .map(|((u, i), r)| Ok(((u.clone(), i.clone()), r.clone())))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

fn quiet(epochs: usize) -> FitOptions {
    FitOptions {
        epochs,
        progress: false,
        log: false,
        ..FitOptions::default()
    }
}

fn params_f32(m: &Mf) -> Vec<Vec<u32>> {
    m.collect_params()
        .unwrap()
        .iter()
        .map(|(_, p)| {
            p.data()
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

#[test]
fn fit_trains_a_two_input_block_as_the_hand_written_loop_does() {
    let train = batches(&ratings(300, 0), 32);
    let val = batches(&ratings(60, 1), 16);
    let a = Mf::new();
    a.initialize(&Initializer::Normal { sigma: 0.3 }, Device::Cpu)
        .unwrap();
    let b = Mf::new();
    b.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    for ((_, pa), (_, pb)) in a
        .collect_params()
        .unwrap()
        .iter()
        .zip(b.collect_params().unwrap().iter())
    {
        pb.set_data(&pa.data().unwrap().copy()).unwrap();
    }
    let l2 = L2Loss::new();
    let epochs = 25;

    let mut ta = Trainer::from_params(&a.collect_params().unwrap(), Adam::new(0.05)).unwrap();
    let history = {
        let mut est = Estimator::new(&a, |p, y| l2.forward(p, y), &mut ta);
        let mut tr = source(train.clone());
        let mut va = source(val);
        est.fit(&mut tr, Some(&mut va), &quiet(epochs)).unwrap()
    };
    // Learned: the training loss fell well below the first epoch's, and validation ran on
    // the two-input batches every epoch.
    let first = history[0].get("loss").unwrap();
    let last = history[epochs - 1].get("loss").unwrap();
    assert!(last < 0.2 * first, "loss {first} -> {last}");
    assert!(history
        .iter()
        .all(|h| h.get("val_loss").is_some_and(f64::is_finite)));

    // The same batches through record / backward / step by hand: the same bits.
    let mut tb = Trainer::from_params(&b.collect_params().unwrap(), Adam::new(0.05)).unwrap();
    for _ in 0..epochs {
        for ((u, i), r) in &train {
            let total = autograd::record(|| l2.forward(&b.forward(u, i)?, r)?.sum_all()).unwrap();
            total.backward().unwrap();
            tb.step(u.shape()[0]).unwrap();
        }
    }
    assert_eq!(params_f32(&a), params_f32(&b));
}

#[test]
fn multi_input_batches_are_checked() {
    let l2 = L2Loss::new();
    let train = batches(&ratings(40, 0), 20);
    // Several outputs: fit needs one prediction.
    let two = TwoHeads {
        head: Dense::new(1).in_units(1),
    };
    two.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut t = Trainer::from_params(&two.collect_params().unwrap(), Sgd::new(0.1)).unwrap();
    let mut est = Estimator::new(&two, |p, y| l2.forward(p, y), &mut t);
    let col = |v: &NDArray| v.reshape(&[v.shape()[0], 1]).unwrap();
    let cols: Vec<Batch> = train
        .iter()
        .map(|((u, i), r)| ((col(u), col(i)), r.clone()))
        .collect();
    let e = est
        .fit(&mut source(cols), None, &quiet(1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gave 2 outputs") && e.contains("one prediction"),
        "{e}"
    );

    // Two inputs into a one-input block: the block's own error.
    let one = Dense::new(1).in_units(1);
    one.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut t = Trainer::from_params(&one.collect_params().unwrap(), Sgd::new(0.1)).unwrap();
    let mut est = Estimator::new(&one, |p, y| l2.forward(p, y), &mut t);
    let cols: Vec<Batch> = train
        .iter()
        .map(|((u, i), r)| ((col(u), col(i)), r.clone()))
        .collect();
    let e = est
        .fit(&mut source(cols), None, &quiet(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("takes 1 input, got 2"), "{e}");

    // A batch with no input arrays at all.
    let r = train[0].1.clone();
    let mut empty = move || vec![Ok((Vec::<NDArray>::new(), r.clone()))].into_iter();
    let e = est
        .fit(&mut empty, None, &quiet(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("holds no input arrays"), "{e}");

    // Inputs whose rows are not the labels' (3 ids for 2 labels).
    let ids = NDArray::from_vec(vec![0f32, 1., 2.], &[3, 1]).unwrap();
    let labels = NDArray::from_vec(vec![1f32, 0.], &[2]).unwrap();
    let mut short = move || vec![Ok((ids.clone(), labels.clone()))].into_iter();
    let e = est
        .fit(&mut short, None, &quiet(1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input 0 of a batch has shape [3, 1] and the labels [2]"),
        "{e}"
    );
    // The weights never moved.
    assert_eq!(
        one.weight().data().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0]
    );
}
