//! A Trainer that updates on the store (`set_kvstore_update`, Gluon's `update_on_kvstore=True`):
//! one worker gets the bits of a trainer without a store; schedules, `set_learning_rate`,
//! multipliers and saved states work as on the worker; misuse is an error. (Several workers:
//! `tests/trainer.rs`.)

#[path = "common/equivalence.rs"]
mod equivalence;

use equivalence::{batch, max_rel_diff, model, optimizer, train, train_with, Update, OPTIMIZERS};
use sparrow_core::{autograd, NDArray, Result};
use sparrow_kvstore::{SyncStore, ThreadTransport};
use sparrow_nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow_nn::Block;
use sparrow_optim::{FactorScheduler, KVStore, NonFinite, Optimizer, Sgd, Trainer};

const B: usize = 4;

#[test]
fn one_worker_updating_on_the_store_matches_no_store_bit_for_bit() {
    for opt in OPTIMIZERS {
        let reference = train(opt, None, 0, 1, B).unwrap();
        let kv: Box<dyn KVStore> = Box::new(sparrow_kvstore::local());
        let on_store = train_with(opt, Some(kv), Update::OnStore, 0, 1, B).unwrap();
        assert_eq!(on_store, reference, "{opt}");
    }
}

/// A store that keeps copies of the keys (the trait's default `init_shared`): the trainer
/// must pull the weights the store updated.
struct Copying(SyncStore<ThreadTransport>);

impl KVStore for Copying {
    fn kind(&self) -> &'static str {
        "copying"
    }
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn num_workers(&self) -> usize {
        self.0.num_workers()
    }
    fn init(&mut self, key: usize, value: &NDArray) -> Result<()> {
        self.0.init(key, value)
    }
    fn push(&mut self, key: usize, values: &[NDArray]) -> Result<()> {
        self.0.push(key, values)
    }
    fn pull(&mut self, key: usize, out: &[NDArray]) -> Result<()> {
        self.0.pull(key, out)
    }
    fn row_sparse_pull(&mut self, key: usize, out: &[NDArray], row_ids: &[i64]) -> Result<()> {
        self.0.row_sparse_pull(key, out, row_ids)
    }
    fn set_optimizer(&mut self, optimizer: Box<dyn Optimizer>) -> Result<()> {
        self.0.set_optimizer(optimizer)
    }
    fn has_optimizer(&self) -> bool {
        self.0.has_optimizer()
    }
    fn optimizer(&self) -> Option<&(dyn Optimizer + 'static)> {
        self.0.optimizer()
    }
    fn optimizer_mut(&mut self) -> Option<&mut (dyn Optimizer + 'static)> {
        self.0.optimizer_mut()
    }
    fn barrier(&mut self) -> Result<()> {
        self.0.barrier()
    }
}

#[test]
fn a_store_that_keeps_copies_has_the_weights_pulled() {
    for opt in OPTIMIZERS {
        let reference = train(opt, None, 0, 1, B).unwrap();
        let kv: Box<dyn KVStore> = Box::new(Copying(sparrow_kvstore::local()));
        let on_store = train_with(opt, Some(kv), Update::OnStore, 0, 1, B).unwrap();
        assert_eq!(on_store, reference, "{opt}");
    }
}

/// The tutorial model trained `steps` steps of `B` rows from step `from`, with `setup` run on
/// the trainer first and `each` before every step; returns the parameters and the trainer.
fn run(
    opt: Box<dyn Optimizer>,
    store: bool,
    params_from: Option<&[Vec<f32>]>,
    from: usize,
    steps: usize,
    setup: impl FnOnce(&mut Trainer),
    mut each: impl FnMut(usize, &mut Trainer),
) -> (Vec<Vec<f32>>, Trainer) {
    let (net, params) = model().unwrap();
    if let Some(values) = params_from {
        for (p, v) in params.iter().zip(values) {
            let shape = p.data().unwrap().shape();
            p.set_data(&sparrow_core::NDArray::from_vec(v.clone(), &shape).unwrap())
                .unwrap();
        }
    }
    // Multipliers of their own on two parameters: the store must apply them as the worker.
    params[0].set_lr_mult(0.5);
    params[1].set_wd_mult(0.0);
    let mut trainer = Trainer::with_boxed(params.clone(), opt).unwrap();
    if store {
        trainer
            .set_kvstore_update(Box::new(sparrow_kvstore::local()))
            .unwrap();
    }
    setup(&mut trainer);
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    for step in from..from + steps {
        each(step, &mut trainer);
        let (x, y) = batch(step * B, B).unwrap();
        let loss = autograd::record(|| loss_fn.forward(&net.forward(&x)?, &y)).unwrap();
        loss.backward().unwrap();
        trainer.step(B).unwrap();
    }
    let got = params
        .iter()
        .map(|p| p.data().unwrap().to_vec::<f32>().unwrap())
        .collect();
    (got, trainer)
}

fn adam_with_wd() -> Box<dyn Optimizer> {
    let mut o = optimizer("adam_lazy");
    o.options_mut().wd = 0.01;
    o
}

