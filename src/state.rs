//! The shared state block: every word that more than one instance (driver, helpers, host) reads.
//!
//! Globals belong to an instance, but statics live in linear memory at addresses fixed by the
//! linker, and every instance of the threaded module runs on the same memory. So all shared state
//! is in statics: this block (pool words, stop flag, last error), and the engine objects it points
//! to. The export `shared_state()` returns the block's address; `abi/ABI.md` documents the
//! offsets, pinned here by compile-time asserts.
//!
//! Only the driver (the instance that called `load_model` and runs `step`) touches the engine,
//! tokenizer and sampler objects; helpers only run kernels handed to them through the pool.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::error::{Error, ErrorText};

/// Layout version of [`Shared`]; bump when an offset documented in `abi/ABI.md` changes.
pub const SHARED_LAYOUT_VERSION: u32 = 2;
/// First word of the block, so a host can check it found the right thing.
pub const SHARED_MAGIC: u32 = u32::from_le_bytes(*b"wmnd");

#[repr(C, align(64))]
pub struct Shared {
    /// `SHARED_MAGIC`.
    pub magic: u32,
    /// `SHARED_LAYOUT_VERSION`.
    pub layout_version: u32,
    /// Nonzero asks a running generation to stop after the current token. Any thread or the host
    /// may set it (a plain 32-bit store); the driver clears it when a reply starts.
    pub stop: Line<AtomicU32>,
    /// The thread pool's words (offset 128).
    pub pool: PoolState,
    /// Last error: status code and UTF-8 message (driver only).
    pub error: LastError,
}

const _: () = assert!(core::mem::offset_of!(Shared, stop) == 64);
const _: () = assert!(core::mem::offset_of!(Shared, pool) == 128);
const _: () = assert!(core::mem::offset_of!(Shared, error) == 512);

// ---------------------------------------------------------------------------------------------
// The thread pool's words

/// `next_item` of a claim word whose job is being replaced: no chunk can be claimed.
pub const CLOSED: u64 = u32::MAX as u64;

/// One 64-byte line, so that the words threads hammer do not share a cache line.
#[repr(C, align(64))]
pub struct Line<T>(pub T);

/// What a job is: written by the driver before it publishes `job_word`.
#[repr(C)]
pub struct JobDescriptor {
    pub kernel: AtomicUsize,
    pub args: AtomicUsize,
    pub items: AtomicUsize,
    pub chunk: AtomicUsize,
}

/// The thread pool's shared words (`src/pool.rs` says how they are used), inside [`Shared`].
#[repr(C)]
pub struct PoolState {
    /// `(sequence << 8) | participants`; helpers wait on it.
    pub job_word: Line<AtomicU32>,
    /// Items of the current job finished; the driver waits on it.
    pub done: Line<AtomicU32>,
    /// `(job_word << 32) | next_item`: the next item to claim, for the job that `job_word` names.
    pub claim: Line<AtomicU64>,
    /// Helpers listening, counted in id order.
    pub registered: Line<AtomicU32>,
    /// The current job.
    pub job: Line<JobDescriptor>,
    /// Threads the driver wants to use, itself included (1 = no helpers).
    pub threads: AtomicU32,
    /// Set by `pool_shutdown`: helpers return from `helper_loop`.
    pub shutdown: AtomicU32,
    /// Jobs run so far (diagnostics and tests).
    pub jobs_run: AtomicU32,
    /// Set, for good, when a job stopped making progress (a helper trapped or its worker was
    /// terminated mid-job): later jobs run on the driver alone and compute calls fail.
    pub lost: AtomicU32,
    /// Diagnostics (`pool_inject_fault`): `(kind << 16) | (helper id + 1)`, 0 = none.
    pub fault: AtomicU32,
}

const _: () = assert!(core::mem::size_of::<Line<AtomicU32>>() == 64);
const _: () = assert!(core::mem::offset_of!(PoolState, done) == 64);
const _: () = assert!(core::mem::offset_of!(PoolState, claim) == 128);
const _: () = assert!(core::mem::offset_of!(PoolState, registered) == 192);
const _: () = assert!(core::mem::offset_of!(PoolState, job) == 256);
const _: () = assert!(core::mem::offset_of!(PoolState, threads) == 320);
const _: () = assert!(core::mem::offset_of!(PoolState, shutdown) == 324);
const _: () = assert!(core::mem::offset_of!(PoolState, lost) == 332);
const _: () = assert!(core::mem::offset_of!(PoolState, fault) == 336);
const _: () = assert!(core::mem::size_of::<PoolState>() == 384);

impl PoolState {
    pub const fn new() -> PoolState {
        PoolState {
            job_word: Line(AtomicU32::new(0)),
            done: Line(AtomicU32::new(0)),
            claim: Line(AtomicU64::new(CLOSED)),
            registered: Line(AtomicU32::new(0)),
            job: Line(JobDescriptor {
                kernel: AtomicUsize::new(0),
                args: AtomicUsize::new(0),
                items: AtomicUsize::new(0),
                chunk: AtomicUsize::new(0),
            }),
            threads: AtomicU32::new(1),
            shutdown: AtomicU32::new(0),
            jobs_run: AtomicU32::new(0),
            lost: AtomicU32::new(0),
            fault: AtomicU32::new(0),
        }
    }
}

