//! A Trainer with a `local` store of 2 threads, each training on its 4 rows of a step, ends
//! with the parameters one trainer gets on the step's 8 rows (no store), for SGD with
//! momentum, Adam (lazy and standard) and FTRL, whether the trainers update on their side
//! (`set_kvstore`) or the store updates (`set_kvstore_update`).

#[path = "common/equivalence.rs"]
mod equivalence;

use std::time::Duration;

use equivalence::{max_rel_diff, model, on_threads, train, train_with, Update, OPTIMIZERS};
use sparrow_optim::{KVStore, Sgd, Trainer};

const WORKERS: usize = 2;
const B: usize = 4;

fn data_parallel(opt: &str, update: Update) -> Vec<Vec<Vec<f32>>> {
    let opt = opt.to_string();
    on_threads(WORKERS, Duration::from_secs(60), move |rank, kv| {
        train_with(&opt, Some(kv), update, rank, WORKERS, B).unwrap()
    })
}

#[test]
fn two_workers_with_batch_b_match_one_with_batch_2b() {
    let (_, init) = model().unwrap();
    let init: Vec<Vec<f32>> = init
        .iter()
        .map(|p| p.data().unwrap().to_vec().unwrap())
        .collect();
    for opt in OPTIMIZERS {
        let reference = train(opt, None, 0, 1, WORKERS * B).unwrap();
        // The check means something only if training moved the weights.
        assert!(
            max_rel_diff(&reference, &init) > 1e-3,
            "{opt}: weights did not move"
        );
        let workers = data_parallel(opt, Update::OnWorker);
        for (rank, w) in workers.iter().enumerate() {
            let d = max_rel_diff(w, &reference);
            assert!(
                d <= 1e-6,
                "{opt}: worker {rank} differs from the reference by {d:e}"
            );
        }
        // Replicas stay equal bit for bit (every worker sums in the same order).
        assert_eq!(workers[0], workers[1], "{opt}: replicas diverged");
    }
}

#[test]
fn two_workers_updating_on_the_store_match_one_with_batch_2b() {
    for opt in OPTIMIZERS {
        let reference = train(opt, None, 0, 1, WORKERS * B).unwrap();
        let on_store = data_parallel(opt, Update::OnStore);
        for (rank, w) in on_store.iter().enumerate() {
            let d = max_rel_diff(w, &reference);
            assert!(
                d <= 1e-6,
                "{opt}: worker {rank} (update on the store) differs from one worker with \
                 batch {} by {d:e}",
                WORKERS * B
            );
        }
        assert_eq!(on_store[0], on_store[1], "{opt}: replicas diverged");
        // The same sums (in worker order) and the same update arguments: the bits of the
        // workers updating on their side.
        let on_worker = data_parallel(opt, Update::OnWorker);
        assert_eq!(
            on_store, on_worker,
            "{opt}: store and worker updates differ"
        );
    }
}

#[test]
fn one_worker_with_a_store_matches_no_store() {
    for opt in ["sgd_momentum", "adam_lazy"] {
        let reference = train(opt, None, 0, 1, B).unwrap();
        let kv: Box<dyn KVStore> = Box::new(sparrow_kvstore::local());
        let with_store = train(opt, Some(kv), 0, 1, B).unwrap();
        assert_eq!(with_store, reference, "{opt}");
    }
}

#[test]
fn a_store_that_updates_itself_is_refused_by_the_trainer() {
    let (_, params) = model().unwrap();
    let mut trainer = Trainer::new(params, Sgd::new(0.1)).unwrap();
    let mut kv = sparrow_kvstore::local();
    kv.set_optimizer(Box::new(Sgd::new(0.1))).unwrap();
    let err = trainer.set_kvstore(Box::new(kv)).unwrap_err().to_string();
    assert!(err.contains("optimizer set"), "{err}");
    assert_eq!(trainer.num_workers(), 1);
}
