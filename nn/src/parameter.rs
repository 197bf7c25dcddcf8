//! [`Parameter`]: a named, shared, lazily shaped weight with its gradient settings.
//!
//! A `Parameter` is a cheap handle (`Arc`): the block that owns it, the [`crate::ParamDict`]
//! returned by `collect_params` and the optimizer's trainer all see the same weight. The weight
//! itself is an [`NDArray`] handle that optimizers update in place (`with_slice_mut`), so every
//! holder sees the new values without copies.
//!
//! Storage: the weight is always stored densely, also for `stype = RowSparse` (that flag says how
//! the weight is *used*: pulled by rows with [`Parameter::row_sparse_data`] and saved as
//! `(indices, data)` pairs on request). The gradient is stored in `grad_stype`: a row_sparse
//! gradient starts empty and holds only the rows a backward touched; it is never allocated
//! densely.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use sparrow_core::autograd::GradReq;
use sparrow_core::{sparse, DType, Device, Error, NDArray, Result, SType};

use crate::init::{self, InitDesc, Initializer};
use crate::row_source::{RowSource, Rows};

/// Settings of a parameter and its current value.
#[derive(Debug, Clone)]
struct State {
    shape: Vec<usize>,
    dtype: DType,
    init: Option<Initializer>,
    stype: SType,
    grad_stype: SType,
    grad_req: GradReq,
    lr_mult: f64,
    wd_mult: f64,
    /// Fan-in is `shape[0]` instead of `shape[1]` (weights stored as `(in, out)`).
    fan_in_first: bool,
    data: Option<NDArray>,
    /// Where the weight (and its gradient) is created: the device `initialize` was given.
    /// For a host-resident weight (`host_resident`), the device its layers compute on.
    device: Device,
    /// The weight was over `device`'s memory budget when it was created, so it lives in host
    /// memory and layers stage a batch's rows on `device` ([`Parameter::host_resident`]).
    host_resident: bool,
    /// `initialize` was called while the shape had unknown dims: the initializer and seed to
    /// run once the first forward fixes the shape.
    deferred: Option<(Initializer, u64)>,
    /// The weight is split across the workers of a store and no process holds it whole
    /// ([`Parameter::set_row_source`]): layers pull a batch's rows through this.
    rows: Option<Rows>,
}

impl State {
    /// Where the weight's memory is: the host for a host-resident weight, else `device`.
    fn home(&self) -> Device {
        if self.host_resident {
            Device::Cpu
        } else {
            self.device
        }
    }
}

/// A trainable (or auxiliary, with `grad_req = Null`) array of a block.
///
/// ```
/// use sparrow_nn::{Parameter, Initializer};
/// use sparrow_core::{DType, Device};
/// let w = Parameter::new("weight", &[3, 4]);
/// w.initialize(&Initializer::Constant(0.5), Device::Cpu).unwrap();
/// assert_eq!(w.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5; 12]);
/// assert!(w.grad().is_some());
/// ```
#[derive(Clone)]
pub struct Parameter {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    state: RwLock<State>,
}

/// A parameter's weight and update settings, read together ([`Parameter::update_view`]).
#[derive(Clone)]
pub struct UpdateView {
    /// The weight; `None` before initialization.
    pub data: Option<NDArray>,
    /// How backward fills the gradient.
    pub grad_req: GradReq,
    /// Learning-rate multiplier.
    pub lr_mult: f64,
    /// Weight-decay multiplier.
    pub wd_mult: f64,
}

impl std::fmt::Debug for Parameter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        write!(
            f,
            "Parameter({}, shape={:?}, dtype={}, stype={:?}, grad_stype={:?}, grad_req={:?})",
            self.inner.name,
            s.shape,
            s.dtype.name(),
            s.stype,
            s.grad_stype,
            s.grad_req
        )
    }
}

impl Parameter {
    /// A dense f32 parameter with `grad_req = Write`. Dims of 0 in `shape` are unknown and are
    /// inferred at the first forward (deferred initialization).
    pub fn new(name: &str, shape: &[usize]) -> Parameter {
        Parameter {
            inner: Arc::new(Inner {
                name: name.to_string(),
                state: RwLock::new(State {
                    shape: shape.to_vec(),
                    dtype: DType::F32,
                    init: None,
                    stype: SType::Dense,
                    grad_stype: SType::Dense,
                    grad_req: GradReq::Write,
                    lr_mult: 1.0,
                    wd_mult: 1.0,
                    fan_in_first: false,
                    data: None,
                    device: Device::Cpu,
                    host_resident: false,
                    deferred: None,
                    rows: None,
                }),
            }),
        }
    }