#[test]
fn schedules_learning_rates_and_multipliers_reach_the_store() {
    let scheduled = || -> Box<dyn Optimizer> {
        let mut o = Sgd::with_momentum(0.2, 0.9);
        o.opts.wd = 0.01;
        o.opts.lr_scheduler = Some(Box::new(FactorScheduler::new(2, 0.5, 0.2).unwrap()));
        Box::new(o)
    };
    let mut lrs = [vec![], vec![]];
    let mut got = vec![];
    for (k, store) in [false, true].into_iter().enumerate() {
        let lr = &mut lrs[k];
        let (w, trainer) = run(
            scheduled(),
            store,
            None,
            0,
            5,
            |_| {},
            |_, t| lr.push(t.learning_rate()),
        );
        lr.push(trainer.learning_rate());
        assert_eq!(trainer.optimizer().options().num_update, 5);
        got.push(w);
    }
    assert_eq!(got[0], got[1], "a schedule");
    assert_eq!(lrs[0], lrs[1]);
    assert!(lrs[1][5] < lrs[1][0], "the schedule decayed: {:?}", lrs[1]);

    // set_learning_rate between steps, before and after the first.
    let mut got = vec![];
    for store in [false, true] {
        let (w, trainer) = run(
            adam_with_wd(),
            store,
            None,
            0,
            4,
            |t| t.set_learning_rate(0.02).unwrap(),
            |step, t| {
                if step == 2 {
                    t.set_learning_rate(0.005).unwrap();
                }
            },
        );
        assert_eq!(trainer.learning_rate(), 0.005);
        got.push(w);
    }
    assert_eq!(got[0], got[1], "set_learning_rate");
}

#[test]
fn states_saved_on_the_store_resume_training() {
    let dir = std::env::temp_dir().join(format!("sparrow-tkv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("adam.states");
    // Six steps straight, on the store.
    let (straight, _) = run(adam_with_wd(), true, None, 0, 6, |_| {}, |_, _| {});
    // Three steps on the store, saved; three more from the file, on the store and on the
    // worker (the file is the same either way).
    let (half, trainer) = run(adam_with_wd(), true, None, 0, 3, |_| {}, |_, _| {});
    assert!(
        max_rel_diff(&half, &straight) > 1e-4,
        "the last steps changed nothing"
    );
    assert!(trainer.state(0).is_some() && trainer.state_bytes() > 0);
    trainer.save_states(&file).unwrap();
    for store in [true, false] {
        let (resumed, trainer) = run(
            adam_with_wd(),
            store,
            Some(&half),
            3,
            3,
            |t| t.load_states(&file).unwrap(),
            |_, _| {},
        );
        assert_eq!(
            resumed, straight,
            "resumed with the store updating: {store}"
        );
        assert_eq!(trainer.optimizer().options().num_update, 6);
        if store {
            // Loaded after the first step too: straight into the store.
            let mut trainer = trainer;
            trainer.load_states(&file).unwrap();
            assert_eq!(trainer.optimizer().options().num_update, 3);
            assert_eq!(trainer.state(0).unwrap().t, 3);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn misuse_is_an_error() {
    let (net, params) = model().unwrap();
    let mut trainer = Trainer::new(params.clone(), Sgd::new(0.1)).unwrap();
    // A store that already has an optimizer.
    let mut kv = sparrow_kvstore::local();
    kv.set_optimizer(Box::new(Sgd::new(0.1))).unwrap();
    let err = trainer
        .set_kvstore_update(Box::new(kv))
        .unwrap_err()
        .to_string();
    assert!(err.contains("already has an optimizer"), "{err}");
    assert!(!trainer.update_on_kvstore());
    // A second optimizer on a store.
    let mut kv = sparrow_kvstore::local();
    kv.set_optimizer(Box::new(Sgd::new(0.1))).unwrap();
    let err = kv
        .set_optimizer(Box::new(Sgd::new(0.2)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("set once"), "{err}");
    assert_eq!(kv.optimizer().unwrap().learning_rate(), 0.1);

    trainer
        .set_kvstore_update(Box::new(sparrow_kvstore::local()))
        .unwrap();
    assert!(trainer.update_on_kvstore());
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    let backward = || {
        let (x, y) = batch(0, B).unwrap();
        let loss = autograd::record(|| loss_fn.forward(&net.forward(&x)?, &y)).unwrap();
        loss.backward().unwrap();
    };
    backward();
    // allreduce_grads / update on their own, as Gluon refuses them.
    for err in [
        trainer.allreduce_grads().unwrap_err().to_string(),
        trainer.update(B).unwrap_err().to_string(),
    ] {
        assert!(
            err.contains("update on kvstore") && err.contains("step"),
            "{err}"
        );
    }
    // A NaN check cannot skip a step the store has already taken.
    trainer.set_nonfinite(NonFinite::SkipStep);
    let err = trainer.step(B).unwrap_err().to_string();
    assert!(err.contains("SkipStep"), "{err}");
    trainer.set_nonfinite(NonFinite::Apply);
    let before = params[2].data().unwrap().to_vec::<f32>().unwrap();
    trainer.step(B).unwrap();
    assert_ne!(params[2].data().unwrap().to_vec::<f32>().unwrap(), before);
    assert!(trainer.kvstore().unwrap().has_optimizer());
    assert_eq!(trainer.optimizer().name(), "sgd");
    // The optimizer lives in the store now: no other store.
    for err in [
        trainer
            .set_kvstore(Box::new(sparrow_kvstore::local()))
            .unwrap_err()
            .to_string(),
        trainer
            .set_kvstore_update(Box::new(sparrow_kvstore::local()))
            .unwrap_err()
            .to_string(),
    ] {
        assert!(err.contains("new Trainer"), "{err}");
    }
    // A stale gradient is still refused.
    let err = trainer.step(B).unwrap_err().to_string();
    assert!(err.contains("not been updated"), "{err}");
}
