//! Half precision (f16, bf16) on the CPU: kernels compute in f32.
//!
//! The CPU has no half arithmetic worth the name, and a monomorphized copy of every kernel for
//! two more types would double the code for no speed. So, as MXNet's CPU path does, a kernel
//! given half operands widens them to f32 (exact), runs its f32 copy, and rounds the f32
//! results to the operands' type once (round to nearest even). A half result therefore equals
//! the f32 computation on the widened inputs, rounded; reductions and products accumulate in
//! f32. Layout kernels (copies, gathers, slices, concat, sort, compare) move half elements
//! directly and never come here.

use std::borrow::Cow;
use std::sync::Arc;

use super::CpuStorage;
use crate::dtype::DType;
use crate::storage::{RnnGrads, SparseParts};

/// The half dtype the operands share, or `None` (no half operand, or operands of different
/// dtypes, which the kernel itself reports).
pub(crate) fn half_of(dtypes: &[DType]) -> Option<DType> {
    let first = *dtypes.first()?;
    (first.is_half() && dtypes.iter().all(|&d| d == first)).then_some(first)
}

/// `x` as f32: a widened copy of a half buffer, `x` itself otherwise.
pub(crate) fn widen(x: &CpuStorage) -> Cow<'_, CpuStorage> {
    if x.dtype().is_half() {
        Cow::Owned(x.cast(DType::F32))
    } else {
        Cow::Borrowed(x)
    }
}

/// The results of an f32 kernel run for half operands, rounded to the operands' dtype: f32
/// buffers are cast, other buffers (i64 ids, positions) are left alone.
pub(crate) trait Narrow {
    /// `self` with every f32 buffer rounded to `to`.
    fn narrow(self, to: DType) -> Self;
}

impl Narrow for CpuStorage {
    fn narrow(self, to: DType) -> Self {
        if self.dtype() == DType::F32 {
            self.cast(to)
        } else {
            self
        }
    }
}

impl<A: Narrow, B: Narrow> Narrow for (A, B) {
    fn narrow(self, to: DType) -> Self {
        (self.0.narrow(to), self.1.narrow(to))
    }
}

impl<A: Narrow, B: Narrow, C: Narrow> Narrow for (A, B, C) {
    fn narrow(self, to: DType) -> Self {
        (self.0.narrow(to), self.1.narrow(to), self.2.narrow(to))
    }
}

impl<A: Narrow> Narrow for Option<A> {
    fn narrow(self, to: DType) -> Self {
        self.map(|a| a.narrow(to))
    }
}

impl Narrow for Arc<Vec<i64>> {
    fn narrow(self, _to: DType) -> Self {
        self
    }
}

impl<I> Narrow for SparseParts<CpuStorage, I> {
    fn narrow(self, to: DType) -> Self {
        SparseParts {
            values: self.values.narrow(to),
            ..self
        }
    }
}

impl Narrow for RnnGrads<CpuStorage> {
    fn narrow(self, to: DType) -> Self {
        RnnGrads {
            dxproj: self.dxproj.narrow(to),
            dweight: self.dweight.narrow(to),
            dbias: self.dbias.narrow(to),
            dh0: self.dh0.narrow(to),
            dc0: self.dc0.narrow(to),
        }
    }
}

/// At the top of a kernel method: when the named float operands are all of one half dtype,
/// bind each name to its f32 widening, run `$call` (the same method on them) and return its
/// results rounded to that dtype. Otherwise fall through to the typed kernels.
macro_rules! via_f32 {
    ($($n:ident = $x:expr),+ => $call:expr) => {
        if let Some(h) = $crate::cpu::half::half_of(&[$($x.dtype()),+]) {
            $(
                let $n = $crate::cpu::half::widen($x);
                let $n: &$crate::cpu::CpuStorage = &$n;
            )+
            return Ok($crate::cpu::half::Narrow::narrow($call?, h));
        }
    };
}
pub(crate) use via_f32;
