//! Learning-rate schedules (MXNet's `lr_scheduler`), each with an optional warmup.
//!
//! A schedule is a pure function of the update count, so the rate for any step can be asked
//! for at any time (`lr(num_update)`), in any order; MXNet's schedulers keep internal state and
//! only move forward, but give the same values when called step by step.
//!
//! ```
//! use sparrow_optim::{FactorScheduler, LrScheduler, Warmup};
//! let s = FactorScheduler::new(10, 0.5, 1.0).unwrap().with_warmup(Warmup::linear(5, 0.0)).unwrap();
//! assert_eq!(s.lr(0), 0.0);          // warmup starts at 0
//! assert_eq!(s.lr(5), 1.0);          // base rate after warmup
//! assert_eq!(s.lr(11), 0.5);         // one factor after 10 updates
//! ```

use sparrow_core::{Error, Result};

/// A learning rate as a function of the number of updates so far.
pub trait LrScheduler: Send + Sync {
    /// The rate for update number `num_update` (MXNet passes the count after incrementing it,
    /// so the first update asks for `lr(1)`).
    fn lr(&self, num_update: u64) -> f64;
    /// The base (peak) rate.
    fn base_lr(&self) -> f64;
    /// Change the base rate from now on.
    fn set_base_lr(&mut self, lr: f64);
}

/// Warmup at the start of a schedule: `steps` updates rising linearly from `begin_lr` to the
/// base rate (MXNet's `warmup_mode='linear'`), or held at `begin_lr` (`'constant'`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Warmup {
    /// Number of warmup updates.
    pub steps: u64,
    /// Rate at update 0.
    pub begin_lr: f64,
    /// Linear ramp (true) or constant (false).
    pub linear: bool,
}

impl Warmup {
    /// No warmup.
    pub fn none() -> Self {
        Warmup {
            steps: 0,
            begin_lr: 0.0,
            linear: true,
        }
    }
    /// A linear ramp over `steps` updates from `begin_lr`.
    pub fn linear(steps: u64, begin_lr: f64) -> Self {
        Warmup {
            steps,
            begin_lr,
            linear: true,
        }
    }
    /// A constant `begin_lr` for `steps` updates.
    pub fn constant(steps: u64, begin_lr: f64) -> Self {
        Warmup {
            steps,
            begin_lr,
            linear: false,
        }
    }
    fn lr(&self, base: f64, n: u64) -> f64 {
        if self.linear {
            self.begin_lr + (base - self.begin_lr) * n as f64 / self.steps as f64
        } else {
            self.begin_lr
        }
    }
    fn check(&self, base: f64) -> Result<()> {
        if !self.begin_lr.is_finite() || self.begin_lr > base {
            return Err(Error::arg(
                "lr_scheduler",
                format!(
                    "warmup begin_lr {} must be finite and <= base_lr {base}",
                    self.begin_lr
                ),
            ));
        }
        Ok(())
    }
}

fn check_base(base: f64) -> Result<()> {
    if !base.is_finite() || base < 0.0 {
        return Err(Error::arg(
            "lr_scheduler",
            format!("base_lr must be finite and >= 0, got {base}"),
        ));
    }
    Ok(())
}

/// Multiply the rate by `factor` every `step` updates, never below `stop_factor_lr`
/// (MXNet `FactorScheduler`).
#[derive(Debug, Clone)]
pub struct FactorScheduler {
    /// Updates between decays (>= 1).
    pub step: u64,
    /// Decay factor (<= 1).
    pub factor: f64,
    /// Floor (1e-8 by default).
    pub stop_factor_lr: f64,
    /// Base rate.
    pub base_lr: f64,
    /// Warmup.
    pub warmup: Warmup,
}

impl FactorScheduler {
    /// Decay by `factor` every `step` updates from `base_lr`.
    pub fn new(step: u64, factor: f64, base_lr: f64) -> Result<Self> {
        if step < 1 {
            return Err(Error::arg("FactorScheduler", "step must be >= 1"));
        }
        if !(factor.is_finite() && factor > 0.0 && factor <= 1.0) {
            return Err(Error::arg(
                "FactorScheduler",
                format!("factor must be in (0, 1], got {factor}"),
            ));
        }
        check_base(base_lr)?;
        Ok(FactorScheduler {
            step,
            factor,
            stop_factor_lr: 1e-8,
            base_lr,
            warmup: Warmup::none(),
        })
    }
    /// With a warmup.
    pub fn with_warmup(mut self, warmup: Warmup) -> Result<Self> {
        warmup.check(self.base_lr)?;
        self.warmup = warmup;
        Ok(self)
    }
}

