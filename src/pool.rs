//! The thread pool: helpers are other instances of this module on the same shared memory.
//!
//! A host starts N helper instances (each with its own stack) and calls `helper_loop(id)` on each,
//! ids `0..N` in any order; the call never returns while the pool lives. The driver instance runs
//! the model and hands out jobs with [`par_for`]: a job is a kernel (a function pointer, which is
//! a table index in wasm and so means the same function in every instance), an item count, a
//! chunk size and a pointer to the kernel's arguments. Every thread, the driver included, claims
//! chunks of items with a compare-and-swap on a shared counter until none are left.
//!
//! Protocol (all words in [`PoolState`], each busy word on its own 64-byte line):
//! - `registered`: helpers count themselves in id order, after they have read `job_word`, so
//!   `registered == k` means helpers `0..k` are all listening and none can miss a job.
//! - `job_word = (sequence << 8) | participants` announces a job: helpers with `id <
//!   participants` take part. It is what helpers wait on.
//! - `claim = (job_word << 32) | next_item`: chunks are claimed with a compare-and-swap that
//!   only succeeds for the job the helper was woken for. A job is over when `done` (items
//!   finished) reaches the item count, whether or not every participant showed up: a helper
//!   that is descheduled (more threads than cores) delays nobody, it finds the job gone when it
//!   runs. The driver closes the claim word before it rewrites the descriptor for the next job,
//!   so a late helper's compare-and-swap fails instead of pairing an old job with new arguments.
//! - The thread that finishes the last item of a job notifies `done`; the driver waits on it
//!   (spinning first) after running chunks itself.
//! - Helpers spin a bounded number of rounds on `job_word`, then sleep in
//!   `memory.atomic.wait32`. Lowering the thread count only lowers `participants`: the extra
//!   helpers see the new word, find their id too high, and go back to waiting.
//! - `shutdown`: `pool_shutdown` sets it and bumps `job_word`; every helper returns.
//!
//! Determinism: each output element is computed inside one chunk by one thread, and kernels
//! compute an element the same way whatever range it arrives in, so results do not depend on
//! the thread count or on who took what. (Chunk ranges themselves are guided: large first,
//! down to the job's chunk size at the end.)
//!
//! In the single-threaded build (and natively on the host) there are no helpers and every job
//! runs inline on the caller.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// A kernel: runs items `start..end` of a job whose arguments are at `args`.
pub type Kernel = unsafe fn(args: *const u8, start: usize, end: usize);

/// Most helpers a pool will use (the participant count lives in 8 bits of `job_word`).
pub const MAX_HELPERS: u32 = 255;
/// Rounds the driver spins waiting for a job to finish, and a helper waiting for the next job
/// while it keeps finding work, before sleeping in `memory.atomic.wait32`. Jobs come every few
/// microseconds during a token, and a wake-up from sleep costs tens of them.
const SPIN_ROUNDS: u32 = 1 << 16;
/// Fewest rounds a helper spins: one that keeps arriving after its jobs were all taken (more
/// threads than cores: it was not scheduled in time) spins less and less, leaving the core to
/// the threads doing the work instead of competing with them for it.
const SPIN_ROUNDS_MIN: u32 = 1 << 8;
/// `next_item` of a claim word whose job is being replaced: no chunk can be claimed.
const CLOSED: u64 = u32::MAX as u64;
/// Largest item count a job may have (the claim counter is 32 bits and may overshoot by a chunk).
const MAX_ITEMS: usize = (u32::MAX / 2) as usize;

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

/// The pool's shared words. Lives inside [`crate::state::Shared`] at a fixed address.
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
}

const _: () = assert!(core::mem::size_of::<Line<AtomicU32>>() == 64);
const _: () = assert!(core::mem::offset_of!(PoolState, done) == 64);
const _: () = assert!(core::mem::offset_of!(PoolState, claim) == 128);
const _: () = assert!(core::mem::offset_of!(PoolState, registered) == 192);
const _: () = assert!(core::mem::offset_of!(PoolState, job) == 256);
const _: () = assert!(core::mem::offset_of!(PoolState, threads) == 320);
const _: () = assert!(core::mem::offset_of!(PoolState, shutdown) == 324);
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
        }
    }
}