    fn state(&self) -> RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|e| e.into_inner())
    }
    fn state_mut(&self) -> RwLockWriteGuard<'_, State> {
        self.inner.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Builder: element type (before initialization).
    pub fn with_dtype(self, dtype: DType) -> Self {
        self.state_mut().dtype = dtype;
        self
    }
    /// Builder: this parameter's own initializer (overrides the one given to `initialize`).
    pub fn with_init(self, init: Initializer) -> Self {
        self.state_mut().init = Some(init);
        self
    }
    /// Builder: storage type of the weight as used (`RowSparse`: pulled by rows).
    pub fn with_stype(self, stype: SType) -> Self {
        self.state_mut().stype = stype;
        self
    }
    /// Builder: storage type of the gradient.
    pub fn with_grad_stype(self, stype: SType) -> Self {
        self.state_mut().grad_stype = stype;
        self
    }
    /// Builder: gradient request (write, add, null).
    pub fn with_grad_req(self, req: GradReq) -> Self {
        self.state_mut().grad_req = req;
        self
    }
    /// Builder: learning-rate multiplier.
    pub fn with_lr_mult(self, m: f64) -> Self {
        self.state_mut().lr_mult = m;
        self
    }
    /// Builder: weight-decay multiplier.
    pub fn with_wd_mult(self, m: f64) -> Self {
        self.state_mut().wd_mult = m;
        self
    }
    /// Builder: the weight is stored as `(in, out)`, so fan-in is `shape[0]` for initializers
    /// (the layout of a sparse-input `Dense`).
    pub fn with_fan_in_first(self, yes: bool) -> Self {
        self.state_mut().fan_in_first = yes;
        self
    }

    /// The local name (`weight`, `bias`, ...). Hierarchical names come from
    /// [`crate::Block::collect_params`].
    pub fn name(&self) -> &str {
        &self.inner.name
    }
    /// The shape; dims still unknown are 0.
    pub fn shape(&self) -> Vec<usize> {
        self.state().shape.clone()
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.state().dtype
    }
    /// Storage type of the weight as used.
    pub fn stype(&self) -> SType {
        self.state().stype
    }
    /// Storage type of the gradient.
    pub fn grad_stype(&self) -> SType {
        self.state().grad_stype
    }
    /// Gradient request.
    pub fn grad_req(&self) -> GradReq {
        self.state().grad_req
    }
    /// Learning-rate multiplier.
    pub fn lr_mult(&self) -> f64 {
        self.state().lr_mult
    }
    /// Weight-decay multiplier.
    pub fn wd_mult(&self) -> f64 {
        self.state().wd_mult
    }
    /// Whether the weight is stored `(in, out)` (fan-in first), as a row_sparse-gradient Dense
    /// holds it.
    pub fn fan_in_first(&self) -> bool {
        self.state().fan_in_first
    }
    /// This parameter's own initializer, if set.
    pub fn init(&self) -> Option<Initializer> {
        self.state().init.clone()
    }
    /// Set this parameter's own initializer (a per-parameter override).
    pub fn set_init(&self, init: Option<Initializer>) {
        self.state_mut().init = init;
    }
    /// Set the learning-rate multiplier.
    pub fn set_lr_mult(&self, m: f64) {
        self.state_mut().lr_mult = m;
    }
    /// Set the weight-decay multiplier.
    pub fn set_wd_mult(&self, m: f64) {
        self.state_mut().wd_mult = m;
    }
    /// Change the gradient request; re-attaches the gradient buffer when initialized.
    pub fn set_grad_req(&self, req: GradReq) {
        let mut s = self.state_mut();
        s.grad_req = req;
        if let Some(d) = &s.data {
            d.attach_grad_with(req, s.grad_stype);
        }
    }
    /// Whether the shape has no unknown (0) dims.
    pub fn shape_known(&self) -> bool {
        let s = self.state();
        s.shape.iter().all(|&d| d > 0)
    }
    /// The device the weight is (or will be) created on.
    pub fn device(&self) -> Device {
        self.state().device
    }
    /// Whether the weight lives in host memory while its layers compute on [`Self::device`]:
    /// it was over that device's memory budget ([`Device::set_memory_budget`]) when created.
    /// Such a weight has a row_sparse gradient on the host; each step its layer moves the rows
    /// a batch reads to the device ([`Self::stage_for_csr`], [`Self::stage_for_ids`]) and the
    /// optimizer updates them in host memory.
    pub fn host_resident(&self) -> bool {
        self.state().host_resident
    }

    /// Make this parameter's weight live elsewhere, split across the workers of a store:
    /// the weight this process holds (if any) is dropped, shape and dtype stay, and layers
    /// fetch the rows a batch reads through `source` ([`Self::stage_for_csr`],
    /// [`Self::stage_for_ids`]). Called by the trainer that shards the parameter
    /// (sparrow-optim's `Trainer::shard_parameter`), not by models. The shape must be known
    /// and at least 2-d.
    pub fn set_row_source(&self, source: Arc<dyn RowSource>) -> Result<()> {
        let mut s = self.state_mut();
        if s.shape.len() < 2 || s.shape.contains(&0) {
            return Err(Error::shape(
                "Parameter::set_row_source",
                format!(
                    "parameter '{}' has shape {:?}: rows are pulled from a table of at least \
                     2 known dims",
                    self.inner.name, s.shape
                ),
            ));
        }
        s.data = None;
        s.deferred = None;
        s.host_resident = false;
        s.device = Device::Cpu;
        s.rows = Some(Rows(source));
        Ok(())
    }

    /// Whether the weight is split across the workers of a store ([`Self::set_row_source`]):
    /// no process holds it whole, and [`Self::data`] is an error.
    pub fn is_sharded(&self) -> bool {
        self.state().rows.is_some()
    }

    /// Whether a layer must read this weight a batch's rows at a time
    /// ([`Self::stage_for_csr`], [`Self::stage_for_ids`]) instead of whole: it is
    /// host-resident ([`Self::host_resident`]) or sharded ([`Self::is_sharded`]).
    pub fn stages_rows(&self) -> bool {
        let s = self.state();
        s.host_resident || s.rows.is_some()
    }

    /// For a host-resident weight and a csr batch `x` (on any device): the batch renumbered to
    /// the columns it uses, on [`Self::device`], and those rows of the weight staged there,
    /// differentiable (`x . w == xc . wk`; the weight's gradient comes back as row_sparse over
    /// those rows). Also works for a weight on its device, staging from there. For a sharded
    /// weight the rows are pulled from their owners (collective; on the CPU), a leaf whose
    /// gradient the sharding trainer's next step pushes back.
    pub fn stage_for_csr(&self, x: &NDArray) -> Result<(NDArray, NDArray)> {
        self.refuse_trace();
        if let Some(rows) = self.row_source() {
            self.check_table_batch("Parameter::stage_for_csr", &rows, x)?;
        }
        let (cols, xc) = sparse::compact_columns(&x.to_device(Device::Cpu)?)?;
        if let Some(rows) = self.row_source() {
            return Ok((xc, self.pull_checked(&rows, &cols)?));
        }
        let w = self.data()?;
        let device = self.device();
        let wk = sparse::stage_rows(&w, &cols, device)?;
        Ok((xc.to_device(device)?, wk))
    }

    /// `x . weight` for a csr batch `x` and a weight read a batch's rows at a time
    /// ([`Self::stages_rows`]), differentiable (the weight's gradient is row_sparse over the
    /// batch's columns). A sharded weight's product is computed by the rows' owners
    /// ([`RowSource::csr_dot`](crate::RowSource::csr_dot): collective, on the CPU); a
    /// host-resident one multiplies the rows staged by [`Self::stage_for_csr`].
    pub fn csr_dot(&self, x: &NDArray) -> Result<NDArray> {
        let Some(rows) = self.row_source() else {
            let (xc, wk) = self.stage_for_csr(x)?;
            return xc.dot(&wk);
        };
        self.refuse_trace();
        // A batch of the wrong width is the source's error, raised on every worker at once (a
        // worker failing here alone would leave the others waiting in the collective).
        let shape = self.shape();
        let y = rows.0.csr_dot(x)?;
        let want = [x.dims().first().copied().unwrap_or(0), shape[1]];
        if y.dims()[..] != want || y.dtype() != self.dtype() {
            return Err(Error::shape(
                "Parameter::csr_dot",
                format!(
                    "parameter '{}': {} gave a product {:?} {}, {want:?} {} was expected",
                    self.inner.name,
                    rows.0.describe(),
                    &y.dims()[..],
                    y.dtype().name(),
                    self.dtype().name()
                ),
            ));
        }
        Ok(y)
    }

    /// A table's batch is a csr array with one column per table row.
    fn check_table_batch(&self, op: &'static str, rows: &Rows, x: &NDArray) -> Result<()> {
        let shape = self.shape();
        let dims = x.dims();
        if x.stype() != SType::Csr || dims.len() != 2 || dims[1] != shape[0] {
            return Err(Error::shape(
                op,
                format!(
                    "parameter '{}' is a table of {} rows ({}), so a batch reads it as a csr \
                     array with {} columns; got {:?} {:?}",
                    self.inner.name,
                    shape[0],
                    rows.0.describe(),
                    shape[0],
                    x.stype(),
                    dims
                ),
            ));
        }
        Ok(())
    }

    /// For a host-resident table and integer ids (any shape, on any device): the ids
    /// renumbered to the distinct rows they name, on [`Self::device`], and those rows staged
    /// there, differentiable (`embedding(w, ids) == embedding(wk, local)`). For a sharded
    /// table the rows are pulled from their owners, as in [`Self::stage_for_csr`].
    pub fn stage_for_ids(&self, ids: &NDArray) -> Result<(NDArray, NDArray)> {
        self.refuse_trace();
        if let Some(rows) = self.row_source() {
            // Ids out of range are the store's error, raised on every worker at once (a
            // worker failing here alone would leave the others waiting in the pull).
            let (uniq, local) = sparse::compact_ids(ids, Device::Cpu)?;
            let wk = self.pull_checked(&rows, &uniq)?;
            return Ok((local, wk));
        }
        let w = self.data()?;
        let device = self.device();
        let (uniq, local) = sparse::compact_ids(ids, device)?;
        let wk = sparse::stage_rows(&w, &uniq, device)?;
        Ok((local, wk))
    }

    fn row_source(&self) -> Option<Rows> {
        self.state().rows.clone()
    }

    /// Inside a trace (`hybridize`): a forward that reads this weight a batch's rows at a time
    /// cannot be a graph (the batch's values pick the rows; a sharded weight's come from the
    /// store), so the block runs eagerly, with this reason.
    fn refuse_trace(&self) {
        if sparrow_core::graph::is_tracing() {
            let why = if self.is_sharded() {
                "a table sharded across the workers, whose rows each forward pulls from their \
                 owners"
            } else {
                "in host memory, and each forward stages the rows its batch reads"
            };
            sparrow_core::graph::not_traceable(
                &format!("parameter '{}'", self.inner.name),
                &format!("it is {why}; a graph cannot read rows chosen by the batch's values"),
            );
        }
    }

    /// Rows `ids` from a row source, checked to be what the layer will index.
    fn pull_checked(&self, rows: &Rows, ids: &[i64]) -> Result<NDArray> {
        let got = rows.0.pull_rows(ids)?;
        let mut want = self.shape();
        want[0] = ids.len();
        if got.shape() != want || got.dtype() != self.dtype() {
            return Err(Error::shape(
                "Parameter::pull_rows",
                format!(
                    "parameter '{}': {} gave rows {:?} {}, {want:?} {} were asked for",
                    self.inner.name,
                    rows.0.describe(),
                    got.shape(),
                    got.dtype().name(),
                    self.dtype().name()
                ),
            ));
        }
        Ok(got)
    }

    /// Whether the weight has been created.
    pub fn is_initialized(&self) -> bool {
        self.state().data.is_some()
    }
    /// Number of elements (0 while the shape is unknown).
    pub fn size(&self) -> usize {
        self.state().shape.iter().product()
    }

    /// Create the weight with `default` (or this parameter's own initializer, which wins) and
    /// attach its gradient. With unknown dims the initialization waits for the first forward.
    /// Calling it again on an initialized parameter is a no-op, as in Gluon (use
    /// [`Parameter::reinitialize`] to overwrite).
    /// The weight is created on `device`: a [`Device`], or `None` for the calling thread's
    /// default device at this call ([`Device::current`], set by [`sparrow_core::with_device`];
    /// MXNet's `initialize(ctx=None)`). A deferred initialization keeps the device chosen here.
    /// An unavailable device is an error, before anything is created.
    pub fn initialize(
        &self,
        default: &Initializer,
        device: impl Into<Option<Device>>,
    ) -> Result<()> {
        let device = device.into().unwrap_or_else(Device::current);
        if !device.is_available() {
            return Err(Error::arg(
                "Parameter::initialize",
                format!(
                    "parameter '{}': device {device:?} is not available",
                    self.inner.name
                ),
            ));
        }
        let seed = init::next_seed();
        let mut s = self.state_mut();
        // Initialized, or sharded (its rows were made in the store).
        if s.data.is_some() || s.rows.is_some() {
            return Ok(());
        }
        s.device = device;
        let chosen = s.init.clone().unwrap_or_else(|| default.clone());
        if s.shape.contains(&0) {
            s.deferred = Some((chosen, seed));
            return Ok(());
        }
        Self::create(&self.inner.name, &mut s, &chosen, seed)
    }

    /// Create the weight in the `.npy` file at `path` instead of memory (out-of-core tables):
    /// the values are those [`Parameter::initialize`] would make with the same seed, written a
    /// block at a time ([`Initializer::generate_file`]), and the weight is a read-write
    /// file-backed array, so a table larger than RAM trains with only the pages a batch
    /// touches resident. Optimizer states created for it live in files beside it
    /// (`<path>.<state>.npy`). The weight is on the CPU; its shape must be known and it must
    /// not be initialized yet.
    pub fn initialize_in_file(
        &self,
        default: &Initializer,
        path: impl AsRef<std::path::Path>,
    ) -> Result<()> {
        const OP: &str = "Parameter::initialize_in_file";
        self.refuse_sharded(OP)?;
        let seed = init::next_seed();
        let mut s = self.state_mut();
        if s.data.is_some() {
            return Err(Error::arg(
                OP,
                format!("parameter '{}' is already initialized", self.inner.name),
            ));
        }
        if s.shape.contains(&0) {
            return Err(Error::shape(
                OP,
                format!(
                    "parameter '{}' has unknown dims {:?}: a file-backed weight needs its shape",
                    self.inner.name, s.shape
                ),
            ));
        }
        let chosen = s.init.clone().unwrap_or_else(|| default.clone());
        let desc = InitDesc::new(&self.inner.name, &s.shape, s.fan_in_first);
        let arr = chosen.generate_file(&desc, s.dtype, seed, path.as_ref())?;
        // A weight is read and updated a batch's rows at a time: only their pages should be
        // mapped, not their read-ahead neighbourhoods.
        arr.advise_random_access(true);
        arr.attach_grad_with(s.grad_req, s.grad_stype);
        s.device = Device::Cpu;
        s.deferred = None;
        s.data = Some(arr);
        Ok(())
    }

    /// Overwrite the weight with a fresh initialization (shape must be known).
    pub fn reinitialize(&self, default: &Initializer) -> Result<()> {
        self.refuse_sharded("Parameter::reinitialize")?;
        let seed = init::next_seed();
        let mut s = self.state_mut();
        let chosen = s.init.clone().unwrap_or_else(|| default.clone());
        if s.shape.contains(&0) {
            s.deferred = Some((chosen, seed));
            return Ok(());
        }
        Self::create(&self.inner.name, &mut s, &chosen, seed)
    }

    fn create(name: &str, s: &mut State, init: &Initializer, seed: u64) -> Result<()> {
        let desc = InitDesc::new(name, &s.shape, s.fan_in_first);
        if s.data.is_none() {
            s.host_resident = Self::over_budget(name, s)?;
        }
        let home = s.home();
        // Generate inside the weight's device scope, so the initializer's constructors make it
        // there directly; `to_device` then only moves what an initializer made elsewhere.
        let arr = sparrow_core::with_device(home, || init.generate(&desc, s.dtype, seed))??
            .to_device(home)?;
        match &s.data {
            // Keep the handle: holders of `data()` see the new values.
            Some(d) => d.assign(&arr),
            None => {
                arr.attach_grad_with(s.grad_req, s.grad_stype);
                s.data = Some(arr);
            }
        }
        s.deferred = None;
        Ok(())
    }

    /// Whether a weight of this state's shape is over its device's memory budget, so it must
    /// stay in host memory: allowed for a row_sparse gradient (layers stage a batch's rows),
    /// an error naming the sizes otherwise.
    fn over_budget(name: &str, s: &State) -> Result<bool> {
        let bytes = s
            .shape
            .iter()
            .try_fold(s.dtype.size_of(), |a, &d| a.checked_mul(d))
            .ok_or_else(|| {
                Error::shape(
                    "Parameter::initialize",
                    format!(
                        "parameter '{name}' of shape {:?} overflows usize bytes",
                        s.shape
                    ),
                )
            })?;
        if !s.device.over_budget(bytes)? {
            return Ok(false);
        }
        if s.grad_stype != SType::RowSparse || s.grad_req == GradReq::Null {
            return Err(Error::arg(
                "Parameter::initialize",
                format!(
                    "parameter '{name}' takes {bytes} bytes, over {:?}'s memory budget of {} \
                     bytes; only a weight with a row_sparse gradient can stay in host memory \
                     and train a batch's rows at a time (grad_stype RowSparse), or raise the \
                     budget (Device::set_memory_budget)",
                    s.device,
                    s.device.memory_budget()?.unwrap_or(0)
                ),
            ));
        }
        Ok(true)
    }

    /// Fix unknown dims from the shape seen at a forward, and run a deferred initialization.
    /// Known dims must agree with `shape`; a layer calls this before `data()`.
    pub fn infer_shape(&self, shape: &[usize]) -> Result<()> {
        {
            let s = self.state();
            if s.shape == shape && (s.data.is_some() || s.deferred.is_none()) {
                return Ok(());
            }
        }
        let mut s = self.state_mut();
        let compatible = s.shape.len() == shape.len()
            && s.shape.iter().zip(shape).all(|(&a, &b)| a == 0 || a == b);
        if !compatible || shape.contains(&0) {
            return Err(Error::shape(
                "Parameter::infer_shape",
                format!(
                    "parameter '{}' has shape {:?}, the input implies {shape:?}",
                    self.inner.name, s.shape
                ),
            ));
        }
        s.shape = shape.to_vec();
        if let Some((init, seed)) = s.deferred.take() {
            Self::create(&self.inner.name, &mut s, &init, seed)?;
        }
        Ok(())
    }

    fn not_ready(&self, what: &str) -> Error {
        if let Err(e) = self.refuse_sharded("Parameter") {
            return e;
        }
        let s = self.state();
        let why = if s.deferred.is_some() {
            "its initialization is deferred until the first forward infers the shape"
        } else {
            "it has not been initialized: call initialize() on the block or parameter"
        };
        Error::arg(
            "Parameter",
            format!(
                "{what} of parameter '{}' (shape {:?}) is not available: {why}",
                self.inner.name, s.shape
            ),
        )
    }

    /// The weight (a shared handle: in-place updates are seen by every holder).
    pub fn data(&self) -> Result<NDArray> {
        let d = self.state().data.clone();
        d.ok_or_else(|| self.not_ready("data"))
    }

    /// The error for a whole-weight access to a sharded parameter, if it is one.
    fn refuse_sharded(&self, op: &'static str) -> Result<()> {
        match &self.state().rows {
            Some(rows) => Err(Error::arg(
                op,
                format!(
                    "parameter '{}' is a {}: no process holds it whole. Its layers read a \
                     batch's rows (stage_for_csr / stage_for_ids), and the trainer that sharded \
                     it saves and loads this worker's shard (save_table / load_table)",
                    self.inner.name,
                    rows.0.describe()
                ),
            )),
            None => Ok(()),
        }
    }

    /// [`Parameter::infer_shape`] then [`Parameter::data`]: what a layer's forward does with
    /// each of its parameters. An initialized parameter of that shape, the case of every step
    /// after the first, takes one lock instead of two.
    pub fn data_for_shape(&self, shape: &[usize]) -> Result<NDArray> {
        {
            let s = self.state();
            if let (true, Some(d)) = (s.shape == shape, &s.data) {
                return Ok(d.clone());
            }
        }
        self.infer_shape(shape)?;
        self.data()
    }

    /// What a trainer reads of this parameter every step, under one lock: the weight (`None`
    /// before initialization), `grad_req` and the two multipliers. One read instead of four
    /// getters, each a lock round trip (two atomic read-modify-writes) per parameter per step.
    pub fn update_view(&self) -> UpdateView {
        let s = self.state();
        UpdateView {
            data: s.data.clone(),
            grad_req: s.grad_req,
            lr_mult: s.lr_mult,
            wd_mult: s.wd_mult,
        }
    }

    /// The gradient (row_sparse when `grad_stype` is row_sparse); `None` before initialization
    /// or with `grad_req = Null`.
    pub fn grad(&self) -> Option<NDArray> {
        self.state().data.as_ref().and_then(|d| d.grad())
    }

    /// Clear the gradient (a row_sparse gradient becomes empty, nothing dense is allocated).
    pub fn zero_grad(&self) {
        if let Some(d) = &self.state().data {
            d.zero_grad();
        }
    }

    /// Replace the weight's values in place (same shape and dtype; the handle is kept so
    /// optimizers and blocks keep seeing it). A parameter with unknown dims takes the shape.
    /// The weight stays on the device `initialize` chose (`value` is copied there when it
    /// lives elsewhere); a parameter never initialized takes `value`'s device.
    pub fn set_data(&self, value: &NDArray) -> Result<()> {
        self.refuse_sharded("Parameter::set_data")?;
        let mut s = self.state_mut();
        let (vshape, vdtype) = (value.shape(), value.dtype());
        let fits = s.shape.len() == vshape.len()
            && s.shape.iter().zip(&vshape).all(|(&a, &b)| a == 0 || a == b);
        if !fits {
            return Err(Error::shape(
                "Parameter::set_data",
                format!(
                    "parameter '{}' has shape {:?}, value has shape {vshape:?}",
                    self.inner.name, s.shape
                ),
            ));
        }
        if vdtype != s.dtype {
            return Err(Error::dtype(
                "Parameter::set_data",
                format!(
                    "parameter '{}' has dtype {}, value has dtype {}",
                    self.inner.name,
                    s.dtype.name(),
                    vdtype.name()
                ),
            ));
        }
        // `initialize` chose a device (the weight exists, or waits for its shape): keep it.
        let placed = s.data.is_some() || s.deferred.is_some();
        let home = s.home();
        let moved;
        let value = match value.device() {
            d if placed && d != home => {
                moved = value.to_device(home)?;
                &moved
            }
            d => {
                s.device = d;
                value
            }
        };
        s.shape = vshape;
        s.deferred = None;
        match &s.data {
            Some(d) => d.assign_dense(value)?,
            None => {
                // A new handle sharing the value's buffers (copied on the first write).
                let mut arr = value.detach();
                if arr.stype() != SType::Dense {
                    arr = arr.tostype(SType::Dense)?;
                }
                arr.attach_grad_with(s.grad_req, s.grad_stype);
                s.data = Some(arr);
            }
        }
        Ok(())
    }

    /// The rows `row_ids` of the weight as a row_sparse array (ids are sorted and deduplicated;
    /// Gluon's `row_sparse_data`). Only the requested rows are copied. Differentiable: inside
    /// `autograd::record` the weight gets a row_sparse gradient over exactly those rows, so a
    /// model that reads a batch's rows of a large table (a factorization machine's factors for
    /// the batch's columns) never touches the rest of it. For a sharded weight
    /// ([`Self::is_sharded`]) the rows are pulled from their owners (collective, as in Gluon,
    /// where `row_sparse_data` pulls through the trainer's kvstore), and their gradient goes
    /// back to the owners at the sharding trainer's next step.
    pub fn row_sparse_data(&self, row_ids: &[i64]) -> Result<NDArray> {
        let mut ids = row_ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if let Some(source) = self.row_source() {
            // Ids out of range are the store's error, on every worker at once.
            self.refuse_trace();
            let shape = self.shape();
            let rows = self.pull_checked(&source, &ids)?;
            let out = NDArray::row_sparse_from_arrays(&rows.detach(), ids.clone(), &shape)?;
            // The output's gradient, read at the pulled rows, is the rows' gradient.
            return Ok(sparrow_core::autograd::record_op(
                "Parameter::row_sparse_data",
                out,
                &[&rows],
                move |g| Ok(vec![Some(dense_rows(g, &ids)?)]),
            ));
        }
        let data = self.data()?;
        let shape = data.shape();
        if shape.is_empty() {
            return Err(Error::shape(
                "Parameter::row_sparse_data",
                format!("parameter '{}' is 0-D", self.inner.name),
            ));
        }
        if let Some(&bad) = ids.iter().find(|&&r| r < 0 || r as usize >= shape[0]) {
            return Err(Error::index(
                "Parameter::row_sparse_data",
                format!(
                    "row id {bad} out of range for parameter '{}' with {} rows",
                    self.inner.name, shape[0]
                ),
            ));
        }
        sparse::retain_rows(&data, &ids)
    }

    /// Bytes of the weight (0 before initialization).
    pub fn nbytes(&self) -> usize {
        self.state().data.as_ref().map_or(0, |d| d.nbytes())
    }

    /// True when both handles refer to the same parameter.
    pub fn same(&self, other: &Parameter) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Rows `ids` (sorted, distinct) of a dense or row_sparse gradient as one dense
