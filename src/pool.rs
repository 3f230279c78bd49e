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
//! - `lost`: a helper that traps or whose worker is terminated while it holds a chunk would
//!   keep `done` short of the item count for ever. The driver's wait sleeps in slices and gives
//!   up after [`STALL_LIMIT_MS`] without progress: it closes the job, sets `lost` for good (later
//!   jobs run on the driver alone) and [`check`] fails every compute call from then on, so the
//!   host gets `HELPER_LOST` instead of a hang or of output computed from half a job. (A helper
//!   that was only frozen and runs again later may still write into its old job's outputs,
//!   which is why nothing is computed after a loss: the host unloads and starts a new module.)
//!
//! Determinism: each output element is computed inside one chunk by one thread, and kernels
//! compute an element the same way whatever range it arrives in, so results do not depend on
//! the thread count or on who took what. (Chunk ranges themselves are guided: large first,
//! down to the job's chunk size at the end.)
//!
//! In the single-threaded build (and natively on the host) there are no helpers and every job
//! runs inline on the caller.

use core::marker::PhantomData;
use core::ops::Range;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::state::{CLOSED, PoolState};

/// A type-erased kernel: runs items `start..end` of a job whose arguments are at `args`. Only
/// [`par_for`] makes one (the trampoline [`call`]); it is what crosses instances through the
/// job descriptor, as a function-table index.
type Erased = unsafe fn(args: *const u8, start: usize, end: usize);

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
/// Largest item count a job may have (the claim counter is 32 bits and may overshoot by a chunk).
const MAX_ITEMS: usize = (u32::MAX / 2) as usize;
/// How long the driver waits for a job that makes no progress (no chunk finishes) before it
/// declares a helper lost. The longest chunk is half a job (two threads, decode's matrix
/// products, [`even_share`]), well under a second for any model that fits in wasm32's memory.
pub const STALL_LIMIT_MS: u32 = 3000;
/// The driver's wait for a job sleeps in slices this long, counting the ones without progress.
const STALL_SLICE_MS: u32 = 50;

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

/// The chunk size (a multiple of `multiple`) that splits `items` into one run per thread:
/// for a job whose threads each do best with one long run. A thread that arrives late finds
/// its run taken by one that finished its own.
pub fn even_share(items: usize, multiple: usize) -> usize {
    items
        .div_ceil(threads() as usize)
        .next_multiple_of(multiple.max(1))
}

/// Helpers registered and listening.
pub fn helpers_ready() -> u32 {
    pool().registered.0.load(Ordering::Acquire)
}

/// Fails once a helper has been lost (see the module comment): every compute call checks it
/// before it starts and after it ran, so none returns output computed from half a job.
pub fn check() -> crate::error::Result<()> {
    if pool().lost.load(Ordering::Acquire) != 0 {
        return Err(crate::err!(
            crate::error::Status::HelperLost,
            "a helper thread stopped mid-job (no progress for {} ms: it trapped, or its worker \
             was terminated); nothing more is computed in this module: unload, then start a new one",
            STALL_LIMIT_MS
        ));
    }
    Ok(())
}

/// What [`inject_fault`] makes a helper do in the next chunk it claims.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub enum Fault {
    /// Execute `unreachable`: the helper's instance traps (its worker reports it and ends).
    Trap = 1,
    /// Sleep for ever holding the chunk, as a worker terminated mid-job would.
    Stall = 2,
}

impl Fault {
    /// The fault numbered `kind` (`pool_inject_fault`'s numbers), if any.
    pub fn from_kind(kind: u32) -> Option<Fault> {
        match kind {
            1 => Some(Fault::Trap),
            2 => Some(Fault::Stall),
            _ => None,
        }
    }
}

/// Diagnostics (`pool_inject_fault`): helper `id` fails as `fault` says in the next chunk it
/// claims, so hosts can test that a lost helper gives `HELPER_LOST` rather than a hang.
pub fn inject_fault(id: u32, fault: Option<Fault>) {
    let word = fault.map_or(0, |f| (f as u32) << 16 | (id + 1));
    pool().fault.store(word, Ordering::Release);
}

/// Runs `f(ctx, range)` over disjoint ranges that together cover `0..items`, on the driver and
/// the helpers, and returns when all are done. Ranges are whole multiples of `chunk` (but the
/// last) and guided: a claim takes half an even share of what is left, so long runs come first.
///
/// `ctx` is shared by every thread at once, hence `T: Sync`; an output that items write in
/// disjoint parts goes in it as a [`Disjoint`]. `f` is a plain `fn`, not a closure: a function
/// pointer is a table index in wasm and so names the same code in every instance.
pub fn par_for<T: Sync>(ctx: &T, items: usize, chunk: usize, f: fn(&T, Range<usize>)) {
    let job = Job { ctx, f };
    // SAFETY: `call::<T>` reads exactly the `Job<T>` it is given; `job` outlives `run_job`,
    // which returns only after every chunk has finished; `T: Sync` makes sharing `ctx` sound.
    unsafe {
        run_job(
            call::<T>,
            &job as *const Job<'_, T> as *const u8,
            items,
            chunk,
        )
    }
}

