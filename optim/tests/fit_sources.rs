//! `Estimator::fit` over sparrow-data's sources directly: LibSVMIter, CSVIter, NDArrayIter and
//! DataLoader, with validation, padding, missing labels, data errors and the epoch log line.

use std::path::PathBuf;

use sparrow_core::{device_test, Device, Error, NDArray};
use sparrow_data::csv::{CSVIter, CSVIterParams};
use sparrow_data::dataset::{DataLoader, TensorDataset};
use sparrow_data::libsvm::{LibSVMIter, LibSVMIterParams};
use sparrow_data::{LastBatch, NDArrayIter};
use sparrow_nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow_nn::{Block, Dense, Initializer};
use sparrow_optim::fit::log_line;
use sparrow_optim::*;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sparrow-fit-src-{}-{name}", std::process::id()))
}

/// Rows with label 1 exactly when feature 0 is positive.
fn write_separable(path: &PathBuf, rows: usize) {
    let mut text = String::new();
    for i in 0..rows {
        let v = ((i * 37) % 19) as f32 - 9.0;
        let label = (v > 0.0) as u8;
        text += &format!("{label} 0:{v} {}:1\n", 1 + i % 7);
    }
    std::fs::write(path, text).unwrap();
}

/// Counts label rows seen (a metric that checks what fit feeds the metrics).
#[derive(Clone, Default)]
struct Rows(usize);
impl Metric for Rows {
    fn name(&self) -> String {
        "rows".into()
    }
    fn update(&mut self, labels: &NDArray, _preds: &NDArray) -> sparrow_core::Result<()> {
        self.0 += labels.shape()[0];
        Ok(())
    }
    fn get(&self) -> f64 {
        self.0 as f64
    }
    fn reset(&mut self) {
        self.0 = 0;
    }
}

