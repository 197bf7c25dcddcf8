//! CUDA graph capture: a device's stream records the launches and copies of a piece of work
//! (a planned training step) instead of running them, and the recorded graph is replayed with
//! one launch (small batches on a GPU are bound by the cost of launching each kernel).
//!
//! The stream is the device's one stream (`driver.rs`), so everything the backend queues
//! while capturing lands in the graph. Work that needs the host in the middle (a copy to the
//! host, a synchronization) cannot be captured: it fails the capture, and the caller runs the
//! work normally instead. Other threads' work on the same device while a capture runs would be
//! recorded too (their copies to the host are refused): capture from one thread at a time.

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;
use std::sync::atomic::Ordering;

use super::driver::{cuda_error, CudaDev};
use crate::error::Result;

/// A captured, instantiated graph of device work, replayed by [`DeviceGraph::launch`].
pub struct DeviceGraph {
    graph: CudaGraph,
}

// SAFETY: a CUDA graph may be used from any thread as long as no two threads use it at once
// (the driver's thread-safety rule for graphs); `DeviceGraph` has no `&self` method that
// touches the graph from two threads at once, as it is not `Sync`, and moving it to another
// thread hands the only handle over.
unsafe impl Send for DeviceGraph {}

impl std::fmt::Debug for DeviceGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceGraph")
    }
}

/// Start recording device `ordinal`'s stream. Relaxed mode: other threads' CUDA calls are not
/// refused while this one captures (they run on other streams or not at all).
pub(crate) fn begin_capture(ordinal: usize) -> Result<()> {
    let dev = CudaDev::get(ordinal)?;
    dev.stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(|e| cuda_error("CUDA graph capture", format!("begin: {e}")))?;
    dev.capturing.store(true, Ordering::Release);
    Ok(())
}

/// Stop recording device `ordinal`'s stream and instantiate what it recorded. An error when
/// the capture was invalidated (work that needed the host) or the graph cannot be made.
pub(crate) fn end_capture(ordinal: usize) -> Result<DeviceGraph> {
    let dev = CudaDev::get(ordinal)?;
    dev.capturing.store(false, Ordering::Release);
    // Graph allocations (the eager operators' outputs inside the step) are freed by the
    // graph itself on each replay.
    let flags = CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
    match dev.stream.end_capture(flags) {
        Ok(Some(graph)) => Ok(DeviceGraph { graph }),
        Ok(None) => Err(cuda_error(
            "CUDA graph capture",
            "the capture recorded nothing",
        )),
        Err(e) => Err(cuda_error("CUDA graph capture", format!("end: {e}"))),
    }
}

impl DeviceGraph {
    /// Queue one replay of the graph on its device's stream.
    pub(crate) fn launch(&self) -> Result<()> {
        self.graph
            .launch()
            .map_err(|e| cuda_error("CUDA graph replay", format!("{e}")))
    }
}
