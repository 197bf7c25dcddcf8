//! Device memory budgets: how large a parameter may be before it stays in host memory.
//!
//! A table larger than a GPU (or larger than the share of it a user wants a table to take)
//! still trains on that GPU when its gradient is row_sparse: the table stays in host memory and
//! each step moves only the rows its batch reads to the device, and their gradient back
//! (`sparse::stage_rows`). Where that happens is decided when a parameter is created, from the
//! budget of the device it is created for: a weight of more bytes than the budget is kept in
//! host memory. The budget is per parameter (the largest table the device should hold), not a
//! running total of what has been placed there.
//!
//! Without a budget set, a CUDA device's budget is its total memory (a table that cannot fit
//! is staged instead of failing its allocation) and the CPU has none. A budget set on the CPU
//! makes its large tables take the same staged path within host memory, so that path can be
//! checked on machines without a GPU.

use std::sync::Mutex;

use crate::Device;

/// Budgets set with [`Device::set_memory_budget`], by device.
static BUDGETS: Mutex<Vec<(Device, usize)>> = Mutex::new(Vec::new());

impl Device {
    /// Set (`Some(bytes)`) or clear (`None`) this device's memory budget for parameters: a
    /// parameter created for this device whose weight takes more bytes stays in host memory and
    /// is staged a batch's rows at a time (it needs a row_sparse gradient). Process-wide.
    ///
    /// ```
    /// use sparrow_core::Device;
    /// Device::Cpu.set_memory_budget(Some(1 << 20));
    /// assert_eq!(Device::Cpu.memory_budget().unwrap(), Some(1 << 20));
    /// Device::Cpu.set_memory_budget(None);
    /// assert_eq!(Device::Cpu.memory_budget().unwrap(), None);
    /// ```
    pub fn set_memory_budget(self, bytes: Option<usize>) {
        let mut b = BUDGETS.lock().unwrap_or_else(|e| e.into_inner());
        b.retain(|(d, _)| *d != self);
        if let Some(bytes) = bytes {
            b.push((self, bytes));
        }
    }

    /// This device's memory budget for one parameter: the one set with
    /// [`Device::set_memory_budget`], else a CUDA device's total memory, else `None` (no
    /// limit). An unavailable CUDA device without a set budget is an error.
    pub fn memory_budget(self) -> crate::Result<Option<usize>> {
        let set = BUDGETS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(d, _)| *d == self)
            .map(|&(_, b)| b);
        if set.is_some() {
            return Ok(set);
        }
        match self {
            Device::Cpu => Ok(None),
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => crate::cuda::total_memory(i).map(Some),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Device::unavailable_error("memory_budget", self)),
        }
    }

    /// Whether a weight of `bytes` bytes created for this device stays in host memory: it is
    /// over the budget ([`Device::memory_budget`]).
    pub fn over_budget(self, bytes: usize) -> crate::Result<bool> {
        Ok(self.memory_budget()?.is_some_and(|b| bytes > b))
    }
}

#[cfg(test)]
mod tests {
    use crate::Device;

    #[test]
    fn a_set_budget_decides_and_clearing_it_restores_the_default() {
        // A device no other test sets a budget on (tests share the process-wide table).
        let d = Device::Cuda(4093);
        d.set_memory_budget(Some(1000));
        assert_eq!(d.memory_budget().unwrap(), Some(1000));
        assert!(!d.over_budget(1000).unwrap());
        assert!(d.over_budget(1001).unwrap());
        d.set_memory_budget(Some(10));
        assert_eq!(d.memory_budget().unwrap(), Some(10));
        d.set_memory_budget(None);
        // Unset: the default of a device this machine does not have is an error, not a limit.
        assert!(d.memory_budget().is_err());
    }
}
