//! The [`Block`] trait, [`Sequential`] containers and `summary`.
//!
//! Names are hierarchical: a container names each child after its kind and a per-kind counter
//! (`dense0`, `dense1`, `activation0`), and a parameter's full name is the path of its block plus
//! its local name: `dense0.weight`, `sequential0.dense1.bias`. These are the keys of
//! [`ParamDict`] and of parameter files.

use sparrow_core::{autograd, Device, Error, NDArray, Result};

use crate::init::Initializer;
use crate::param_dict::ParamDict;
use crate::parameter::Parameter;

/// One line of [`Block::summary`].
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Hierarchical block name (`sequential0.dense1`).
    pub name: String,
    /// Block description (`Dense(128 -> 10, relu)`).
    pub desc: String,
    /// Output shape.
    pub out_shape: Vec<usize>,
    /// Elements of the block's own parameters (children excluded for containers).
    pub params: usize,
    /// Bytes of those parameters.
    pub bytes: usize,
}

/// A layer or a model: a forward computation plus named parameters and children.
///
/// Implementors provide `forward`, `kind`, and `params` and/or `children`; the rest (parameter
/// collection, initialization, summary) is derived.
pub trait Block: Send + Sync {
    /// Compute the output. Runs under autograd when called inside `autograd::record`.
    fn forward(&self, x: &NDArray) -> Result<NDArray>;

    /// Lower-case kind used for automatic names (`dense`, `embedding`, `sequential`).
    fn kind(&self) -> &'static str;

    /// The block's own parameters with local names (`weight`, `bias`).
    fn params(&self) -> Vec<(String, Parameter)> {
        Vec::new()
    }

    /// Child blocks with their names.
    fn children(&self) -> Vec<(String, &dyn Block)> {
        Vec::new()
    }

    /// One-line description for `summary` (defaults to the kind).
    fn describe(&self) -> String {
        self.kind().to_string()
    }

    /// All parameters of this block and its children, by hierarchical name.
    fn collect_params(&self) -> Result<ParamDict> {
        let mut d = ParamDict::new();
        for (n, p) in self.params() {
            d.insert(n, p)?;
        }
        for (cn, c) in self.children() {
            for (n, p) in c.collect_params()? {
                d.insert(format!("{cn}.{n}"), p)?;
            }
        }
        Ok(d)
    }

    /// The parameters whose hierarchical names match a glob (`*.weight`, `dense0.*|*.bias`).
    fn collect_params_matching(&self, pattern: &str) -> Result<ParamDict> {
        Ok(self.collect_params()?.filter(pattern))
    }

    /// Initialize every parameter with `init` unless it has its own initializer, on `device`.
    /// Parameters with unknown dims are initialized at the first forward, on that device. Pass
    /// [`Device::current`]`()` for the default-device scope's device ([`sparrow_core::with_device`]);
    /// `device` is a plain [`Device`] here, not an `Option`, to keep `Block` usable as
    /// `dyn Block`.
    fn initialize(&self, init: &Initializer, device: Device) -> Result<()> {
        self.collect_params()?.initialize(init, device)
    }