/// What [`par_for`] hands the pool: the context and the function, behind one pointer.
struct Job<'a, T> {
    ctx: &'a T,
    f: fn(&T, Range<usize>),
}

/// The trampoline from the pool's erased kernel to a typed `Job<T>`.
///
/// # Safety
/// `args` points to a live `Job<'_, T>`.
unsafe fn call<T>(args: *const u8, start: usize, end: usize) {
    // SAFETY: the caller's contract.
    let job = unsafe { &*(args as *const Job<'_, T>) };
    (job.f)(job.ctx, start..end)
}

/// A mutable slice that the items of one job write in disjoint parts, from several threads.
/// It is `Sync` so a [`par_for`] context can hold it; every access is `unsafe` and its contract
/// is the disjointness.
pub struct Disjoint<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: elements are reached only through `slice`/`as_mut_ptr`, whose callers promise that no
// two threads touch the same element at once; `T: Send` because elements are written from other
// threads than the owner's.
unsafe impl<T: Send> Sync for Disjoint<'_, T> {}

impl<'a, T> Disjoint<'a, T> {
    pub fn new(s: &'a mut [T]) -> Disjoint<'a, T> {
        Disjoint {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            _borrow: PhantomData,
        }
    }

    /// Elements `range`, for writing.
    ///
    /// # Safety
    /// No other thread reads or writes any element of `range` while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, range: Range<usize>) -> &mut [T] {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "Disjoint::slice out of bounds"
        );
        // SAFETY: in bounds (checked); exclusive by the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }

    /// The first element's address, for writers with strided layouts (`quant::matmul_strided`),
    /// which carry their own contract.
    pub fn as_mut_ptr(&self) -> *mut T {
        self.ptr
    }
}

/// Runs the erased `kernel` over items `0..items` (see [`par_for`]).
///
/// # Safety
/// `kernel(args, start, end)` must be safe to call for disjoint ranges at the same time from
/// several threads, and `args` must stay valid until this returns (it does: the call blocks
/// until every chunk is done).
unsafe fn run_job(kernel: Erased, args: *const u8, items: usize, chunk: usize) {
    let p = pool();
    let chunk = chunk.clamp(1, MAX_ITEMS);
    let chunks = items.div_ceil(chunk);
    let helpers = (p.threads.load(Ordering::Relaxed) - 1)
        .min(p.registered.0.load(Ordering::Acquire))
        .min(chunks.saturating_sub(1) as u32);
    p.jobs_run.fetch_add(1, Ordering::Relaxed);
    if helpers == 0 || items > MAX_ITEMS || p.lost.load(Ordering::Acquire) != 0 {
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
    unsafe { run_chunks(p, word, None) };
    if !wait_for_job(p, items as u32) {
        // A participant holds a chunk it will never finish. No one may claim more of this job
        // (its arguments die when we return), and no later job may wait on the helpers.
        p.claim
            .0
            .store((word as u64) << 32 | CLOSED, Ordering::SeqCst);
        p.lost.store(1, Ordering::Release);
    }
}

/// Claims and runs chunks of the job announced by `word` until none are left (or another job
/// has replaced it). Returns the number of chunks this thread ran. `fault`: instead of running
/// the first chunk it claims, fail that way (diagnostics, see [`inject_fault`]).
unsafe fn run_chunks(p: &PoolState, word: u32, fault: Option<Fault>) -> usize {
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
        if let Some(fault) = fault {
            fail_holding_chunk(p, fault);
        }
        // SAFETY: the driver stored a valid `Kernel` before opening the job, and a function
        // pointer round-trips through usize. The claimed range is ours alone, and the job (its
        // arguments) lives until `done` reaches `items`, which needs this chunk.
        unsafe {
            let kernel: Erased = core::mem::transmute::<usize, Erased>(kernel_addr);
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
            let fault = fault_for(p, id);
            // SAFETY: run_chunks only runs chunks it claimed for the job `word` announced.
            let ran = unsafe { run_chunks(p, word, fault) };
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

/// The fault helper `id` is to inject in the next chunk it claims, if any.
fn fault_for(p: &PoolState, id: u32) -> Option<Fault> {
    let word = p.fault.load(Ordering::Acquire);
    if word & 0xFFFF != id + 1 {
        return None;
    }
    Fault::from_kind(word >> 16)
}

/// A helper that claimed a chunk fails without finishing it (diagnostics). The fault fires once.
fn fail_holding_chunk(p: &PoolState, fault: Fault) -> ! {
    p.fault.store(0, Ordering::Release);
    match fault {
        #[cfg(target_arch = "wasm32")]
        Fault::Trap => core::arch::wasm32::unreachable(),
        #[cfg(not(target_arch = "wasm32"))]
        Fault::Trap => panic!("injected helper trap"),
        Fault::Stall => {
            // Nothing ever notifies this word.
            let never = AtomicU32::new(0);
            loop {
                sleep_while_equal(&never, 0, None);
            }
        }
    }
}

/// The driver's wait for the job's `items` to be `done`: spins, then sleeps in slices. Returns
/// false once [`STALL_LIMIT_MS`] of slices passed without a chunk finishing.
fn wait_for_job(p: &PoolState, items: u32) -> bool {
    let (mut spins, mut quiet_ms) = (0u32, 0u32);
    let mut last = p.done.0.load(Ordering::Acquire);
    loop {
        let v = p.done.0.load(Ordering::Acquire);
        if v == items {
            return true;
        }
        if v != last {
            (last, quiet_ms) = (v, 0);
        }
        spins += 1;
        if spins <= SPIN_ROUNDS {
            core::hint::spin_loop();
        } else if sleep_while_equal(&p.done.0, v, Some(STALL_SLICE_MS)) == Woke::TimedOut {
            quiet_ms += STALL_SLICE_MS;
            if quiet_ms >= STALL_LIMIT_MS {
                return false;
            }
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
    sleep_while_equal(word, expected, None);
}

/// How a sleep in [`sleep_while_equal`] ended.
#[derive(PartialEq, Eq)]
enum Woke {
    /// Notified, or the word already differed.
    Early,
    TimedOut,
}

/// `memory.atomic.wait32` on `word` while it holds `expected`, for at most `timeout_ms` (None:
/// until notified). Without shared memory (no helpers) it only yields the spin.
fn sleep_while_equal(word: &AtomicU32, expected: u32, timeout_ms: Option<u32>) -> Woke {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    {
        let timeout_ns = timeout_ms.map_or(-1, |ms| ms as i64 * 1_000_000);
        // SAFETY: `word` is a valid, aligned i32 in shared linear memory; wait32 only reads it.
        let r = unsafe {
            core::arch::wasm32::memory_atomic_wait32(
                word.as_ptr() as *mut i32,
                expected as i32,
                timeout_ns,
            )
        };
        if r == 2 { Woke::TimedOut } else { Woke::Early }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    {
        let _ = (word, expected, timeout_ms);
        core::hint::spin_loop();
        Woke::Early
    }
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
            out: Disjoint::new(&mut out[..items]),
            salt: job ^ seed,
        };
        par_for(&args, items, chunk, selftest_kernel);
        if let Err(e) = check() {
            set_threads(saved_threads);
            return Err(e);
        }
        for &v in &out[..items] {
            checksum = checksum.rotate_left(5) ^ v;
        }
    }
    set_threads(saved_threads);
    Ok(checksum)
}

struct SelftestArgs<'a> {
    /// (items,)
    out: Disjoint<'a, u32>,
    salt: u32,
}

fn selftest_kernel(a: &SelftestArgs<'_>, items: Range<usize>) {
    // SAFETY: this range of items is this call's alone.
    let out = unsafe { a.out.slice(items.clone()) };
    for (item, o) in items.zip(out) {
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
        *o = scratch
            .iter()
            .fold(0u32, |acc, &s| acc.wrapping_mul(31).wrapping_add(s));
    }
}

// Natively (and in the single-threaded build) there are no helpers, so these tests check the
// inline path only; the protocol with real helpers is tested where helpers exist: `pool_selftest`
// across thread counts in wasmtime (host-tests/tests/module.rs), Node and Chromium
// (glue/test/pool.test.mjs, glue/test/browser.test.mjs).
#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn square_into(out: &Disjoint<'_, u64>, items: Range<usize>) {
        // SAFETY: ranges are disjoint.
        let out = unsafe { out.slice(items.clone()) };
        for (i, o) in items.zip(out) {
            *o = (i as u64) * (i as u64);
        }
    }

    #[test]
    fn inline_job_covers_every_item_once() {
        let mut out = vec![0u64; 1001];
        let n = out.len();
        par_for(&Disjoint::new(&mut out), n, 64, square_into);
        assert!(out.iter().enumerate().all(|(i, &v)| v == (i * i) as u64));
    }

    #[test]
    fn selftest_depends_on_its_seed() {
        assert_eq!(selftest(50, 7, 1).unwrap(), selftest(50, 7, 1).unwrap());
        assert_ne!(selftest(50, 7, 1).unwrap(), selftest(50, 8, 1).unwrap());
    }
}