impl Default for PoolState {
    fn default() -> Self {
        PoolState::new()
    }
}

fn pool() -> &'static PoolState {
    &crate::state::SHARED.pool
}

/// Sets how many threads (driver included) later jobs use; clamped to `1..=MAX_HELPERS + 1`.
/// Call only between jobs, from the driver.
pub fn set_threads(n: u32) {
    pool()
        .threads
        .store(n.clamp(1, MAX_HELPERS + 1), Ordering::Relaxed);
}

pub fn threads() -> u32 {
    pool().threads.load(Ordering::Relaxed)
}

/// Helpers registered and listening.
pub fn helpers_ready() -> u32 {
    pool().registered.0.load(Ordering::Acquire)
}

/// Runs `kernel` over items `0..items` in chunks of at least `chunk` (guided: a claim takes half
/// an even share of what is left, rounded up to whole chunks), on the driver and the helpers.
///
/// # Safety
/// `kernel(args, start, end)` must be safe to call for disjoint ranges at the same time from
/// several threads, and `args` must stay valid until this returns (it does: the call blocks
/// until every chunk is done).
pub unsafe fn par_for(kernel: Kernel, args: *const u8, items: usize, chunk: usize) {
    let p = pool();
    let chunk = chunk.clamp(1, MAX_ITEMS);
    let chunks = items.div_ceil(chunk);
    let helpers = (p.threads.load(Ordering::Relaxed) - 1)
        .min(p.registered.0.load(Ordering::Acquire))
        .min(chunks.saturating_sub(1) as u32);
    p.jobs_run.fetch_add(1, Ordering::Relaxed);
    if helpers == 0 || items > MAX_ITEMS {
        // SAFETY: the caller's contract; one thread runs the whole range.
        unsafe { kernel(args, 0, items) };
        return;
    }
    let old = p.job_word.0.load(Ordering::Relaxed);
    let word = (((old >> 8).wrapping_add(1)) << 8) | helpers;
    // Close claims before the descriptor changes: a helper still on the previous job fails its
    // compare-and-swap from here on (the previous job's items are all claimed and finished).
    p.claim
        .0
        .store((word as u64) << 32 | CLOSED, Ordering::SeqCst);
    p.job.0.kernel.store(kernel as usize, Ordering::Release);
    p.job.0.args.store(args as usize, Ordering::Release);
    p.job.0.items.store(items, Ordering::Release);
    p.job.0.chunk.store(chunk, Ordering::Release);
    p.done.0.store(0, Ordering::Release);
    p.claim.0.store((word as u64) << 32, Ordering::SeqCst);
    p.job_word.0.store(word, Ordering::Release);
    wake(&p.job_word.0, u32::MAX);
    // SAFETY: as above; chunks are claimed atomically, so ranges are disjoint.
    unsafe { run_chunks(p, word) };
    wait_until_equal(&p.done.0, items as u32);
}