impl LrScheduler for FactorScheduler {
    fn lr(&self, n: u64) -> f64 {
        if n < self.warmup.steps {
            return self.warmup.lr(self.base_lr, n);
        }
        // MXNet: `while n > count + step: count += step; lr *= factor` from count = 0.
        let k = if n == 0 { 0 } else { (n - 1) / self.step };
        (self.base_lr * self.factor.powf(k as f64)).max(self.stop_factor_lr.min(self.base_lr))
    }
    fn base_lr(&self) -> f64 {
        self.base_lr
    }
    fn set_base_lr(&mut self, lr: f64) {
        self.base_lr = lr;
    }
}

/// Multiply the rate by `factor` after each listed update count (MXNet `MultiFactorScheduler`).
#[derive(Debug, Clone)]
pub struct MultiFactorScheduler {
    /// Strictly increasing update counts (>= 1).
    pub steps: Vec<u64>,
    /// Decay factor (<= 1).
    pub factor: f64,
    /// Base rate.
    pub base_lr: f64,
    /// Warmup.
    pub warmup: Warmup,
}

impl MultiFactorScheduler {
    /// Decay at each of `steps`.
    pub fn new(steps: Vec<u64>, factor: f64, base_lr: f64) -> Result<Self> {
        if steps.is_empty() || steps[0] < 1 || steps.windows(2).any(|w| w[1] <= w[0]) {
            return Err(Error::arg(
                "MultiFactorScheduler",
                format!("steps must be non-empty, >= 1 and strictly increasing, got {steps:?}"),
            ));
        }
        if !(factor.is_finite() && factor > 0.0 && factor <= 1.0) {
            return Err(Error::arg(
                "MultiFactorScheduler",
                format!("factor must be in (0, 1], got {factor}"),
            ));
        }
        check_base(base_lr)?;
        Ok(MultiFactorScheduler {
            steps,
            factor,
            base_lr,
            warmup: Warmup::none(),
        })
    }
    /// With a warmup.
    pub fn with_warmup(mut self, warmup: Warmup) -> Result<Self> {
        warmup.check(self.base_lr)?;
        self.warmup = warmup;
        Ok(self)
    }
}

impl LrScheduler for MultiFactorScheduler {
    fn lr(&self, n: u64) -> f64 {
        if n < self.warmup.steps {
            return self.warmup.lr(self.base_lr, n);
        }
        let k = self.steps.iter().filter(|&&s| n > s).count();
        self.base_lr * self.factor.powi(k as i32)
    }
    fn base_lr(&self) -> f64 {
        self.base_lr
    }
    fn set_base_lr(&mut self, lr: f64) {
        self.base_lr = lr;
    }
}

/// Shared shape of Poly and Cosine: decay from `base_lr` to `final_lr` over
/// `max_update - warmup.steps` updates, then stay at `final_lr`.
fn decay_checks(
    op: &'static str,
    max_update: u64,
    base: f64,
    final_lr: f64,
    w: &Warmup,
) -> Result<()> {
    check_base(base)?;
    if max_update < 1 || w.steps >= max_update {
        return Err(Error::arg(
            op,
            format!(
                "max_update {max_update} must be >= 1 and > warmup steps {}",
                w.steps
            ),
        ));
    }
    if !final_lr.is_finite() || final_lr > base {
        return Err(Error::arg(
            op,
            format!("final_lr {final_lr} must be finite and <= base_lr {base}"),
        ));
    }
    w.check(base)
}

/// Polynomial decay `final + (base - final)*(1 - p)^pwr`, `p` the fraction of decay updates done
/// (MXNet `PolyScheduler`).
#[derive(Debug, Clone)]
pub struct PolyScheduler {
    /// Update count at which `final_lr` is reached.
    pub max_update: u64,
    /// Base rate.
    pub base_lr: f64,
    /// Power (2 by default).
    pub pwr: f64,
    /// Final rate (0 by default).
    pub final_lr: f64,
    /// Warmup.
    pub warmup: Warmup,
}

impl PolyScheduler {
    /// Quadratic decay to 0 at `max_update`.
    pub fn new(max_update: u64, base_lr: f64) -> Result<Self> {
        Self::with(max_update, base_lr, 2.0, 0.0, Warmup::none())
    }
    /// All options.
    pub fn with(
        max_update: u64,
        base_lr: f64,
        pwr: f64,
        final_lr: f64,
        warmup: Warmup,
    ) -> Result<Self> {
        decay_checks("PolyScheduler", max_update, base_lr, final_lr, &warmup)?;
        Ok(PolyScheduler {
            max_update,
            base_lr,
            pwr,
            final_lr,
            warmup,
        })
    }
}