/// Batches per epoch, from the handler hooks.
struct BatchesPerEpoch(Vec<usize>);
impl EventHandler for &mut BatchesPerEpoch {
    fn epoch_begin(&mut self, _epoch: usize) -> sparrow_core::Result<()> {
        self.0.push(0);
        Ok(())
    }
    fn batch_end(&mut self, _e: usize, _b: usize, _loss: f64) -> sparrow_core::Result<bool> {
        *self.0.last_mut().unwrap() += 1;
        Ok(true)
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

device_test! {
fn fit_streams_libsvm_with_validation_every_epoch() {
    let (tr, va) = (temp("train.libsvm"), temp("val.libsvm"));
    write_separable(&tr, 200);
    write_separable(&va, 60);
    let params = |p: &PathBuf| {
        let mut q = LibSVMIterParams::new(p, 8, 32);
        q.shuffle = true;
        q.seed = 7;
        q
    };
    let mut train = LibSVMIter::new(params(&tr)).unwrap();
    // Validation reads every row once per pass: Pad (filler rows, cut off by fit), not the
    // default RoundBatch, whose later passes skip the rows an earlier pass borrowed.
    let mut val = LibSVMIter::new(LibSVMIterParams {
        last_batch: LastBatch::Pad,
        ..params(&va)
    })
    .unwrap();
    let net = Dense::new(1).in_units(8);
    net.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut trainer = Trainer::from_params(&net.collect_params().unwrap(), Sgd::new(0.5)).unwrap();
    let bce = SigmoidBinaryCrossEntropyLoss::new();
    let mut count = BatchesPerEpoch(Vec::new());
    let history = {
        let mut est = Estimator::new(&net, |p: &NDArray, y: &NDArray| bce.forward(p, y), &mut trainer)
            .metric(Rows::default())
            .handler(&mut count);
        est.fit(&mut train, Some(&mut val), &quiet(4)).unwrap()
    };
    // Every epoch is a new pass (the source is reset between epochs). Round batch: 200 rows
    // in batches of 32 are 6 full batches and one filled with the next pass's first 24 rows,
    // which the next pass skips (176 rows: 5 + 1 rounded, skip 16; 184: 5 + 1, skip 8; 192: 6).
    assert_eq!(count.0, vec![7, 6, 6, 6]);
    assert_eq!(history.len(), 4);
    let (first, last) = (&history[0], &history[3]);
    assert!(last.get("loss").unwrap() < first.get("loss").unwrap(), "{history:?}");
    // Validation: 60 rows each epoch, padding of the rounded last batch cut off.
    assert_eq!(last.get("val_rows"), Some(60.0));
    assert!(last.get("val_loss").unwrap() < 0.69, "{last:?}");
    for p in [tr, va] {
        std::fs::remove_file(p).unwrap();
    }
}
}

device_test! {
fn fit_streams_csv_with_validation_every_epoch() {
    let (x, y) = (temp("x.csv"), temp("y.csv"));
    // 90 rows, label 1 exactly when the first value is positive.
    let (mut xs, mut ys) = (String::new(), String::new());
    for i in 0..90 {
        let v = ((i * 37) % 19) as f32 - 9.0;
        xs += &format!("{v},1\n");
        ys += &format!("{}\n", (v > 0.0) as u8);
    }
    std::fs::write(&x, xs).unwrap();
    std::fs::write(&y, ys).unwrap();
    let mut p = CSVIterParams::new(&x, &[2], 16);
    p.label_csv = Some(y.clone());
    let mut train = CSVIter::new(p.clone()).unwrap();
    p.last_batch = LastBatch::Pad;
    let mut val = CSVIter::new(p).unwrap();
    let net = Dense::new(1).in_units(2);
    net.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut trainer = Trainer::from_params(&net.collect_params().unwrap(), Sgd::new(0.5)).unwrap();
    let bce = SigmoidBinaryCrossEntropyLoss::new();
    let mut count = BatchesPerEpoch(Vec::new());
    let history = {
        let mut est = Estimator::new(&net, |p: &NDArray, y: &NDArray| bce.forward(p, y), &mut trainer)
            .metric(Rows::default())
            .handler(&mut count);
        est.fit(&mut train, Some(&mut val), &quiet(3)).unwrap()
    };
    // Round batch over 90 rows in 16s: 5 full + 1 borrowing 6 rows of the next pass; then 84
    // rows: 5 + 1 borrowing 12; then 78: 4 + 1.
    assert_eq!(count.0, vec![6, 6, 5]);
    assert!(history[2].get("loss").unwrap() < history[0].get("loss").unwrap(), "{history:?}");
    assert_eq!(history[2].get("val_rows"), Some(90.0));
    for f in [x, y] {
        std::fs::remove_file(f).unwrap();
    }
}
}

device_test! {
fn fit_takes_ndarray_iter_and_data_loader_and_trains_on_padding_as_mxnet() {
    let n = 50;
    let x = NDArray::from_vec((0..n * 2).map(|i| (i % 9) as f32 - 4.0).collect::<Vec<_>>(), &[n, 2]).unwrap();
    let y = NDArray::from_vec((0..n).map(|i| (i % 2) as f32).collect::<Vec<_>>(), &[n, 1]).unwrap();
    let net = Dense::new(1).in_units(2);
    net.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut trainer = Trainer::from_params(&net.collect_params().unwrap(), Sgd::new(0.1)).unwrap();
    let l2 = |p: &NDArray, l: &NDArray| p.sub(l)?.square();
    let mut est = Estimator::new(&net, l2, &mut trainer).metric(Rows::default());
    // Pad: 4 batches of 16, the last with 14 rows of padding, trained on (MXNet's fit does)
    // and cut from validation.
    let mut train = NDArrayIter::new(x.clone(), Some(y.clone()), 16, true, LastBatch::Pad).unwrap();
    let mut val = NDArrayIter::new(x.clone(), Some(y.clone()), 16, false, LastBatch::Pad).unwrap();
    let h = est.fit(&mut train, Some(&mut val), &quiet(2)).unwrap();
    assert_eq!(h[1].get("rows"), Some(64.0));
    assert_eq!(h[1].get("val_rows"), Some(50.0));
    // A DataLoader: each epoch is its next `iter`.
    let ds = TensorDataset::new(x, Some(y)).unwrap();
    let mut dl = DataLoader::new(ds, 20, true, false, 0);
    let h = est.fit(&mut dl, None, &quiet(3)).unwrap();
    assert!(h.iter().all(|e| e.get("rows") == Some(50.0)), "{h:?}");
}
}

device_test! {
fn fit_reports_unlabelled_sources_and_data_errors() {
    let x = NDArray::from_vec(vec![1.0f32; 8], &[4, 2]).unwrap();
    let net = Dense::new(1).in_units(2);
    net.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut trainer = Trainer::from_params(&net.collect_params().unwrap(), Sgd::new(0.1)).unwrap();
    let mut est = Estimator::new(&net, |p: &NDArray, l: &NDArray| p.sub(l), &mut trainer);
    let mut unlabelled = NDArrayIter::new(x, None, 2, false, LastBatch::Keep).unwrap();
    let e = est.fit(&mut unlabelled, None, &quiet(1)).unwrap_err();
    assert!(e.to_string().contains("without labels"), "{e}");

    // A parse error on line 2 reaches the caller as sparrow's error, with file:line:col.
    let bad = temp("bad.libsvm");
    std::fs::write(&bad, "1 0:1 1:2\n0 0:x\n").unwrap();
    let mut it = LibSVMIter::new(LibSVMIterParams::new(&bad, 2, 4)).unwrap();
    let e = est.fit(&mut it, None, &quiet(1)).unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e:?}");
    assert!(e.to_string().contains("bad.libsvm:2:"), "{e}");
    std::fs::remove_file(&bad).unwrap();
}
}

#[test]
fn data_errors_convert_with_question_mark() {
    fn open(p: &str) -> sparrow_core::Result<LibSVMIter> {
        Ok(LibSVMIter::new(LibSVMIterParams::new(p, 2, 4))?)
    }
    let e = open("/nonexistent/sparrow/train.libsvm")
        .err()
        .expect("an error");
    assert!(matches!(e, Error::Data(_)), "{e:?}");
    assert!(e.to_string().contains("train.libsvm"), "{e}");
}

#[test]
fn epoch_log_line_names_every_value() {
    let stats = EpochStats {
        epoch: 3,
        values: vec![("loss".into(), 0.5), ("val_accuracy".into(), 0.875)],
        samples_per_sec: 1234.4,
    };
    assert_eq!(
        log_line(&stats, 1.5),
        "[Epoch 3] 1.50 s, 1234 samples/s: loss 0.5000, val_accuracy 0.8750"
    );
}

device_test! {
fn sources_that_know_their_length_say_it_for_the_progress_bar() {
    let x = NDArray::from_vec(vec![1.0f32; 20], &[10, 2]).unwrap();
    let y = NDArray::from_vec(vec![0.0f32; 10], &[10, 1]).unwrap();
    let mut it = NDArrayIter::new(x.clone(), Some(y.clone()), 4, false, LastBatch::Keep).unwrap();
    let e = it.epoch(0).unwrap();
    assert_eq!(e.len, Some(3));
    assert_eq!(e.batches.count(), 3);
    let ds = TensorDataset::new(x.clone(), Some(y.clone())).unwrap();
    let mut dl = DataLoader::new(ds, 4, false, true, 0);
    let e = dl.epoch(0).unwrap();
    assert_eq!(e.len, Some(2));
    assert_eq!(e.batches.count(), 2);
    let mut closure = move || vec![Ok((x.clone(), y.clone())); 5].into_iter();
    assert_eq!(closure.epoch(0).unwrap().len, Some(5));
    // A streaming reader does not know its batch count ahead.
    let p = temp("len.libsvm");
    write_separable(&p, 10);
    let mut it = LibSVMIter::new(LibSVMIterParams::new(&p, 8, 4)).unwrap();
    assert_eq!(it.epoch(0).unwrap().len, None);
    std::fs::remove_file(&p).unwrap();
}
}
