//! The global allocator: dlmalloc behind a spin lock.
//!
//! dlmalloc's own `global` feature refuses to build with `atomics` (it has no lock), and in the
//! threaded build any instance may allocate. So one `Dlmalloc` lives in a static (shared by all
//! instances, like all statics) and every call takes `LOCK` first. The lock is a plain spin lock:
//! allocations are rare and short (model load, buffers), never in kernels. It spins rather than
//! waits because `memory.atomic.wait32` traps on a browser's main thread.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

use dlmalloc::Dlmalloc;

pub struct LockedDlmalloc {
    lock: AtomicU32,
    heap: UnsafeCell<Dlmalloc>,
}

// SAFETY: every access to `heap` happens while holding `lock`.
unsafe impl Sync for LockedDlmalloc {}

impl LockedDlmalloc {
    fn with<R>(&self, f: impl FnOnce(&mut Dlmalloc) -> R) -> R {
        while self
            .lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        // SAFETY: we hold the lock, so no other thread has a reference to the heap.
        let r = f(unsafe { &mut *self.heap.get() });
        self.lock.store(0, Ordering::Release);
        r
    }
}

unsafe impl GlobalAlloc for LockedDlmalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: dlmalloc's contract is GlobalAlloc's; a failed grow returns null.
        self.with(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        self.with(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with this layout (GlobalAlloc's contract).
        self.with(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        self.with(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}

#[global_allocator]
pub static ALLOCATOR: LockedDlmalloc = LockedDlmalloc {
    lock: AtomicU32::new(0),
    heap: UnsafeCell::new(Dlmalloc::new()),
};