impl LrScheduler for PolyScheduler {
    fn lr(&self, n: u64) -> f64 {
        if n < self.warmup.steps {
            return self.warmup.lr(self.base_lr, n);
        }
        if n > self.max_update {
            return self.final_lr;
        }
        let span = (self.max_update - self.warmup.steps) as f64;
        let p = (n - self.warmup.steps) as f64 / span;
        self.final_lr + (self.base_lr - self.final_lr) * (1.0 - p).powf(self.pwr)
    }
    fn base_lr(&self) -> f64 {
        self.base_lr
    }
    fn set_base_lr(&mut self, lr: f64) {
        self.base_lr = lr;
    }
}

/// Cosine decay `final + (base - final)*(1 + cos(pi*p))/2` (MXNet `CosineScheduler`).
#[derive(Debug, Clone)]
pub struct CosineScheduler {
    /// Update count at which `final_lr` is reached.
    pub max_update: u64,
    /// Base rate.
    pub base_lr: f64,
    /// Final rate (0 by default).
    pub final_lr: f64,
    /// Warmup.
    pub warmup: Warmup,
}

impl CosineScheduler {
    /// Cosine decay to 0 at `max_update`.
    pub fn new(max_update: u64, base_lr: f64) -> Result<Self> {
        Self::with(max_update, base_lr, 0.0, Warmup::none())
    }
    /// All options.
    pub fn with(max_update: u64, base_lr: f64, final_lr: f64, warmup: Warmup) -> Result<Self> {
        decay_checks("CosineScheduler", max_update, base_lr, final_lr, &warmup)?;
        Ok(CosineScheduler {
            max_update,
            base_lr,
            final_lr,
            warmup,
        })
    }
}

impl LrScheduler for CosineScheduler {
    fn lr(&self, n: u64) -> f64 {
        if n < self.warmup.steps {
            return self.warmup.lr(self.base_lr, n);
        }
        if n > self.max_update {
            return self.final_lr;
        }
        let span = (self.max_update - self.warmup.steps) as f64;
        let p = (n - self.warmup.steps) as f64 / span;
        self.final_lr
            + (self.base_lr - self.final_lr) * (1.0 + (std::f64::consts::PI * p).cos()) / 2.0
    }
    fn base_lr(&self) -> f64 {
        self.base_lr
    }
    fn set_base_lr(&mut self, lr: f64) {
        self.base_lr = lr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MXNet's stateful FactorScheduler loop, transcribed, to check the closed form.
    fn mxnet_factor(step: u64, factor: f64, base: f64, stop: f64, upto: u64) -> Vec<f64> {
        let (mut count, mut lr, mut out) = (0u64, base, vec![]);
        for n in 0..=upto {
            while n > count + step {
                count += step;
                lr *= factor;
                if lr < stop {
                    lr = stop;
                }
            }
            out.push(lr);
        }
        out
    }

    #[test]
    fn factor_matches_mxnet_loop() {
        let s = FactorScheduler::new(3, 0.5, 0.1).unwrap();
        let s = FactorScheduler {
            stop_factor_lr: 0.01,
            ..s
        };
        let want = mxnet_factor(3, 0.5, 0.1, 0.01, 40);
        for (n, w) in want.iter().enumerate() {
            assert!(
                (s.lr(n as u64) - w).abs() < 1e-15,
                "n={n}: {} vs {w}",
                s.lr(n as u64)
            );
        }
    }

    #[test]
    fn multifactor_and_warmup() {
        let s = MultiFactorScheduler::new(vec![2, 5], 0.1, 1.0)
            .unwrap()
            .with_warmup(Warmup::linear(2, 0.5))
            .unwrap();
        let got: Vec<f64> = (0..8).map(|n| s.lr(n)).collect();
        let want = [0.5, 0.75, 1.0, 0.1, 0.1, 0.1, 0.01, 0.01];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?}");
        }
        assert!(MultiFactorScheduler::new(vec![3, 3], 0.1, 1.0).is_err());
    }

    #[test]
    fn poly_and_cosine_endpoints() {
        let p = PolyScheduler::with(12, 1.0, 2.0, 0.1, Warmup::constant(2, 0.01)).unwrap();
        assert_eq!(p.lr(1), 0.01);
        assert!((p.lr(2) - 1.0).abs() < 1e-12);
        assert!((p.lr(7) - (0.1 + 0.9 * 0.25)).abs() < 1e-12);
        assert!((p.lr(12) - 0.1).abs() < 1e-12);
        assert_eq!(p.lr(100), 0.1);
        let c = CosineScheduler::with(10, 2.0, 0.0, Warmup::linear(2, 0.0)).unwrap();
        assert_eq!(c.lr(1), 1.0);
        assert!((c.lr(6) - 1.0).abs() < 1e-12);
        assert!(c.lr(10).abs() < 1e-12);
        assert!(CosineScheduler::new(0, 1.0).is_err());
        assert!(PolyScheduler::with(5, 1.0, 2.0, 2.0, Warmup::none()).is_err());
    }
}