/// Claims and runs chunks of the job announced by `word` until none are left (or another job
/// has replaced it). Returns the number of chunks this thread ran.
unsafe fn run_chunks(p: &PoolState, word: u32) -> usize {
    let mut ran = 0;
    loop {
        let c = p.claim.0.load(Ordering::SeqCst);
        if (c >> 32) as u32 != word {
            return ran;
        }
        let start = (c & CLOSED) as usize;
        // Read after the claim word named this job and before the compare-and-swap: if that
        // succeeds, the job was still open, so these are its values (the driver closes the
        // claim word before it writes a new descriptor).
        let items = p.job.0.items.load(Ordering::Acquire);
        let chunk = p.job.0.chunk.load(Ordering::Acquire);
        let kernel_addr = p.job.0.kernel.load(Ordering::Acquire);
        let args = p.job.0.args.load(Ordering::Acquire) as *const u8;
        if start >= items {
            return ran;
        }
        // Guided sizes: a claim takes half an even share of what is left, in whole chunks (at
        // least one): long runs first (prefetchers follow them), short ones last, so the threads
        // finish together. The ranges depend only on (items, chunk, threads), not on timing.
        let threads = (word & 0xFF) as usize + 1;
        let size = (items - start)
            .div_ceil(2 * threads)
            .next_multiple_of(chunk);
        let end = (start + size).min(items);
        if p.claim
            .0
            .compare_exchange(
                c,
                c + (end - start) as u64,
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_err()
        {
            continue;
        }
        // SAFETY: the driver stored a valid `Kernel` before opening the job, and a function
        // pointer round-trips through usize. The claimed range is ours alone, and the job (its
        // arguments) lives until `done` reaches `items`, which needs this chunk.
        unsafe {
            let kernel: Kernel = core::mem::transmute::<usize, Kernel>(kernel_addr);
            kernel(args, start, end);
        }
        ran += 1;
        let finished =
            p.done.0.fetch_add((end - start) as u32, Ordering::AcqRel) + (end - start) as u32;
        if finished as usize == items {
            wake(&p.done.0, 1);
            return ran;
        }
    }
}

/// The body of the `helper_loop` export. Returns only after [`shutdown`].
pub fn helper_loop(id: u32) {
    let p = pool();
    let mut seen = p.job_word.0.load(Ordering::Acquire);
    // Count ourselves in, in id order: wait for helpers 0..id to be listening first.
    loop {
        let r = p.registered.0.load(Ordering::Acquire);
        if r == id {
            p.registered.0.store(id + 1, Ordering::Release);
            wake(&p.registered.0, u32::MAX);
            break;
        }
        if p.shutdown.load(Ordering::Acquire) != 0 {
            return;
        }
        wait_while_equal(&p.registered.0, r, 64);
    }
    let (mut spins, mut spin_budget) = (0u32, SPIN_ROUNDS);
    loop {
        let word = p.job_word.0.load(Ordering::Acquire);
        if word == seen {
            // A helper that first read `job_word` after `shutdown` bumped it would otherwise
            // wait for a change that never comes.
            if p.shutdown.load(Ordering::Acquire) != 0 {
                return;
            }
            spins += 1;
            if spins > spin_budget {
                wait_while_equal(&p.job_word.0, seen, 0);
            } else {
                core::hint::spin_loop();
            }
            continue;
        }
        seen = word;
        if p.shutdown.load(Ordering::Acquire) != 0 {
            return;
        }
        if id < (word & 0xFF) {
            spins = 0;
            // SAFETY: run_chunks only runs chunks it claimed for the job `word` announced.
            let ran = unsafe { run_chunks(p, word) };
            spin_budget = if ran > 0 {
                spin_budget.saturating_mul(2).min(SPIN_ROUNDS)
            } else {
                (spin_budget / 4).max(SPIN_ROUNDS_MIN)
            };
        }
    }
}

/// Releases every helper from `helper_loop` (so a page can unload). Later jobs run inline.
pub fn shutdown() {
    let p = pool();
    p.shutdown.store(1, Ordering::Release);
    p.threads.store(1, Ordering::Relaxed);
    p.registered.0.store(0, Ordering::Release);
    let word = p.job_word.0.load(Ordering::Relaxed);
    p.job_word
        .0
        .store(word.wrapping_add(1 << 8) & !0xFF, Ordering::Release);
    wake(&p.job_word.0, u32::MAX);
    wake(&p.registered.0, u32::MAX);
}

fn wait_until_equal(word: &AtomicU32, target: u32) {
    let mut spins = 0u32;
    loop {
        let v = word.load(Ordering::Acquire);
        if v == target {
            return;
        }
        spins += 1;
        if spins > SPIN_ROUNDS {
            wait_while_equal(word, v, 0);
        } else {
            core::hint::spin_loop();
        }
    }
}

/// Sleeps while `*word == expected` (or returns at once if it differs). `spin_first` rounds of
/// busy-waiting come before the sleep.
fn wait_while_equal(word: &AtomicU32, expected: u32, spin_first: u32) {
    for _ in 0..spin_first {
        if word.load(Ordering::Acquire) != expected {
            return;
        }
        core::hint::spin_loop();
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    // SAFETY: `word` is a valid, aligned i32 in shared linear memory; wait32 only reads it.
    unsafe {
        core::arch::wasm32::memory_atomic_wait32(word.as_ptr() as *mut i32, expected as i32, -1);
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    core::hint::spin_loop();
}

fn wake(word: &AtomicU32, count: u32) {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    // SAFETY: `word` is a valid, aligned i32 in shared linear memory.
    unsafe {
        core::arch::wasm32::memory_atomic_notify(word.as_ptr() as *mut i32, count);
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    let _ = (word, count);
}

/// Self-test used by the host tests: `jobs` jobs of pseudo-random sizes and chunkings (from
/// `seed`), the thread count changing between jobs within `1..=max_threads`. Each item is computed
/// through a stack-heavy kernel (a 256-word array on the stack), so helpers sharing a stack would
/// corrupt it. Returns a checksum over all outputs, which must not depend on the thread counts.
pub fn selftest(jobs: u32, seed: u32, max_threads: u32) -> crate::error::Result<u32> {
    use alloc::vec::Vec;
    const MAX_ITEMS: usize = 4096;
    let mut out: Vec<u32> = Vec::new();
    out.try_reserve_exact(MAX_ITEMS)
        .map_err(|_| crate::err!(crate::error::Status::OutOfMemory, "selftest buffer"))?;
    out.resize(MAX_ITEMS, 0);
    let saved_threads = threads();
    let mut rng = seed as u64 | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 16) as u32
    };
    let mut checksum = 0u32;
    for job in 0..jobs {
        let items = 1 + next() as usize % MAX_ITEMS;
        let chunk = 1 + next() as usize % 97;
        set_threads(1 + next() % max_threads.max(1));
        let args = SelftestArgs {
            out: out.as_mut_ptr(),
            len: items,
            salt: job ^ seed,
        };
        // SAFETY: `selftest_kernel` writes only `out[start..end]` for in-range items.
        unsafe {
            par_for(
                selftest_kernel,
                &args as *const _ as *const u8,
                items,
                chunk,
            )
        };
        for &v in &out[..items] {
            checksum = checksum.rotate_left(5) ^ v;
        }
    }
    set_threads(saved_threads);
    Ok(checksum)
}

struct SelftestArgs {
    out: *mut u32,
    len: usize,
    salt: u32,
}

unsafe fn selftest_kernel(args: *const u8, start: usize, end: usize) {
    // SAFETY: `selftest` passes a live `SelftestArgs`.
    let a = unsafe { &*(args as *const SelftestArgs) };
    for item in start..end.min(a.len) {
        let mut scratch = [0u32; 256];
        let mut x = (item as u32).wrapping_mul(0x9E37_79B9) ^ a.salt;
        for s in scratch.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *s = x;
        }
        // Keep the array on the stack and in use across the fold.
        let scratch = core::hint::black_box(scratch);
        let v = scratch
            .iter()
            .fold(0u32, |acc, &s| acc.wrapping_mul(31).wrapping_add(s));
        // SAFETY: item < len, and each item belongs to exactly one chunk.
        unsafe { a.out.add(item).write(v) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    unsafe fn square_into(args: *const u8, start: usize, end: usize) {
        // SAFETY: the test passes a pointer to `(ptr, len)` of an output slice.
        let (out, len) = unsafe { *(args as *const (*mut u64, usize)) };
        for i in start..end {
            assert!(i < len);
            // SAFETY: i < len; ranges are disjoint.
            unsafe { *out.add(i) = (i as u64) * (i as u64) };
        }
    }

    #[test]
    fn inline_job_covers_every_item_once() {
        let mut out = vec![0u64; 1001];
        let args = (out.as_mut_ptr(), out.len());
        unsafe { par_for(square_into, &args as *const _ as *const u8, out.len(), 64) };
        assert!(out.iter().enumerate().all(|(i, &v)| v == (i * i) as u64));
    }

    #[test]
    fn selftest_checksum_is_stable() {
        let a = selftest(50, 7, 4).unwrap();
        let b = selftest(50, 7, 1).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, selftest(50, 8, 1).unwrap());
    }
}
