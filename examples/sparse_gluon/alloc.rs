//! The example's global allocator: mimalloc, called the way the standard library calls the
//! system allocator.
//!
//! The `mimalloc` crate's `GlobalAlloc` sends every request through `mi_malloc_aligned`, even
//! the (nearly universal) ones whose alignment a plain `mi_malloc` block already has. That
//! entry point checks the alignment again, and for blocks over 1 KB (a 10 x 128 f32 activation
//! is 5 KB) takes a generic aligned path: callgrind put it at ~55 instructions per small and
//! ~180 per larger allocation, against ~20 / ~60 for `mi_malloc`, over ~130 allocations per
//! step of the sparse tutorial's (c). This type uses `mi_malloc` / `mi_zalloc` / `mi_realloc`
//! when the alignment is at most 16 and at most the size, and the aligned calls otherwise.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};

/// Every mimalloc block of 16 bytes or more is 16-byte aligned, smaller ones 8-byte aligned
/// (mimalloc's `MI_MAX_ALIGN_SIZE`; asserted in its `_mi_page_malloc_zero`). So a layout whose
/// alignment is at most 16 and at most its size is satisfied by a plain block, as `std` reasons
/// for `malloc` with its `MIN_ALIGN`.
const PLAIN_ALIGN: usize = 16;

#[inline(always)]
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// mimalloc as the global allocator (see the module docs).
pub struct MiMalloc;

// SAFETY: every method forwards to mimalloc, whose blocks satisfy the layout: plain blocks only
// where `plain` holds (see PLAIN_ALIGN), the aligned calls otherwise. Blocks from either kind of
// call are freed and resized by the same mimalloc heap.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi_malloc(layout.size()) as *mut u8
        } else {
            mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi_zalloc(layout.size()) as *mut u8
        } else {
            mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi_free(ptr as *mut c_void);
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            mi_realloc(ptr as *mut c_void, new_size) as *mut u8
        } else {
            mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_have_the_requested_alignment_and_keep_contents_on_resize() {
        let a = MiMalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 3, 8, 12, 16, 24, 100, 1000, 5120, 70_000] {
                let Ok(l) = Layout::from_size_align(size, align) else {
                    continue;
                };
                // SAFETY: non-zero sizes; each block is written within its size, resized with
                // its own layout and freed once.
                unsafe {
                    let p = a.alloc(l);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    for i in 0..size {
                        *p.add(i) = i as u8;
                    }
                    let q = a.realloc(p, l, size * 3);
                    assert_eq!(q as usize % align, 0, "realloc size {size} align {align}");
                    assert!((0..size).all(|i| *q.add(i) == i as u8));
                    a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                    let z = a.alloc_zeroed(l);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, l);
                }
            }
        }
    }
}
