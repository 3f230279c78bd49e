//! Memory: the blocks the host hands over ([`Block`]), and in wasm the global allocator, dlmalloc
//! behind a spin lock.
//!
//! ## Blocks
//! `alloc(size)` gives the host a block of linear memory aligned to [`ALLOC_ALIGN`]; the host
//! writes a model file into it and hands it over with `load_model`/`load_embedder`. From then on
//! the module owns it as a [`Block`], which frees it when dropped. On the host the same code
//! compiles over std's allocator.
//!
//! ## The allocator (wasm only)
//! dlmalloc's own `global` feature refuses to build with `atomics` (it has no lock), and in the
//! threaded build any instance may allocate. So one `Dlmalloc` lives in a static (shared by all
//! instances, like all statics) and every call takes `LOCK` first. The lock is a plain spin lock:
//! allocations are rare and short (model load, buffers), never in kernels. It spins rather than
//! waits because `memory.atomic.wait32` traps on a browser's main thread.

use core::alloc::Layout;
use core::ptr::NonNull;

use crate::err;
use crate::error::{Result, Status};

/// Alignment of every `alloc` block (enough for SIMD loads and any tensor layout).
pub const ALLOC_ALIGN: usize = 16;

/// The layout of an `alloc(size)` block (an empty block still takes one byte, so it has its
/// own address and is freed like any other). `None` when `size` is absurd.
pub fn block_layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), ALLOC_ALIGN).ok()
}

/// A block of `len` bytes from `alloc(len)`, owned: dropped, it goes back to the allocator.
/// Only its owner writes it (through `bytes_mut_unbound`), and the bytes never move.
pub struct Block {
    ptr: NonNull<u8>,
    len: usize,
}

impl Block {
    /// Takes ownership of `ptr..ptr+len`.
    ///
    /// # Safety
    /// `ptr` came from `alloc(len)` (the export, or [`block_layout`]`(len)` with the global
    /// allocator), is not freed by anyone else, and nothing but the new `Block` writes it from
    /// now on.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Result<Block> {
        let Some(ptr) = NonNull::new(ptr) else {
            return Err(err!(Status::InvalidArgument, "the block is a null pointer"));
        };
        if (ptr.as_ptr() as usize).checked_add(len).is_none() || block_layout(len).is_none() {
            return Err(err!(
                Status::InvalidArgument,
                "bad block: {:p} + {} bytes",
                ptr,
                len
            ));
        }
        Ok(Block { ptr, len })
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes from `alloc`, alive until drop, written by no one.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable, with a lifetime not tied to `self`: for a loader that rewrites
    /// parts of them in place and then keeps shared views beside the block.
    ///
    /// # Safety
    /// As [`Block::bytes_unbound`]; and no other view of the bytes is used while this one is.
    pub unsafe fn bytes_mut_unbound<'a>(&mut self) -> &'a mut [u8] {
        // SAFETY: `len` bytes from `alloc`, alive until drop, ours alone (`from_raw`); the
        // caller keeps the uses inside the block's life and exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes with a lifetime not tied to `self`, for structures that live beside the block.
    ///
    /// # Safety
    /// Every use of the slice ends before the block drops. (A struct holding both must drop its
    /// borrowers first: Rust drops fields in declaration order.)
    pub unsafe fn bytes_unbound<'a>(&self) -> &'a [u8] {
        // SAFETY: as `bytes`; the caller keeps the uses inside the block's life. The bytes do
        // not move when the `Block` value does.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Some(layout) = block_layout(self.len) {
            // SAFETY: the block came from the global allocator with this layout (`from_raw`'s
            // contract), and is freed only here.
            unsafe { alloc::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub use allocator::{ALLOCATOR, bytes_in_use};

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod allocator {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicU32, Ordering};

    use dlmalloc::Dlmalloc;

    pub struct LockedDlmalloc {
        lock: AtomicU32,
        heap: UnsafeCell<Heap>,
    }

    /// The allocator and the bytes of its live blocks (as requested), kept under the lock.
    struct Heap {
        dlmalloc: Dlmalloc,
        in_use: usize,
    }

    // SAFETY: every access to `heap` happens while holding `lock`.
    unsafe impl Sync for LockedDlmalloc {}

    impl LockedDlmalloc {
        fn with<R>(&self, f: impl FnOnce(&mut Heap) -> R) -> R {
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

    /// Bytes in live blocks (the sizes asked for, alignment padding and dlmalloc's own
    /// headers not counted): what a load/unload cycle must give back.
    pub fn bytes_in_use() -> usize {
        ALLOCATOR.with(|h| h.in_use)
    }

    unsafe impl GlobalAlloc for LockedDlmalloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.with(|h| {
                // SAFETY: dlmalloc's contract is GlobalAlloc's; a failed grow returns null.
                let p = unsafe { h.dlmalloc.malloc(layout.size(), layout.align()) };
                if !p.is_null() {
                    h.in_use += layout.size();
                }
                p
            })
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            self.with(|h| {
                // SAFETY: as above.
                let p = unsafe { h.dlmalloc.calloc(layout.size(), layout.align()) };
                if !p.is_null() {
                    h.in_use += layout.size();
                }
                p
            })
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.with(|h| {
                // SAFETY: `ptr` came from this allocator with this layout (GlobalAlloc's
                // contract).
                unsafe { h.dlmalloc.free(ptr, layout.size(), layout.align()) };
                h.in_use -= layout.size();
            })
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            self.with(|h| {
                // SAFETY: as above.
                let p = unsafe {
                    h.dlmalloc
                        .realloc(ptr, layout.size(), layout.align(), new_size)
                };
                if !p.is_null() {
                    h.in_use = h.in_use - layout.size() + new_size;
                }
                p
            })
        }
    }

    #[global_allocator]
    pub static ALLOCATOR: LockedDlmalloc = LockedDlmalloc {
        lock: AtomicU32::new(0),
        heap: UnsafeCell::new(Heap {
            dlmalloc: Dlmalloc::new(),
            in_use: 0,
        }),
    };
}
