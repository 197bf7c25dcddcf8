//! The [`Block`] trait, [`Sequential`] containers and `summary`.
//!
//! Names are hierarchical: a container names each child after its kind and a per-kind counter
//! (`dense0`, `dense1`, `activation0`), and a parameter's full name is the path of its block plus
//! its local name: `dense0.weight`, `sequential0.dense1.bias`. These are the keys of
//! [`ParamDict`] and of parameter files.
//!
//! ## Several inputs and outputs
//! A block with one input implements [`Block::forward`]; a block with several inputs or
//! outputs (Gluon's `forward(self, x, states)`, PyTorch's `forward(self, user, item)`)
//! implements [`Block::forward_multi`] instead, taking a slice of inputs and returning the
//! outputs in order, and unpacks its inputs with [`inputs`]. Each method has a default in terms
//! of the other, so every block can be called both ways: `forward` on a multi-input block is
//! `forward_multi` with one input (an error naming the block when it needs more), and
//! `forward_multi` on a one-input block checks for exactly one input. The trait stays
//! object-safe (`dyn Block`).

use std::cell::Cell;

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
    /// Output shape (the first output's for a block with several).
    pub out_shape: Vec<usize>,
    /// Shapes of the outputs after the first (multi-output blocks; empty otherwise).
    pub other_out_shapes: Vec<Vec<usize>>,
    /// Elements of the block's own parameters (children excluded for containers).
    pub params: usize,
    /// Bytes of those parameters.
    pub bytes: usize,
}

/// A layer or a model: a forward computation plus named parameters and children.
///
/// Implementors provide `forward` (one input) or `forward_multi` (several inputs or outputs),
/// `kind`, and `params` and/or `children`; the rest (parameter collection, initialization,
/// summary) is derived. `#[derive(Block)]` (the `sparrow-derive` crate, re-exported here)
/// writes `kind`, `params` and `children` from a struct's fields.
///
/// A block with two inputs and two outputs:
///
/// ```
/// use sparrow_core::{NDArray, Result};
/// use sparrow_nn::{block::inputs, Block};
///
/// /// `(a + b, a * b)`.
/// struct SumProd;
///
/// impl Block for SumProd {
///     fn forward_multi(&self, xs: &[NDArray]) -> Result<Vec<NDArray>> {
///         let [a, b] = inputs(self.kind(), xs)?;
///         Ok(vec![a.add(b)?, a.mul(b)?])
///     }
///     fn kind(&self) -> &'static str {
///         "sumprod"
///     }
/// }
///
/// let a = NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
/// let b = NDArray::from_vec(vec![3.0f32, 4.0], &[2]).unwrap();
/// let out = SumProd.forward_multi(&[a.clone(), b]).unwrap();
/// assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
/// assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![3.0, 8.0]);
/// // Called with one input, it says what it needs.
/// let err = SumProd.forward(&a).unwrap_err().to_string();
/// assert!(err.contains("sumprod: invalid argument: takes 2 inputs, got 1"), "{err}");
/// ```
pub trait Block: Send + Sync {
    /// Compute the output of one input. Runs under autograd when called inside
    /// `autograd::record`.
    ///
    /// Implement this for a block with one input and one output. The default runs
    /// [`Block::forward_multi`] with `x` alone and returns its only output (an error when it
    /// returns several).
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let me = (
            self as *const Self as *const () as usize,
            std::any::type_name::<Self>(),
        );
        // Restores the outer value when this call ends, by return or by unwinding.
        let guard = DefaultForward::enter(me);
        if guard.outer == Some(me) {
            // This default `forward` is running already, innermost, for this very block: its
            // `forward_multi` called `forward` back (a `#[derive(Block)]` struct without an
            // inherent `fn forward`), which would recurse until the stack overflows.
            return Err(neither_forward::<Self>(self.kind()));
        }
        let out = self.forward_multi(std::slice::from_ref(x));
        drop(guard);
        let mut out = out?;
        match out.len() {
            1 => Ok(out.pop().expect("one output")),
            n => Err(Error::arg(
                self.kind(),
                format!("forward returns one output but this block has {n}; call forward_multi"),
            )),
        }
    }

    /// Compute the outputs of several inputs (in the block's order). Runs under autograd when
    /// called inside `autograd::record`.
    ///
    /// Implement this for a block with several inputs or outputs; unpack the inputs with
    /// [`inputs`]. The default calls [`Block::forward`] on exactly one input.
    fn forward_multi(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
        let me = (
            self as *const Self as *const () as usize,
            std::any::type_name::<Self>(),
        );
        if DEFAULT_FORWARD.with(|c| c.get()) == Some(me) {
            // Reached from the default `forward` of this very block: neither is implemented,
            // and calling `forward` again would recurse until the stack overflows.
            return Err(neither_forward::<Self>(self.kind()));
        }
        match inputs {
            [x] => Ok(vec![self.forward(x)?]),
            _ => Err(Error::arg(
                self.kind(),
                format!("takes 1 input, got {}", inputs.len()),
            )),
        }
    }

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

    /// Forward that appends summary rows (containers recurse, leaves add one row): the
    /// one-input form of [`Block::forward_summary_multi`].
    fn forward_summary(
        &self,
        x: &NDArray,
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<NDArray> {
        let mut out = self.forward_summary_multi(std::slice::from_ref(x), name, rows)?;
        match out.len() {
            1 => Ok(out.pop().expect("one output")),
            n => Err(Error::arg(
                self.kind(),
                format!("summary of one output, but this block has {n}; call summary_multi"),
            )),
        }
    }

    /// Forward of several inputs that appends summary rows (containers recurse, leaves add one
    /// row).
    fn forward_summary_multi(
        &self,
        inputs: &[NDArray],
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<Vec<NDArray>> {
        let out = self.forward_multi(inputs)?;
        let ps = self.collect_params()?;
        rows.push(SummaryRow {
            name: name.to_string(),
            desc: self.describe(),
            out_shape: out.first().map(|o| o.shape()).unwrap_or_default(),
            other_out_shapes: out.iter().skip(1).map(|o| o.shape()).collect(),
            params: ps.total_size(),
            bytes: ps.iter().map(|(_, p)| p.nbytes()).sum(),
        });
        Ok(out)
    }

    /// Run `x` through the model in predict mode without recording and return a table of layers,
    /// output shapes and parameter counts/bytes (Gluon's `summary`; print it).
    fn summary(&self, x: &NDArray) -> Result<String> {
        self.summary_multi(std::slice::from_ref(x))
    }

    /// [`Block::summary`] of a block with several inputs.
    fn summary_multi(&self, inputs: &[NDArray]) -> Result<String> {
        let mut rows = Vec::new();
        autograd::pause(|| self.forward_summary_multi(inputs, self.kind(), &mut rows))?;
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|x| x.shape()).collect();
        Ok(format_summary(&shapes, &rows))
    }
}

