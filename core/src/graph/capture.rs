//! A planned training step captured as a CUDA graph and replayed (`TrainStep::set_cuda_graph`).
//!
//! The step's first run on a device allocates the plan's buffers (and cuBLAS its workspace);
//! the second is recorded on the device's stream instead of run, over inputs copied into
//! arrays the capture owns (the graph reads fixed addresses), and then launched. Later steps
//! copy their inputs into those arrays and launch the graph: one launch instead of one per
//! kernel. Nodes without device kernels of their own run their eager operator inside the
//! capture; its allocations become the graph's own (freed by the graph on each replay).
//!
//! A replay is only right while the graph's addresses are the step's: each step checks that
//! every parameter is still the buffer it was captured with (an optimizer that replaced one
//! instead of updating it in place) and that the inputs match; last step's outputs that the
//! caller still holds (a loss kept for logging) keep their values in copies made before the
//! replay overwrites the buffers (one device copy each; an output shared by a view the caller
//! made cannot be moved). Otherwise the step runs normally and the graph is captured again at
//! the next one. Label checks (`check_class_ids`, and `one_hot`'s check of whole numbers) read
//! the labels on the host, which a capture cannot: the step checks its label inputs itself
//! before each replay, with the eager operator's error.

use super::exec::{Executor, HostCheck};
#[cfg(feature = "cuda")]
use crate::cuda::DeviceGraph;
use crate::{ArrayData, Device, Error, NDArray, Result};

/// Without the CUDA backend no array lives on a CUDA device, so nothing is ever captured.
#[cfg(not(feature = "cuda"))]
#[derive(Debug)]
struct DeviceGraph;

#[cfg(not(feature = "cuda"))]
impl DeviceGraph {
    fn launch(&self) -> Result<()> {
        Err(Error::arg(OP, "no CUDA backend in this build"))
    }
}

const OP: &str = "CUDA graph";

/// Where a training step stands with its CUDA graph.
#[derive(Debug, Default)]
pub(crate) enum Capture {
    /// Not asked for.
    #[default]
    Off,
    /// Asked for; the next step on a device runs normally (it allocates the plan's buffers).
    Warming,
    /// The next step is captured.
    Armed,
    /// Captured: later steps replay it.
    Ready(Box<Captured>),
    /// The step cannot be captured (why, printed once).
    Refused(String),
}

/// A captured step and the addresses it was captured over.
#[derive(Debug)]
pub(crate) struct Captured {
    graph: DeviceGraph,
    /// The arrays the graph reads its call inputs from (each step's inputs are copied in).
    staging: Vec<NDArray>,
    /// Their device addresses.
    staging_at: Vec<Option<u64>>,
    /// The parameters' device addresses at the capture.
    params_at: Vec<Option<u64>>,
    /// The label checks run on the host before each replay, by call input.
    checks: Vec<(usize, HostCheck)>,
}

/// The device address of a dense array's buffer (`None` on the host or for sparse arrays).
fn address(a: &NDArray) -> Option<u64> {
    match &*a.read() {
        ArrayData::Dense(d) => d.buf.device_address(),
        _ => None,
    }
}

/// `src`'s values copied into `dst` (dense, same length and dtype).
fn copy_values(src: &NDArray, dst: &NDArray) -> Result<()> {
    let s = src.read();
    let mut d = dst.write();
    match (&*s, &mut *d) {
        (ArrayData::Dense(s), ArrayData::Dense(d)) => s.buf.copy_into(&mut d.buf),
        _ => Err(Error::arg(OP, "a captured step's inputs are dense")),
    }
}

/// Run the label checks of a captured step on its call inputs (the eager operator's errors).
fn run_checks(checks: &[(usize, HostCheck)], inputs: &[NDArray]) -> Result<()> {
    for (k, check) in checks {
        check.run(&inputs[*k])?;
    }
    Ok(())
}

impl Captured {
    /// Whether a replay over `inputs` and `params` is the step: the parameters are the
    /// buffers captured and the inputs dense on the device of the capture.
    pub(crate) fn fits(&self, inputs: &[NDArray], params: &[NDArray]) -> bool {
        params.len() == self.params_at.len()
            && params
                .iter()
                .zip(&self.params_at)
                .all(|(p, &at)| address(p) == at)
            && inputs.len() == self.staging.len()
            && inputs
                .iter()
                .zip(&self.staging)
                .all(|(x, s)| x.device() == s.device() && address(x).is_some())
    }

