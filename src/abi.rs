//! The raw ABI: `#[no_mangle] extern "C"` exports only. Pointers and lengths in, status codes out.
//!
//! Conventions (see `abi/ABI.md`, and `abi/wasmind.h` for the C view):
//! - an `i32` result `>= 0` is success (a count, a size, or 0); `< 0` is `-status` and
//!   `last_error`/`last_error_len` give the message;
//! - pointers are offsets into this module's linear memory, obtained from `alloc`;
//! - only the driver calls these, except `helper_loop` (helpers) and `shared_state` (anyone).

use core::alloc::{GlobalAlloc, Layout};

use crate::error::{Error, Result, Status};
use crate::state::SHARED;
use crate::{err, pool};

/// Version of this ABI; bump on any incompatible change.
pub const ABI_VERSION: u32 = 1;
/// Alignment of every `alloc` block (enough for SIMD loads and any tensor layout).
const ALLOC_ALIGN: usize = 16;

/// Records `e` as the last error and returns its negative status code.
fn fail(e: Error) -> i32 {
    SHARED.error.set(&e)
}

fn status(r: Result<i32>) -> i32 {
    r.unwrap_or_else(fail)
}

/// A view of `len` bytes at `ptr` in linear memory, checked for null and wrap-around.
///
/// # Safety
/// The host promises `ptr..ptr+len` is memory it got from `alloc` (or otherwise owns) and that
/// nothing else writes it during the call.
#[allow(dead_code)]
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() || (ptr as usize).checked_add(len).is_none() {
        return Err(err!(Status::InvalidArgument, "bad buffer: ptr {:p} len {}", ptr, len));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// # Safety
/// As [`bytes`], for a buffer the call may write.
unsafe fn bytes_mut<'a, T>(ptr: *mut T, count: usize) -> Result<&'a mut [T]> {
    if count == 0 {
        return Ok(&mut []);
    }
    let size = count.checked_mul(core::mem::size_of::<T>());
    if ptr.is_null()
        || (ptr as usize) % core::mem::align_of::<T>() != 0
        || size.and_then(|s| (ptr as usize).checked_add(s)).is_none()
    {
        return Err(err!(Status::InvalidArgument, "bad buffer: ptr {:p} count {}", ptr, count));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr, count) })
}

// ---------------------------------------------------------------------------------------------
// Memory and errors

/// Allocates `size` bytes aligned to 16. Returns 0 when memory cannot grow (never traps).
#[unsafe(no_mangle)]
pub extern "C" fn alloc(size: usize) -> *mut u8 {
    let Ok(layout) = Layout::from_size_align(size.max(1), ALLOC_ALIGN) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the layout has nonzero size.
    unsafe { crate::wasm_alloc::ALLOCATOR.alloc(layout) }
}

/// Frees a block from `alloc`; `size` must be the size it was allocated with. `free(0, _)` is a
/// no-op.
#[unsafe(no_mangle)]
pub extern "C" fn free(ptr: *mut u8, size: usize) {
    if ptr.is_null() {
        return;
    }
    if let Ok(layout) = Layout::from_size_align(size.max(1), ALLOC_ALIGN) {
        // SAFETY: the host's contract: `ptr` came from `alloc(size)`.
        unsafe { crate::wasm_alloc::ALLOCATOR.dealloc(ptr, layout) }
    }
}

/// Pointer to the UTF-8 message of the last failed call (not NUL-terminated).
#[unsafe(no_mangle)]
pub extern "C" fn last_error() -> *const u8 {
    SHARED.error.get().1.as_ptr()
}

/// Length in bytes of the last error message (0 if none).
#[unsafe(no_mangle)]
pub extern "C" fn last_error_len() -> usize {
    SHARED.error.get().1.len()
}

/// Status code of the last failed call (negative), or 0.
#[unsafe(no_mangle)]
pub extern "C" fn last_error_code() -> i32 {
    SHARED.error.get().0
}

/// `ABI_VERSION`.
#[unsafe(no_mangle)]
pub extern "C" fn abi_version() -> u32 {
    ABI_VERSION
}

/// 1 in the threaded build (shared imported memory, helpers possible), 0 in the single-threaded.
#[unsafe(no_mangle)]
pub extern "C" fn is_threaded() -> u32 {
    cfg!(target_feature = "atomics") as u32
}

