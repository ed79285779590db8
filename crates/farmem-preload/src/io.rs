//! System calls on far buffers under fault path `signal`.
//!
//! With `UFFD_FEATURE_SIGBUS` the kernel raises no signal for its own
//! accesses: a `read(2)` into, or `write(2)` from, a far page that is not
//! local fails with `EFAULT` (or stops short at that page). The shim's I/O
//! interposers therefore touch the far pages of a call's buffers first (a
//! write for buffers the kernel fills, so the page is also writable; a read
//! for buffers it only reads), in the program's own thread, where a touch
//! is an ordinary fault the SIGBUS handler serves. A page evicted between
//! the touch and the call makes the call fail again: it is touched and
//! retried a bounded number of times. This module is the arithmetic; the
//! interposers are in `shim::touch` and the `shim` modules above it.

use std::ops::Range;

use farmem_core::PAGE_SIZE;

const PAGE: usize = PAGE_SIZE as usize;

/// Tries of a call that keeps failing with `EFAULT` on far buffers before
/// its error goes to the program (each try touches the pages again).
pub const MAX_TRIES: usize = 8;

/// What the kernel does with a buffer, so what a touch must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The kernel fills it (`read`, `recv`): touch with a write.
    KernelWrites,
    /// The kernel reads it (`write`, `send`): touch with a read.
    KernelReads,
}

/// Start addresses of the pages of `[start, start + len)` that lie in the
/// far heap `far`.
pub fn far_pages(start: usize, len: usize, far: &Range<usize>) -> impl Iterator<Item = usize> {
    let end = start.saturating_add(len).min(far.end);
    let first = start.max(far.start);
    let (first, end) = if len == 0 || first >= end {
        (0, 0)
    } else {
        (first / PAGE * PAGE, end)
    };
    (first..end).step_by(PAGE)
}

/// Whether any byte of `[start, start + len)` is far.
pub fn overlaps(start: usize, len: usize, far: &Range<usize>) -> bool {
    len > 0 && start < far.end && start.saturating_add(len) > far.start
}

/// Pieces of a flat buffer of `len` bytes that each fit the touch budget,
/// as byte ranges from its start: a buffer larger than the local cache
/// cannot have all its pages local at once, so the call is made piece by
/// piece, each piece's pages touched just before it.
pub fn pieces(len: usize, budget: usize) -> impl Iterator<Item = Range<usize>> {
    let step = budget.max(PAGE);
    (0..len).step_by(step).map(move |s| s..(s + step).min(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAR: Range<usize> = 0x10_0000..0x20_0000;

    #[test]
    fn pages_inside_the_far_heap_only() {
        // A buffer from before the heap into its second page.
        let pages: Vec<usize> = far_pages(0xf_ff00, 0x1200, &FAR).collect();
        assert_eq!(pages, [0x10_0000, 0x10_1000]);
        // Unaligned start inside: its page counts; the end is exclusive.
        let pages: Vec<usize> = far_pages(0x10_0ff0, 0x20, &FAR).collect();
        assert_eq!(pages, [0x10_0000, 0x10_1000]);
        let pages: Vec<usize> = far_pages(0x10_0000, 0x1000, &FAR).collect();
        assert_eq!(pages, [0x10_0000]);
        // Running past the heap's end stops at it.
        assert_eq!(far_pages(0x1f_f800, 0x10000, &FAR).count(), 1);
        // Outside, empty, or overflowing lengths touch nothing wrong.
        assert_eq!(far_pages(0x1000, 0x1000, &FAR).count(), 0);
        assert_eq!(far_pages(0x10_0000, 0, &FAR).count(), 0);
        assert_eq!(far_pages(0x1f_f000, usize::MAX, &FAR).count(), 1);
    }

    #[test]
    fn overlap_is_any_far_byte() {
        assert!(overlaps(0xf_ffff, 2, &FAR));
        assert!(!overlaps(0xf_ffff, 1, &FAR));
        assert!(overlaps(0x1f_ffff, 1, &FAR));
        assert!(!overlaps(0x20_0000, 100, &FAR));
        assert!(!overlaps(0x10_0000, 0, &FAR));
        assert!(overlaps(0x1000, usize::MAX, &FAR));
    }

    #[test]
    fn pieces_cover_the_buffer_in_budget_sized_steps() {
        let p: Vec<_> = pieces(10_000, 4096).collect();
        assert_eq!(p, [0..4096, 4096..8192, 8192..10_000]);
        // A budget below a page still moves a page at a time.
        assert_eq!(pieces(8192, 1).count(), 2);
        assert_eq!(pieces(0, 4096).count(), 0);
        let whole: Vec<_> = pieces(100, 1 << 20).collect();
        assert_eq!((whole.len(), whole[0].clone()), (1, 0..100));
    }
}