thread_local! {
    /// The block (address, type) whose default [`Block::forward`] is running innermost on this
    /// thread, so that the default [`Block::forward_multi`] of the same block can tell that
    /// neither method is implemented (an error instead of endless recursion).
    static DEFAULT_FORWARD: Cell<Option<(usize, &'static str)>> = const { Cell::new(None) };
}

/// While alive, `DEFAULT_FORWARD` holds one block; dropping it restores the value before.
struct DefaultForward {
    outer: Option<(usize, &'static str)>,
}

impl DefaultForward {
    fn enter(me: (usize, &'static str)) -> DefaultForward {
        DefaultForward {
            outer: DEFAULT_FORWARD.with(|c| c.replace(Some(me))),
        }
    }
}

impl Drop for DefaultForward {
    fn drop(&mut self) {
        DEFAULT_FORWARD.with(|c| c.set(self.outer));
    }
}

/// The error of a block whose `forward` and `forward_multi` only call each other.
fn neither_forward<T: ?Sized>(kind: &'static str) -> Error {
    Error::arg(
        kind,
        format!(
            "{} implements neither Block::forward nor Block::forward_multi (a \
             #[derive(Block)] struct needs an inherent `fn forward`)",
            std::any::type_name::<T>()
        ),
    )
}

/// The inputs of a [`Block::forward_multi`] as an array of exactly `N`, or an error naming
/// `op` (the block's kind) and how many it got:
/// `let [users, items] = inputs(self.kind(), xs)?;`.
pub fn inputs<'a, const N: usize>(op: &'static str, xs: &'a [NDArray]) -> Result<&'a [NDArray; N]> {
    xs.try_into().map_err(|_| {
        Error::arg(
            op,
            format!(
                "takes {N} input{}, got {}",
                if N == 1 { "" } else { "s" },
                xs.len()
            ),
        )
    })
}

fn format_summary(in_shapes: &[Vec<usize>], rows: &[SummaryRow]) -> String {
    let shapes = |first: &Vec<usize>, rest: &[Vec<usize>]| {
        let mut s = format!("{first:?}");
        for r in rest {
            s += &format!(", {r:?}");
        }
        s
    };
    let mut lines = vec![(
        "Layer".to_string(),
        "Output shape".to_string(),
        "Params".to_string(),
        "Bytes".to_string(),
    )];
    lines.push((
        "input".into(),
        in_shapes
            .split_first()
            .map(|(f, r)| shapes(f, r))
            .unwrap_or_default(),
        "0".into(),
        "0".into(),
    ));
    for r in rows {
        lines.push((
            format!("{} {}", r.name, r.desc),
            shapes(&r.out_shape, &r.other_out_shapes),
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

/// A stack of blocks applied in order (Gluon's `nn.Sequential`); nests. With several inputs
/// ([`Block::forward_multi`]) each block's outputs are the next block's inputs.
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
    fn forward_multi(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
        let mut h = inputs.to_vec();
        for (_, b) in &self.blocks {
            h = b.forward_multi(&h)?;
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
    fn forward_summary_multi(
        &self,
        inputs: &[NDArray],
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<Vec<NDArray>> {
        let mut h = inputs.to_vec();
        for (n, b) in &self.blocks {
            h = b.forward_summary_multi(&h, &format!("{name}.{n}"), rows)?;
        }
        Ok(h)
    }
}

impl<B: Block + ?Sized> Block for Box<B> {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        (**self).forward(x)
    }
    fn forward_multi(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
        (**self).forward_multi(inputs)
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
    fn forward_summary_multi(
        &self,
        inputs: &[NDArray],
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<Vec<NDArray>> {
        (**self).forward_summary_multi(inputs, name, rows)
    }
}
