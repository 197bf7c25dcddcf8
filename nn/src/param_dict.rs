//! [`ParamDict`]: parameters by hierarchical name (`0.dense0.weight`), in definition order.

use sparrow_core::autograd::GradReq;
use sparrow_core::{Device, Error, Result};

use crate::init::Initializer;
use crate::parameter::Parameter;

/// An ordered map from hierarchical names to shared [`Parameter`] handles.
#[derive(Debug, Clone, Default)]
pub struct ParamDict {
    items: Vec<(String, Parameter)>,
}

/// Glob match with `*` (any run) and `?` (one char); `|` separates alternatives.
///
/// ```
/// use sparrow_nn::glob_match;
/// assert!(glob_match("*.weight|*.bias", "dense0.bias"));
/// assert!(!glob_match("dense1.*", "dense0.weight"));
/// ```
pub fn glob_match(pattern: &str, name: &str) -> bool {
    pattern
        .split('|')
        .any(|p| glob_one(p.as_bytes(), name.as_bytes()))
}

fn glob_one(p: &[u8], s: &[u8]) -> bool {
    // Iterative matcher with single-star backtracking: linear in practice.
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

impl ParamDict {
    /// Empty.
    pub fn new() -> ParamDict {
        ParamDict::default()
    }

    /// Add a parameter under `name`. A name seen before is an error (two blocks would write the
    /// same entry of a parameter file); the same parameter shared under one name is allowed.
    pub fn insert(&mut self, name: String, p: Parameter) -> Result<()> {
        if let Some((_, q)) = self.items.iter().find(|(n, _)| *n == name) {
            if q.same(&p) {
                return Ok(());
            }
            return Err(Error::arg(
                "ParamDict::insert",
                format!("two different parameters are both named '{name}'"),
            ));
        }
        self.items.push((name, p));
        Ok(())
    }

    /// The parameter called `name`.
    pub fn get(&self, name: &str) -> Option<&Parameter> {
        self.items.iter().find(|(n, _)| n == name).map(|(_, p)| p)
    }

    /// Names and parameters in definition order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Parameter)> {
        self.items.iter().map(|(n, p)| (n.as_str(), p))
    }

    /// The names in order.
    pub fn names(&self) -> Vec<String> {
        self.items.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The parameters whose names match a glob (`*`, `?`, alternatives with `|`), e.g.
    /// `"*.weight"` or `"dense0.*|dense1.*"`.
    pub fn filter(&self, pattern: &str) -> ParamDict {
        ParamDict {
            items: self
                .items
                .iter()
                .filter(|(n, _)| glob_match(pattern, n))
                .cloned()
                .collect(),
        }
    }

    /// Initialize every parameter with `init` (a parameter's own initializer wins) on `device`,
    /// or with `None` on the calling thread's default device ([`Device::current`]).
    pub fn initialize(&self, init: &Initializer, device: impl Into<Option<Device>>) -> Result<()> {
        let device = device.into().unwrap_or_else(Device::current);
        for (_, p) in &self.items {
            p.initialize(init, device)?;
        }
        Ok(())
    }

    /// Clear every gradient.
    pub fn zero_grad(&self) {
        for (_, p) in &self.items {
            p.zero_grad();
        }
    }

    /// Set the gradient request of every parameter.
    pub fn set_grad_req(&self, req: GradReq) {
        for (_, p) in &self.items {
            p.set_grad_req(req);
        }
    }

    /// Set the learning-rate multiplier of every parameter.
    pub fn set_lr_mult(&self, m: f64) {
        for (_, p) in &self.items {
            p.set_lr_mult(m);
        }
    }

    /// Set the weight-decay multiplier of every parameter.
    pub fn set_wd_mult(&self, m: f64) {
        for (_, p) in &self.items {
            p.set_wd_mult(m);
        }
    }

    /// Total number of elements (known shapes only).
    pub fn total_size(&self) -> usize {
        self.items.iter().map(|(_, p)| p.size()).sum()
    }
}

impl IntoIterator for ParamDict {
    type Item = (String, Parameter);
    type IntoIter = std::vec::IntoIter<(String, Parameter)>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", "a.b"));
        assert!(glob_match("dense?.weight", "dense3.weight"));
        assert!(!glob_match("dense?.weight", "dense13.weight"));
        assert!(glob_match("*weight*", "x.weight.y"));
        assert!(glob_match("a*b*c", "aXXbYYbc"));
        assert!(!glob_match("a*b*c", "aXXbYYbd"));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let mut d = ParamDict::new();
        let p = Parameter::new("w", &[1]);
        d.insert("w".into(), p.clone()).unwrap();
        d.insert("w".into(), p).unwrap();
        assert!(d.insert("w".into(), Parameter::new("w", &[1])).is_err());
        assert_eq!(d.len(), 1);
    }
}
