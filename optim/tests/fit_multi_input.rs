//! `Estimator::fit` with batches of several inputs (`MultiInput`): a two-input model trains
//! through `forward_multi`, equals the hand-written loop step for step, and a batch whose
//! inputs disagree on their rows, or a model with several outputs, is an error.

use sparrow_core::{autograd, device_test, Device, NDArray, Result};
use sparrow_nn::loss::{L2Loss, Loss};
use sparrow_nn::{Block, Initializer, SparseEmbedding};
use sparrow_optim::{Adam, Estimator, FitOptions, MultiInput, Trainer};

/// `score(u, i) = <user_u, item_i>`: two inputs, one output.
#[derive(Block)]
#[block(inputs = 2)]
struct Mf {
    user: SparseEmbedding,
    item: SparseEmbedding,
}

impl Mf {
    fn new() -> Mf {
        Mf {
            user: SparseEmbedding::new(12, 4),
            item: SparseEmbedding::new(9, 4),
        }
    }

    fn forward(&self, users: &NDArray, items: &NDArray) -> Result<NDArray> {
        let (u, i) = (self.user.forward(users)?, self.item.forward(items)?);
        u.mul(&i)?.sum(Some(&[1]), false)
    }
}

/// `(users, items, ratings)` of 8 batches of 6 from a rank-1 model.
fn batches() -> Vec<(Vec<NDArray>, NDArray)> {
    (0..8)
        .map(|b| {
            let us: Vec<f32> = (0..6).map(|k| ((b * 5 + k * 7) % 12) as f32).collect();
            let is: Vec<f32> = (0..6).map(|k| ((b * 3 + k * 4) % 9) as f32).collect();
            let r: Vec<f32> = us
                .iter()
                .zip(&is)
                .map(|(&u, &i)| ((u - 5.5) * (i - 4.0)) / 10.0)
                .collect();
            (
                vec![
                    NDArray::from_vec(us, &[6]).unwrap(),
                    NDArray::from_vec(is, &[6]).unwrap(),
                ],
                NDArray::from_vec(r, &[6]).unwrap(),
            )
        })
        .collect()
}

fn model() -> Mf {
    let m = Mf::new();
    m.initialize(&Initializer::Normal { sigma: 0.3 }, Device::current())
        .unwrap();
    m
}

fn weights(m: &Mf) -> Vec<Vec<f32>> {
    m.collect_params()
        .unwrap()
        .iter()
        .map(|(_, p)| p.data().unwrap().to_vec::<f32>().unwrap())
        .collect()
}

fn quiet(epochs: usize) -> FitOptions {
    FitOptions {
        epochs,
        progress: false,
        log: false,
        ..FitOptions::default()
    }
}

device_test! {
fn fit_trains_a_two_input_model_as_the_hand_written_loop_does() {
    let data = batches();
    let l2 = L2Loss::new();

    // fit over MultiInput, and the same steps by hand from the same starting weights.
    let fitted = model();
    let by_hand = model();
    let (fp, hp) = (fitted.collect_params().unwrap(), by_hand.collect_params().unwrap());
    for ((_, a), (_, b)) in fp.iter().zip(hp.iter()) {
        b.set_data(&a.data().unwrap().copy()).unwrap();
    }
    let mut trainer = Trainer::from_params(&fitted.collect_params().unwrap(), Adam::new(0.05)).unwrap();
    let d = data.clone();
    let mut source = MultiInput(move || d.clone().into_iter().map(Ok));
    let history = Estimator::new(&fitted, |p, y| l2.forward(p, y), &mut trainer)
        .fit(&mut source, None, &quiet(3))
        .unwrap();

    let mut trainer = Trainer::from_params(&by_hand.collect_params().unwrap(), Adam::new(0.05)).unwrap();
    for _ in 0..3 {
        for (inputs, label) in &data {
            let loss = autograd::record(|| {
                let out = by_hand.forward_multi(inputs)?;
                l2.forward(&out[0], label)?.sum_all()
            })
            .unwrap();
            loss.backward().unwrap();
            trainer.step(6).unwrap();
        }
    }
    assert_eq!(weights(&fitted), weights(&by_hand));
    let losses: Vec<f64> = history.iter().map(|s| s.get("loss").unwrap()).collect();
    assert!(losses[2] < losses[0] * 0.8, "loss did not fall: {losses:?}");
}
}

device_test! {
fn validation_runs_the_multi_input_model_too() {
    let data = batches();
    let l2 = L2Loss::new();
    let m = model();
    let mut trainer = Trainer::from_params(&m.collect_params().unwrap(), Adam::new(0.05)).unwrap();
    let (d, v) = (data.clone(), data[..2].to_vec());
    let mut train = MultiInput(move || d.clone().into_iter().map(Ok));
    let mut val = MultiInput(move || v.clone().into_iter().map(Ok));
    let history = Estimator::new(&m, |p, y| l2.forward(p, y), &mut trainer)
        .fit(&mut train, Some(&mut val), &quiet(2))
        .unwrap();
    // The validation loss is the model's mean loss over the 12 validation rows.
    let mut sum = 0.0;
    for (inputs, label) in &data[..2] {
        let out = m.forward_multi(inputs).unwrap();
        sum += l2.forward(&out[0], label).unwrap().sum_all().unwrap().item().unwrap();
    }
    let want = sum / 12.0;
    let got = history[1].get("val_loss").unwrap();
    assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{got} vs {want}");
}
}

device_test! {
fn inputs_that_disagree_on_their_rows_are_an_error_naming_the_input() {
    let l2 = L2Loss::new();
    let m = model();
    let mut trainer = Trainer::from_params(&m.collect_params().unwrap(), Adam::new(0.05)).unwrap();
    let mut source = MultiInput(|| {
        std::iter::once(Ok((
            vec![
                NDArray::from_vec(vec![0f32, 1., 2.], &[3]).unwrap(),
                NDArray::from_vec(vec![0f32, 1.], &[2]).unwrap(),
            ],
            NDArray::from_vec(vec![1f32, 0., 1.], &[3]).unwrap(),
        )))
    });
    let err = Estimator::new(&m, |p, y| l2.forward(p, y), &mut trainer)
        .fit(&mut source, None, &quiet(1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 1 of a batch has 2 rows and its labels 3"), "{err}");
}
}

/// `(a + b, a * b)`: two outputs.
struct SumProd;
impl Block for SumProd {
    fn forward_multi(&self, xs: &[NDArray]) -> Result<Vec<NDArray>> {
        let [a, b] = sparrow_nn::block::inputs(self.kind(), xs)?;
        Ok(vec![a.add(b)?, a.mul(b)?])
    }
    fn kind(&self) -> &'static str {
        "sumprod"
    }
}

device_test! {
fn a_model_with_several_outputs_is_an_error() {
    let l2 = L2Loss::new();
    let w = sparrow_nn::Parameter::new("w", &[1]);
    w.initialize(&Initializer::Constant(1.0), Device::current()).unwrap();
    let mut trainer = Trainer::new(vec![w], Adam::new(0.05)).unwrap();
    let mut source = MultiInput(|| {
        let x = NDArray::from_vec(vec![1f32, 2.], &[2]).unwrap();
        std::iter::once(Ok((vec![x.clone(), x.clone()], x)))
    });
    let err = Estimator::new(&SumProd, |p, y| l2.forward(p, y), &mut trainer)
        .fit(&mut source, None, &quiet(1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("the model returned 2 outputs for 2 inputs"), "{err}");
}
}
