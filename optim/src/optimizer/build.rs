//! Builders for every optimizer (`Adam::new(0.01).wd(1e-4).lazy(false)`) and [`create`], the
//! optimizer by name with keyword options, as MXNet's `mx.optimizer.create("adam",
//! learning_rate=0.01)` and Gluon's `Trainer(params, "adam", {...})` take them.

use sparrow_core::{Error, Result};

use super::{
    AdaDelta, AdaGrad, Adam, AdamW, Adamax, Cocob, Ftml, Ftrl, GroupAdaGrad, Lamb, Nadam, Nag,
    Optimizer, OptimizerOptions, RMSProp, Sgd, Signum,
};
use crate::schedule::LrScheduler;

/// Set one of the options every optimizer shares from a keyword (`learning_rate`, `wd`,
/// `rescale_grad`, `clip_gradient`, `lazy_update`, `multi_precision`); `false` when the key is
/// not one of them.
fn set_common(opts: &mut OptimizerOptions, key: &str, value: f64) -> Result<bool> {
    match key {
        "learning_rate" | "lr" => opts.learning_rate = value,
        "wd" => opts.wd = value,
        "rescale_grad" => opts.rescale_grad = value,
        "clip_gradient" => opts.clip_gradient = clip_threshold(value),
        "lazy_update" => opts.lazy_update = flag("lazy_update", value)?,
        "multi_precision" => opts.multi_precision = flag("multi_precision", value)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// MXNet's convention for `clip_gradient`: a threshold <= 0 (its default -1) turns clipping off.
fn clip_threshold(c: f64) -> Option<f64> {
    (c > 0.0).then_some(c)
}

/// The shared keywords [`set_common`] takes, for error messages.
const COMMON_KEYWORDS: [&str; 6] = [
    "learning_rate",
    "wd",
    "rescale_grad",
    "clip_gradient",
    "lazy_update",
    "multi_precision",
];

/// A boolean keyword given as a number: 0 or 1.
fn flag(key: &str, value: f64) -> Result<bool> {
    if value == 0.0 {
        Ok(false)
    } else if value == 1.0 {
        Ok(true)
    } else {
        Err(Error::arg(
            "optimizer::create",
            format!("{key} is a flag (0 or 1), got {value}"),
        ))
    }
}

/// A keyword value converted to a field's type.
trait FromKeyword: Sized {
    fn from_keyword(key: &str, value: f64) -> Result<Self>;
}

impl FromKeyword for f64 {
    fn from_keyword(_key: &str, value: f64) -> Result<f64> {
        Ok(value)
    }
}

impl FromKeyword for bool {
    fn from_keyword(key: &str, value: f64) -> Result<bool> {
        flag(key, value)
    }
}

impl FromKeyword for Option<f64> {
    fn from_keyword(_key: &str, value: f64) -> Result<Option<f64>> {
        // As for clip_gradient: MXNet passes None as "off"; a keyword of a number sets it.
        Ok(Some(value))
    }
}

/// The builder methods and keyword setter of each optimizer: the shared options, then one
/// method per hyper-parameter field, named as the field (and as MXNet's keyword). Fields after
/// `;` are keywords only (their name is already a constructor, as `RMSProp::centered`).
macro_rules! builders {
    ($($ty:ident { $($field:ident: $ft:ty),* $(,)? $(; $($kfield:ident: $kft:ty),*)? })*) => {$(
        impl $ty {
            /// Weight decay (L2) coefficient.
            pub fn wd(mut self, wd: f64) -> Self {
                self.opts.wd = wd;
                self
            }
            /// Multiply every gradient by `scale` first (a [`crate::Trainer`] reads it once as
            /// its scale, divided by the batch size at every step).
            pub fn rescale_grad(mut self, scale: f64) -> Self {
                self.opts.rescale_grad = scale;
                self
            }
            /// Clip the rescaled gradient to `[-c, c]`; `c <= 0` turns clipping off.
            pub fn clip_gradient(mut self, c: f64) -> Self {
                self.opts.clip_gradient = clip_threshold(c);
                self
            }
            /// Lazy row_sparse updates (only the gradient's rows change; the default) or the
            /// standard ones (every row, absent rows with a zero gradient).
            pub fn lazy(mut self, lazy: bool) -> Self {
                self.opts.lazy_update = lazy;
                self
            }
            /// Keep an f32 master copy of f16 / bf16 weights and update it instead (see
            /// [`OptimizerOptions::multi_precision`]).
            pub fn multi_precision(mut self, on: bool) -> Self {
                self.opts.multi_precision = on;
                self
            }
            /// Drive the learning rate with a schedule (evaluated at the update count).
            pub fn lr_scheduler(mut self, s: impl LrScheduler + 'static) -> Self {
                self.opts.lr_scheduler = Some(Box::new(s));
                self
            }
            $(
                #[doc = concat!("Set `", stringify!($field), "` (see the field).")]
                pub fn $field(mut self, v: impl Into<$ft>) -> Self {
                    self.$field = v.into();
                    self
                }
            )*
            /// Set one option by its MXNet keyword; `false` when this optimizer has no such
            /// option.
            fn set_keyword(&mut self, key: &str, value: f64) -> Result<bool> {
                if set_common(&mut self.opts, key, value)? {
                    return Ok(true);
                }
                match key {
                    $(stringify!($field) => {
                        self.$field = FromKeyword::from_keyword(key, value)?;
                        Ok(true)
                    })*
                    $($(stringify!($kfield) => {
                        self.$kfield = <$kft as FromKeyword>::from_keyword(key, value)?;
                        Ok(true)
                    })*)?
                    _ => Ok(false),
                }
            }
            /// The keywords [`Self::set_keyword`] accepts, for error messages.
            fn keywords() -> Vec<&'static str> {
                let own: &[&'static str] =
                    &[$(stringify!($field),)* $($(stringify!($kfield),)*)?];
                COMMON_KEYWORDS.iter().chain(own).copied().collect()
            }
        }
    )*};
}

builders! {
    Sgd { momentum: f64 }
    Nag { momentum: f64 }
    Signum { momentum: f64, wd_lh: f64 }
    Adam { beta1: f64, beta2: f64, epsilon: f64 }
    AdamW { beta1: f64, beta2: f64, epsilon: f64, correct_bias: bool }
    Adamax { beta1: f64, beta2: f64 }
    Nadam { beta1: f64, beta2: f64, epsilon: f64, schedule_decay: f64 }
    AdaGrad { eps: f64 }
    AdaDelta { rho: f64, epsilon: f64 }
    RMSProp { gamma1: f64, gamma2: f64, epsilon: f64, clip_weights: Option<f64>; centered: bool }
    Ftrl { lambda1: f64, beta: f64 }
    Ftml { beta1: f64, beta2: f64, epsilon: f64 }
    Cocob { alpha: f64 }
    GroupAdaGrad { eps: f64 }
    Lamb { beta1: f64, beta2: f64, epsilon: f64, lower_bound: Option<f64>,
           upper_bound: Option<f64>, bias_correction: bool }
}

/// Apply keyword options to a freshly made optimizer, failing on the first unknown key.
fn configured<O: Optimizer + 'static>(
    mut opt: O,
    name: &str,
    options: &[(&str, f64)],
    set: fn(&mut O, &str, f64) -> Result<bool>,
    keywords: Vec<&str>,
) -> Result<Box<dyn Optimizer>> {
    for &(key, value) in options {
        // MXNet spells FTRL's L1 strength `lamda1`; accept its spelling too.
        let key = if key == "lamda1" { "lambda1" } else { key };
        if !value.is_finite() {
            return Err(Error::arg(
                "optimizer::create",
                format!("{name}: option {key} must be finite, got {value}"),
            ));
        }
        if !set(&mut opt, key, value)? {
            return Err(Error::arg(
                "optimizer::create",
                format!(
                    "{name} has no option '{key}'; its options are {}",
                    keywords.join(", ")
                ),
            ));
        }
    }
    Ok(Box::new(opt))
}

/// The names [`create`] knows, as MXNet spells them.
pub const OPTIMIZER_NAMES: [&str; 15] = [
    "sgd",
    "nag",
    "signum",
    "adam",
    "adamw",
    "adamax",
    "nadam",
    "adagrad",
    "adadelta",
    "rmsprop",
    "ftrl",
    "ftml",
    "lamb",
    "cocob",
    "groupadagrad",
];

/// An optimizer by name (case-insensitive, MXNet's names: `sgd`, `nag`, `signum`, `adam`,
/// `adamw`, `adamax`, `nadam`, `adagrad`, `adadelta`, `rmsprop`, `ftrl`, `ftml`, `lamb`,
/// `groupadagrad` (MXNet's contrib `GroupAdaGrad`; `group_adagrad` is accepted too), and
/// sparrow's `cocob`) with
/// keyword options, as `mx.optimizer.create(name, **kwargs)`: the shared ones
/// (`learning_rate`, `wd`, `rescale_grad`, `clip_gradient`, `lazy_update` as 0/1) and the
/// optimizer's own, named as its fields (`momentum`, `beta1`, `centered` as 0/1, ...). Options
/// not given keep MXNet's defaults, the learning rate included (0.01 for SGD, 0.001 for Adam,
/// ...). An unknown name or option, or a non-finite value, is an error listing what exists.
///
/// ```
/// use sparrow_optim::optimizer::create;
/// let opt = create("adam", &[("learning_rate", 0.01), ("wd", 1e-4)]).unwrap();
/// assert_eq!(opt.name(), "adam");
/// assert_eq!(opt.learning_rate(), 0.01);
/// assert!(create("adam", &[("momentum", 0.9)]).is_err());
/// ```
pub fn create(name: &str, options: &[(&str, f64)]) -> Result<Box<dyn Optimizer>> {
    let lower = name.to_ascii_lowercase();
    macro_rules! make {
        ($opt:expr, $ty:ident) => {
            configured($opt, &lower, options, $ty::set_keyword, $ty::keywords())
        };
    }
    match lower.as_str() {
        "sgd" => make!(Sgd::new(0.01), Sgd),
        "nag" => make!(Nag::new(0.01, 0.0), Nag),
        "signum" => make!(Signum::new(0.01), Signum),
        "adam" => make!(Adam::new(0.001), Adam),
        "adamw" => make!(AdamW::new(0.001), AdamW),
        "adamax" => make!(Adamax::new(0.002), Adamax),
        "nadam" => make!(Nadam::new(0.001), Nadam),
        "adagrad" => make!(AdaGrad::new(0.01), AdaGrad),
        "adadelta" => make!(AdaDelta::new(), AdaDelta),
        "rmsprop" => make!(RMSProp::new(0.001), RMSProp),
        "ftrl" => make!(Ftrl::new(0.1), Ftrl),
        "ftml" => make!(Ftml::new(0.0025), Ftml),
        "lamb" => make!(Lamb::new(0.001), Lamb),
        "cocob" => make!(Cocob::new(), Cocob),
        "groupadagrad" | "group_adagrad" => make!(GroupAdaGrad::new(0.01), GroupAdaGrad),
        _ => Err(Error::arg(
            "optimizer::create",
            format!(
                "unknown optimizer '{name}'; known: {}",
                OPTIMIZER_NAMES.join(", ")
            ),
        )),
    }
}