    /// Forward that appends summary rows (containers recurse, leaves add one row).
    fn forward_summary(
        &self,
        x: &NDArray,
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<NDArray> {
        let out = self.forward(x)?;
        let ps = self.collect_params()?;
        rows.push(SummaryRow {
            name: name.to_string(),
            desc: self.describe(),
            out_shape: out.shape(),
            params: ps.total_size(),
            bytes: ps.iter().map(|(_, p)| p.nbytes()).sum(),
        });
        Ok(out)
    }

    /// Run `x` through the model in predict mode without recording and return a table of layers,
    /// output shapes and parameter counts/bytes (Gluon's `summary`; print it).
    fn summary(&self, x: &NDArray) -> Result<String> {
        let mut rows = Vec::new();
        autograd::pause(|| self.forward_summary(x, self.kind(), &mut rows))?;
        Ok(format_summary(&x.shape(), &rows))
    }
}

fn format_summary(in_shape: &[usize], rows: &[SummaryRow]) -> String {
    let mut lines = vec![(
        "Layer".to_string(),
        "Output shape".to_string(),
        "Params".to_string(),
        "Bytes".to_string(),
    )];
    lines.push((
        "input".into(),
        format!("{in_shape:?}"),
        "0".into(),
        "0".into(),
    ));
    for r in rows {
        lines.push((
            format!("{} {}", r.name, r.desc),
            format!("{:?}", r.out_shape),
            r.params.to_string(),
            r.bytes.to_string(),
        ));
    }
    let w0 = lines.iter().map(|l| l.0.len()).max().unwrap_or(0);
    let w1 = lines.iter().map(|l| l.1.len()).max().unwrap_or(0);
    let w2 = lines.iter().map(|l| l.2.len()).max().unwrap_or(0);
    let mut s = String::new();
    for (i, l) in lines.iter().enumerate() {
        s += &format!("{:<w0$}  {:<w1$}  {:>w2$}  {:>}\n", l.0, l.1, l.2, l.3);
        if i == 0 {
            s += &format!("{}\n", "-".repeat(w0 + w1 + w2 + 16));
        }
    }
    let total: usize = rows.iter().map(|r| r.params).sum();
    let bytes: usize = rows.iter().map(|r| r.bytes).sum();
    s += &format!("Total params: {total} ({bytes} bytes)\n");
    s
}

/// A stack of blocks applied in order (Gluon's `nn.Sequential`); nests.
///
/// ```
/// use sparrow_nn::{Block, Dense, Sequential, Initializer};
/// use sparrow_core::{Device, NDArray};
/// let mut net = Sequential::new();
/// net.add(Dense::new(8).activation("relu"));
/// net.add(Dense::new(2));
/// net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
/// let y = net.forward(&NDArray::ones(&[4, 5], Default::default()).unwrap()).unwrap();
/// assert_eq!(y.shape(), vec![4, 2]);
/// assert_eq!(net.collect_params().unwrap().names(),
///            vec!["dense0.weight", "dense0.bias", "dense1.weight", "dense1.bias"]);
/// ```
#[derive(Default)]
pub struct Sequential {
    blocks: Vec<(String, Box<dyn Block>)>,
}

impl Sequential {
    /// Empty.
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Append a block, named `<kind><n>` with `n` counting earlier blocks of the same kind.
    pub fn add<B: Block + 'static>(&mut self, block: B) -> &mut Self {
        self.add_boxed(Box::new(block))
    }

    /// Append a boxed block (automatic name).
    pub fn add_boxed(&mut self, block: Box<dyn Block>) -> &mut Self {
        let kind = block.kind();
        let n = self.blocks.iter().filter(|(_, b)| b.kind() == kind).count();
        let mut name = format!("{kind}{n}");
        // A user-chosen name may already hold `kind{n}`; pick the next free one.
        let mut k = n;
        while self.blocks.iter().any(|(m, _)| *m == name) {
            k += 1;
            name = format!("{kind}{k}");
        }
        self.blocks.push((name, block));
        self
    }

    /// Append a block under a chosen name (must be unique, non-empty and free of dots).
    pub fn add_named<B: Block + 'static>(&mut self, name: &str, block: B) -> Result<&mut Self> {
        if name.is_empty() || name.contains('.') || self.blocks.iter().any(|(m, _)| m == name) {
            return Err(Error::arg(
                "Sequential::add_named",
                format!("block name '{name}' is empty, contains '.', or is already used"),
            ));
        }
        self.blocks.push((name.to_string(), Box::new(block)));
        Ok(self)
    }

    /// Number of child blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The child at position `i`.
    pub fn get(&self, i: usize) -> Option<&dyn Block> {
        self.blocks.get(i).map(|(_, b)| b.as_ref())
    }
}

impl Block for Sequential {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let mut h = x.clone();
        for (_, b) in &self.blocks {
            h = b.forward(&h)?;
        }
        Ok(h)
    }
    fn kind(&self) -> &'static str {
        "sequential"
    }
    fn children(&self) -> Vec<(String, &dyn Block)> {
        self.blocks
            .iter()
            .map(|(n, b)| (n.clone(), b.as_ref()))
            .collect()
    }
    fn forward_summary(
        &self,
        x: &NDArray,
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<NDArray> {
        let mut h = x.clone();
        for (n, b) in &self.blocks {
            h = b.forward_summary(&h, &format!("{name}.{n}"), rows)?;
        }
        Ok(h)
    }
}

impl<B: Block + ?Sized> Block for Box<B> {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        (**self).forward(x)
    }
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        (**self).params()
    }
    fn children(&self) -> Vec<(String, &dyn Block)> {
        (**self).children()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn forward_summary(
        &self,
        x: &NDArray,
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<NDArray> {
        (**self).forward_summary(x, name, rows)
    }
}