impl Default for PoolState {
    fn default() -> Self {
        PoolState::new()
    }
}

// ---------------------------------------------------------------------------------------------
// The last error

pub struct LastError {
    inner: UnsafeCell<(i32, ErrorText)>,
}

// SAFETY: the last error is written and read only by the driver thread (documented in ABI.md);
// helpers never touch it.
unsafe impl Sync for LastError {}

impl LastError {
    const fn new() -> LastError {
        LastError {
            inner: UnsafeCell::new((0, ErrorText::new())),
        }
    }

    /// Records `e` as the last error and returns its (negative) status code.
    pub fn set(&self, e: &Error) -> i32 {
        // SAFETY: driver-only (see the Sync impl).
        let slot = unsafe { &mut *self.inner.get() };
        *slot = (e.status.code(), e.message.clone());
        e.status.code()
    }

    /// The last error's code (0 if none) and message.
    pub fn get(&self) -> (i32, &str) {
        // SAFETY: driver-only (see the Sync impl).
        let slot = unsafe { &*self.inner.get() };
        (slot.0, slot.1.as_str())
    }
}

pub static SHARED: Shared = Shared {
    magic: SHARED_MAGIC,
    layout_version: SHARED_LAYOUT_VERSION,
    stop: Line(AtomicU32::new(0)),
    pool: PoolState::new(),
    error: LastError::new(),
};

/// True when someone asked the current generation to stop.
pub fn stop_requested() -> bool {
    SHARED.stop.0.load(Ordering::Relaxed) != 0
}

pub fn clear_stop() {
    SHARED.stop.0.store(0, Ordering::Relaxed);
}

/// A driver-only slot for one engine object (model, tokenizer, embedder ...), in a static.
/// Empty is all zero bytes (a flag and uninitialized room, not an `Option`, whose `None` is
/// whatever niche `T` has): the static then lies in `.bss` and takes no bytes of the module's
/// data segment (the driver's state is ~4.6 KB).
pub struct DriverCell<T> {
    full: UnsafeCell<bool>,
    value: UnsafeCell<core::mem::MaybeUninit<T>>,
}

// SAFETY: only the driver thread calls `get`/`set` (the ABI forbids helpers from calling the
// exports that reach them); helpers see engine data only through kernel arguments.
unsafe impl<T> Sync for DriverCell<T> {}

impl<T> DriverCell<T> {
    pub const fn new() -> DriverCell<T> {
        DriverCell {
            full: UnsafeCell::new(false),
            value: UnsafeCell::new(core::mem::MaybeUninit::uninit()),
        }
    }

    /// # Safety
    /// Driver thread only, and the returned reference must not outlive a later `set`.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self) -> Option<&mut T> {
        // SAFETY: the caller's contract; `value` holds a T whenever `full` is set.
        unsafe { (*self.full.get()).then(|| (*self.value.get()).assume_init_mut()) }
    }

    /// Replaces the value (the old one is dropped).
    ///
    /// # Safety
    /// Driver thread only, with no reference from `get` alive.
    pub unsafe fn set(&self, v: Option<T>) {
        // SAFETY: the caller's contract; `value` holds a T whenever `full` is set.
        unsafe {
            if *self.full.get() {
                *self.full.get() = false;
                (*self.value.get()).assume_init_drop();
            }
            if let Some(v) = v {
                (*self.value.get()).write(v);
                *self.full.get() = true;
            }
        }
    }
}

impl<T> Default for DriverCell<T> {
    fn default() -> Self {
        DriverCell::new()
    }
}

#[cfg(test)]
mod tests {
    use super::DriverCell;
    use core::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn driver_cell_holds_one_value_and_drops_the_one_it_replaces() {
        static DROPS: AtomicU32 = AtomicU32::new(0);
        struct Counted(u32);
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::Relaxed);
            }
        }
        let cell: DriverCell<Counted> = DriverCell::new();
        // SAFETY: one thread; no reference from `get` is alive across a `set`.
        unsafe {
            assert!(cell.get().is_none());
            cell.set(Some(Counted(1)));
            assert_eq!(cell.get().map(|c| c.0), Some(1));
            cell.get().unwrap().0 = 2;
            assert_eq!(cell.get().map(|c| c.0), Some(2));
            cell.set(Some(Counted(3)));
            assert_eq!(DROPS.load(Ordering::Relaxed), 1);
            assert_eq!(cell.get().map(|c| c.0), Some(3));
            cell.set(None);
            assert_eq!(DROPS.load(Ordering::Relaxed), 2);
            assert!(cell.get().is_none());
            cell.set(None);
            assert_eq!(DROPS.load(Ordering::Relaxed), 2);
        }
    }
}