/// Address of the shared state block (`state::Shared`): pool words, stop flag. See ABI.md.
#[unsafe(no_mangle)]
pub extern "C" fn shared_state() -> *const u8 {
    &SHARED as *const _ as *const u8
}

/// Asks a running generation to stop after its current token (same as storing 1 at
/// `shared_state() + 64`). Callable from any thread or instance.
#[unsafe(no_mangle)]
pub extern "C" fn request_stop() {
    SHARED.stop.0.store(1, core::sync::atomic::Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// Thread pool

/// Runs helper `id` (ids `0..N`, each on its own instance and stack). Returns only after
/// `pool_shutdown` (0), or at once in the single-threaded build (-WRONG_THREAD).
#[unsafe(no_mangle)]
pub extern "C" fn helper_loop(id: u32) -> i32 {
    if !cfg!(target_feature = "atomics") {
        return fail(err!(Status::WrongThread, "helper_loop needs the threaded build"));
    }
    if id >= pool::MAX_HELPERS {
        return fail(err!(Status::InvalidArgument, "helper id {} >= {}", id, pool::MAX_HELPERS));
    }
    pool::helper_loop(id);
    0
}

/// Sets the threads (driver included) later jobs use. Returns the helpers now listening.
#[unsafe(no_mangle)]
pub extern "C" fn pool_set_threads(n: u32) -> i32 {
    pool::set_threads(n);
    pool::helpers_ready() as i32
}

/// Threads (driver included) jobs use now.
#[unsafe(no_mangle)]
pub extern "C" fn pool_threads() -> u32 {
    pool::threads()
}

/// Helpers registered and listening.
#[unsafe(no_mangle)]
pub extern "C" fn pool_helpers_ready() -> i32 {
    pool::helpers_ready() as i32
}

/// Releases every helper from `helper_loop`; later jobs run on the driver alone.
#[unsafe(no_mangle)]
pub extern "C" fn pool_shutdown() {
    pool::shutdown();
}

/// Diagnostics: runs `jobs` jobs of pseudo-random sizes (from `seed`), changing the thread count
/// between jobs within `1..=max_threads`, each job filling an array through stack-heavy kernels.
/// Returns a checksum that must not depend on the thread counts.
#[unsafe(no_mangle)]
pub extern "C" fn pool_selftest(jobs: u32, seed: u32, max_threads: u32) -> i32 {
    status(pool::selftest(jobs, seed, max_threads).map(|c| (c & 0x7FFF_FFFF) as i32))
}

// ---------------------------------------------------------------------------------------------
// Math (diagnostics: lets a host test the hand-written functions inside the module)

/// Applies function `which` to `n` values: 0 `exp`, 1 `log`, 2 `sin`, 3 `cos` on f64 arrays;
/// 4 the 4-lane f32 `exp` on f32 arrays. `input` and `output` may be the same buffer.
#[unsafe(no_mangle)]
pub extern "C" fn math_apply(which: u32, input: *const u8, output: *mut u8, n: usize) -> i32 {
    // SAFETY: the host passes buffers it allocated for n values of the function's type.
    status(unsafe { math_apply_checked(which, input, output, n) })
}

unsafe fn math_apply_checked(which: u32, input: *const u8, output: *mut u8, n: usize) -> Result<i32> {
    use crate::math;
    if which == 4 {
        // SAFETY: the caller's contract.
        let out = unsafe { bytes_mut(output as *mut f32, n)? };
        if input != output as *const u8 {
            // SAFETY: the caller's contract; distinct buffers of n f32 each.
            let src = unsafe { bytes(input, n * 4)? };
            for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        math::exp_in_place(out);
        return Ok(n as i32);
    }
    let f: fn(f64) -> f64 = match which {
        0 => math::exp,
        1 => math::log,
        2 => math::sin,
        3 => math::cos,
        _ => return Err(err!(Status::InvalidArgument, "math_apply: unknown function {}", which)),
    };
    // Check both buffers, then go through raw pointers: they may be the same buffer.
    // SAFETY: the caller's contract.
    unsafe {
        bytes_mut(output as *mut f64, n)?;
        bytes_mut(input as *mut f64, n)?;
        let (src, dst) = (input as *const f64, output as *mut f64);
        for i in 0..n {
            dst.add(i).write(f(src.add(i).read()));
        }
    }
    Ok(n as i32)
}