/// `[ids.len(), ...]` array (rows a row_sparse gradient does not store are zero).
fn dense_rows(g: &NDArray, ids: &[i64]) -> Result<NDArray> {
    if g.stype() == SType::Dense {
        return sparse::take_rows(g, ids);
    }
    let kept = sparse::retain_rows(g, ids)?;
    let (stored, values) = kept.row_sparse_parts()?;
    if stored.len() == ids.len() {
        return Ok(values);
    }
    // Some rows got no gradient: add zero rows at every id, so the sum stores each id once.
    let mut shape = g.shape();
    let full = shape.clone();
    shape[0] = ids.len();
    let zeros =
        NDArray::row_sparse_from_arrays(&NDArray::zeros(&shape, g.dtype())?, ids.to_vec(), &full)?;
    sparse::add_grads(&kept, &zeros)?
        .row_sparse_parts()
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferred_init_waits_for_shape() {
        let p = Parameter::new("weight", &[4, 0]);
        p.initialize(&Initializer::One, Device::Cpu).unwrap();
        let e = p.data().unwrap_err().to_string();
        assert!(e.contains("deferred"), "{e}");
        p.infer_shape(&[4, 3]).unwrap();
        assert_eq!(p.data().unwrap().shape(), vec![4, 3]);
        assert!(p.infer_shape(&[5, 3]).is_err());
    }

    #[test]
    fn own_init_overrides_default_and_set_data_keeps_handle() {
        let p = Parameter::new("bias", &[3]).with_init(Initializer::Zero);
        p.initialize(&Initializer::One, Device::Cpu).unwrap();
        let h = p.data().unwrap();
        assert_eq!(h.to_vec::<f32>().unwrap(), vec![0.0; 3]);
        p.set_data(&NDArray::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap())
            .unwrap();
        assert_eq!(h.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
        assert!(p
            .set_data(&NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap())
            .is_err());
        assert!(p
            .set_data(&NDArray::from_vec(vec![1.0f64, 2.0, 3.0], &[3]).unwrap())
            .is_err());
    }

    #[test]
    fn row_sparse_grad_starts_empty_and_rows_can_be_pulled() {
        let p = Parameter::new("weight", &[1000, 8])
            .with_stype(SType::RowSparse)
            .with_grad_stype(SType::RowSparse);
        p.initialize(&Initializer::Constant(2.0), Device::Cpu)
            .unwrap();
        let g = p.grad().unwrap();
        assert_eq!(g.stype(), SType::RowSparse);
        assert_eq!(g.nbytes(), 0);
        let rs = p.row_sparse_data(&[7, 3, 7]).unwrap();
        assert_eq!(rs.row_ids().unwrap(), vec![3, 7]);
        assert_eq!(rs.nnz(), 16);
        assert!(p.row_sparse_data(&[1000]).is_err());
    }

    #[test]
    fn weight_and_gradient_live_on_the_initialize_device() {
        let p = Parameter::new("weight", &[4, 2]);
        p.initialize(&Initializer::Constant(1.0), Device::Cpu)
            .unwrap();
        assert_eq!(p.device(), Device::Cpu);
        assert_eq!(p.data().unwrap().device(), Device::Cpu);
        assert_eq!(p.grad().unwrap().device(), Device::Cpu);
    }

    #[test]
    fn without_a_device_initialize_uses_the_default_device_at_the_call() {
        // `None` means the scope's device when `initialize` runs, also for a deferred weight
        // created later outside the scope. With the CPU as the only device the device checks
        // all read Cpu; a backend's devices join through `Device::available`.
        for device in Device::available() {
            let (p, q) = sparrow_core::with_device(device, || {
                let p = Parameter::new("w", &[2, 3]);
                p.initialize(&Initializer::Constant(0.5), None).unwrap();
                let q = Parameter::new("q", &[0, 3]);
                q.initialize(&Initializer::One, None).unwrap();
                (p, q)
            })
            .unwrap();
            assert_eq!(p.device(), device);
            assert_eq!(p.data().unwrap().device(), device);
            assert_eq!(p.grad().unwrap().device(), device);
            assert_eq!(p.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5; 6]);
            let late = q.data_for_shape(&[4, 3]).unwrap();
            assert_eq!((q.device(), late.device()), (device, device));
            assert_eq!(late.to_vec::<f32>().unwrap(), vec![1.0; 12]);
        }
    }

    #[test]
    fn dense_rows_reads_a_gradient_at_rows_it_may_not_store() {
        let g = NDArray::row_sparse_from_arrays(
            &NDArray::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap(),
            vec![1, 4],
            &[6, 2],
        )
        .unwrap();
        let all = dense_rows(&g, &[1, 4]).unwrap();
        assert_eq!(all.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4.]);
        let some = dense_rows(&g, &[0, 4, 5]).unwrap();
        assert_eq!(some.shape(), vec![3, 2]);
        assert_eq!(some.to_vec::<f32>().unwrap(), vec![0., 0., 3., 4., 0., 0.]);
        let dense = g.tostype(SType::Dense).unwrap();
        assert_eq!(
            dense_rows(&dense, &[0, 4, 5])
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![0., 0., 3., 4., 0., 0.]
        );
    }

    #[test]
    fn grad_req_null_has_no_grad() {
        let p = Parameter::new("running_mean", &[3]).with_grad_req(GradReq::Null);
        p.initialize(&Initializer::Zero, Device::Cpu).unwrap();
        assert!(p.grad().is_none());
    }
}