    /// One replay: the label checks, outputs of the last step still held moved to copies,
    /// the inputs copied in, the graph launched; the outputs (written by the graph) handed to
    /// `outs`. `false` (nothing launched) when an output's buffer is shared by a view or an
    /// input's copy had to move its staging buffer.
    pub(crate) fn replay(
        &self,
        exec: &mut Executor,
        inputs: &[NDArray],
        params: &[NDArray],
        outs: &mut Vec<NDArray>,
    ) -> Result<bool> {
        run_checks(&self.checks, inputs)?;
        // Last step's outputs that the caller still holds move to copies first.
        if !exec.reclaim_outputs()? {
            return Ok(false);
        }
        for (x, s) in inputs.iter().zip(&self.staging) {
            copy_values(x, s)?;
        }
        if self
            .staging
            .iter()
            .map(address)
            .ne(self.staging_at.iter().copied())
        {
            return Ok(false);
        }
        self.graph.launch()?;
        exec.outputs_to(&self.staging, params, outs)?;
        Ok(true)
    }
}

/// Capture one run of `exec` over `inputs` and `params` on `device` and launch it: the
/// outputs go to `outs`, the capture is returned. `Ok(Err(why))` when the step cannot be
/// captured; then nothing ran (the caller runs the step normally). `Err` is the step's own
/// error (labels that fail their check, a device that cannot hold the input copies).
pub(crate) fn capture(
    exec: &mut Executor,
    device: Device,
    inputs: &[NDArray],
    params: &[NDArray],
    outs: &mut Vec<NDArray>,
) -> Result<std::result::Result<Captured, String>> {
    let Device::Cuda(ordinal) = device else {
        return Ok(Err(format!(
            "CUDA graphs capture CUDA devices, not {device:?}"
        )));
    };
    if let Some(n) = exec.graph().nodes().iter().find(|n| n.op.is_random()) {
        return Ok(Err(format!(
            "the step draws random values ({}): a CUDA graph would replay the values of its \
             capture at every step",
            n.op.name()
        )));
    }
    if !exec.outputs_planned() {
        return Ok(Err(
            "an output of the step is made by an eager operator".into()
        ));
    }
    let checks = match exec.host_checks() {
        Ok(c) => c,
        Err(why) => return Ok(Err(why)),
    };
    if let Some(x) = inputs.iter().find(|x| address(x).is_none()) {
        return Ok(Err(format!(
            "an input is {:?} on {:?}: a captured step takes dense device arrays",
            x.stype(),
            x.device()
        )));
    }
    run_checks(&checks, inputs)?;
    let staging = inputs
        .iter()
        .map(NDArray::try_copy)
        .collect::<Result<Vec<_>>>()?;
    let staging_at: Vec<Option<u64>> = staging.iter().map(address).collect();
    let params_at: Vec<Option<u64>> = params.iter().map(address).collect();
    Ok(
        record(exec, ordinal, &staging, params, outs).map(|graph| Captured {
            graph,
            staging,
            staging_at,
            params_at,
            checks,
        }),
    )
}

/// Record and launch one run (the CUDA part of [`capture`]).
#[cfg(feature = "cuda")]
fn record(
    exec: &mut Executor,
    ordinal: usize,
    staging: &[NDArray],
    params: &[NDArray],
    outs: &mut Vec<NDArray>,
) -> std::result::Result<DeviceGraph, String> {
    crate::cuda::begin_capture(ordinal).map_err(|e| e.to_string())?;
    exec.set_checks_done(true);
    let ran = crate::autograd::pause(|| exec.run_to(staging, params, outs));
    exec.set_checks_done(false);
    // The capture ends whatever the run did (a failed one leaves the stream capturing).
    let graph = crate::cuda::end_capture(ordinal);
    ran.map_err(|e| format!("the step failed while captured: {e}"))?;
    let graph = graph.map_err(|e| e.to_string())?;
    graph.launch().map_err(|e| e.to_string())?;
    Ok(graph)
}

#[cfg(not(feature = "cuda"))]
fn record(
    _: &mut Executor,
    _: usize,
    _: &[NDArray],
    _: &[NDArray],
    _: &mut Vec<NDArray>,
) -> std::result::Result<DeviceGraph, String> {
    Err("no CUDA backend in this build".into())
}
