//! Optimizer builders and `create` by name with keyword options.

use sparrow_core::{device_test, NDArray};
use sparrow_nn::{Initializer, Parameter};
use sparrow_optim::optimizer::OPTIMIZER_NAMES;
use sparrow_optim::*;

/// Weight after three updates of `opt` from fixed weights and gradients.
fn after_three_steps(mut opt: Box<dyn Optimizer>) -> Vec<f64> {
    let w = NDArray::from_vec(vec![1.0f64, -2.0, 0.5, 3.0], &[4]).unwrap();
    let mut st = opt.create_state(0, &w).unwrap();
    for k in 0..3 {
        let g = NDArray::from_vec(vec![0.5f64 + k as f64, -1.0, 0.25, 2.0], &[4]).unwrap();
        opt.update(0, &w, &g, &mut st).unwrap();
    }
    w.to_f64_vec()
}

#[test]
fn builders_set_shared_and_own_options() {
    let a = Adam::new(0.01)
        .wd(1e-4)
        .lazy(false)
        .beta1(0.8)
        .epsilon(1e-6)
        .clip_gradient(5.0)
        .rescale_grad(0.5);
    assert_eq!(a.opts.learning_rate, 0.01);
    assert_eq!(a.opts.wd, 1e-4);
    assert!(!a.opts.lazy_update);
    assert_eq!(a.opts.clip_gradient, Some(5.0));
    assert_eq!(a.opts.rescale_grad, 0.5);
    assert_eq!((a.beta1, a.beta2, a.epsilon), (0.8, 0.999, 1e-6));
    // A threshold <= 0 turns clipping off, as MXNet's -1 does.
    assert_eq!(Sgd::new(0.1).clip_gradient(-1.0).opts.clip_gradient, None);
    // Option fields take a plain value.
    assert_eq!(RMSProp::new(0.1).clip_weights(2.0).clip_weights, Some(2.0));
    assert!(
        Lamb::new(0.1)
            .bias_correction(false)
            .lower_bound(1e-3)
            .lower_bound
            == Some(1e-3)
    );
    let s = Sgd::new(0.1).lr_scheduler(FactorScheduler::new(10, 0.5, 0.1).unwrap());
    assert!(s.opts.lr_scheduler.is_some());
}

device_test! {
fn create_by_name_matches_the_built_optimizer() {
    let pairs: Vec<(Box<dyn Optimizer>, Box<dyn Optimizer>)> = vec![
        (
            create("sgd", &[("learning_rate", 0.1), ("momentum", 0.9), ("wd", 0.01)]).unwrap(),
            Box::new(Sgd::with_momentum(0.1, 0.9).wd(0.01)),
        ),
        (
            create("Adam", &[("beta2", 0.99), ("clip_gradient", 1.5)]).unwrap(),
            Box::new(Adam::new(0.001).beta2(0.99).clip_gradient(1.5)),
        ),
        (
            create("rmsprop", &[("centered", 1.0), ("learning_rate", 0.01)]).unwrap(),
            Box::new(RMSProp::centered(0.01)),
        ),
        (
            create("ftrl", &[("lamda1", 0.02), ("beta", 0.5)]).unwrap(),
            Box::new(Ftrl::new(0.1).lambda1(0.02).beta(0.5)),
        ),
    ];
    for (named, built) in pairs {
        assert_eq!(named.name(), built.name());
        assert_eq!(after_three_steps(named), after_three_steps(built));
    }
}
}

#[test]
fn create_knows_every_optimizer_with_mxnet_default_rates() {
    let defaults = [
        ("sgd", 0.01),
        ("nag", 0.01),
        ("signum", 0.01),
        ("adam", 0.001),
        ("adamw", 0.001),
        ("adamax", 0.002),
        ("nadam", 0.001),
        ("adagrad", 0.01),
        ("adadelta", 1.0),
        ("rmsprop", 0.001),
        ("ftrl", 0.1),
        ("ftml", 0.0025),
        ("lamb", 0.001),
        ("cocob", 0.6),
        ("groupadagrad", 0.01),
    ];
    assert_eq!(defaults.len(), OPTIMIZER_NAMES.len());
    for (name, lr) in defaults {
        let o = create(name, &[]).unwrap();
        assert_eq!(o.name(), name);
        assert_eq!(o.learning_rate(), lr, "{name}");
        let o = create(name, &[("learning_rate", 0.5), ("lazy_update", 0.0)]).unwrap();
        assert_eq!(o.learning_rate(), 0.5);
        assert!(!o.options().lazy_update);
    }
}

#[test]
fn create_rejects_unknown_names_options_and_bad_values() {
    let msg = |r: sparrow_core::Result<Box<dyn Optimizer>>| match r {
        Ok(o) => panic!("expected an error, got {}", o.name()),
        Err(e) => e.to_string(),
    };
    let e = msg(create("adamm", &[]));
    assert!(
        e.contains("unknown optimizer 'adamm'") && e.contains("adam, adamw"),
        "{e}"
    );
    let e = msg(create("adam", &[("momentum", 0.9)]));
    assert!(
        e.contains("no option 'momentum'") && e.contains("beta1"),
        "{e}"
    );
    let e = msg(create("sgd", &[("wd", f64::NAN)]));
    assert!(e.contains("finite"), "{e}");
    let e = msg(create("rmsprop", &[("centered", 0.5)]));
    assert!(e.contains("flag"), "{e}");
}

#[test]
fn trainer_refuses_multiplier_maps_it_would_ignore() {
    let p = Parameter::new("w", &[2]);
    p.initialize(&Initializer::Zero, sparrow_core::Device::Cpu)
        .unwrap();
    let mut opt = Sgd::new(0.1);
    opt.opts.wd_mult.insert(0, 0.0);
    let e = Trainer::new(vec![p.clone()], opt).err().expect("an error");
    assert!(e.to_string().contains("with_wd_mult"), "{e}");
    assert!(Trainer::new(vec![p.clone()], Sgd::new(0.1)).is_ok());
    // A boxed optimizer from `create` goes into a Trainer as a typed one does.
    assert!(Trainer::new(vec![p], create("adam", &[]).unwrap()).is_ok());
}
