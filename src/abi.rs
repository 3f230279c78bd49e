//! The raw ABI: `#[no_mangle] extern "C"` exports only. Pointers and lengths in, status codes out.
//!
//! Conventions (see `abi/ABI.md`, and `abi/wasmind.h` for the C view):
//! - an `i32` result `>= 0` is success (a count, a size, or 0); `< 0` is `-status` and
//!   `last_error`/`last_error_len` give the message;
//! - pointers are offsets into this module's linear memory, obtained from `alloc`;
//! - only the driver calls these, except `helper_loop` (helpers) and `shared_state` (anyone).

use core::alloc::GlobalAlloc;

use crate::engine::Driver;
use crate::error::{Error, Result, Status};
use crate::state::{DriverCell, SHARED};
use crate::wasm_alloc::{ALLOCATOR, Block, block_layout};
use crate::{err, pool};

/// Version of this ABI; bump on any incompatible change.
pub const ABI_VERSION: u32 = 1;

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
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8]> {
    if len == 0 && ptr.is_null() {
        return Ok(&[]);
    }
    if ptr.is_null() || (ptr as usize).checked_add(len).is_none() {
        return Err(bad_buffer(ptr, "len", len));
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
        || !(ptr as usize).is_multiple_of(core::mem::align_of::<T>())
        || size.and_then(|s| (ptr as usize).checked_add(s)).is_none()
    {
        return Err(bad_buffer(ptr, "count", count));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr, count) })
}

/// The error for a buffer [`bytes`] or [`bytes_mut`] refuses: its pointer and size (`what`).
fn bad_buffer<T>(ptr: *const T, what: &str, size: usize) -> Error {
    err!(
        Status::InvalidArgument,
        "bad buffer: ptr {ptr:p} {what} {size}"
    )
}

// ---------------------------------------------------------------------------------------------
// Memory and errors

/// Allocates `size` bytes aligned to 16. Returns 0 when memory cannot grow (never traps).
#[unsafe(no_mangle)]
pub extern "C" fn alloc(size: usize) -> *mut u8 {
    let Some(layout) = block_layout(size) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the layout has nonzero size.
    unsafe { ALLOCATOR.alloc(layout) }
}

/// Frees a block from `alloc`; `size` must be the size it was allocated with. `free(0, _)` is a
/// no-op.
#[unsafe(no_mangle)]
pub extern "C" fn free(ptr: *mut u8, size: usize) {
    if ptr.is_null() {
        return;
    }
    if let Some(layout) = block_layout(size) {
        // SAFETY: the host's contract: `ptr` came from `alloc(size)`.
        unsafe { ALLOCATOR.dealloc(ptr, layout) }
    }
}

/// Bytes in live heap blocks (what the module and the host have allocated and not freed):
/// after `unload_model` and `unload_embedder` it is back where it was before the loads.
#[unsafe(no_mangle)]
pub extern "C" fn heap_in_use() -> usize {
    crate::wasm_alloc::bytes_in_use()
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
    SHARED
        .stop
        .0
        .store(1, core::sync::atomic::Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// Thread pool

/// Runs helper `id` (ids `0..N`, each on its own instance and stack). Returns only after
/// `pool_shutdown` (0), or at once in the single-threaded build (-WRONG_THREAD).
#[unsafe(no_mangle)]
pub extern "C" fn helper_loop(id: u32) -> i32 {
    if !cfg!(target_feature = "atomics") {
        return fail(err!(
            Status::WrongThread,
            "helper_loop needs the threaded build"
        ));
    }
    if id >= pool::MAX_HELPERS {
        return fail(err!(
            Status::InvalidArgument,
            "helper id {} >= {}",
            id,
            pool::MAX_HELPERS
        ));
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

/// Diagnostics: helper `id` fails in the next chunk it claims, holding it: `kind` 1 traps
/// (`unreachable`), 2 sleeps for ever (as a worker terminated mid-job); 0 clears. The job then
/// makes no progress, and the call running it returns `-HELPER_LOST` after `STALL_LIMIT_MS`
/// (3 s); so does every compute call after it. For testing hosts' handling of a lost helper.
#[unsafe(no_mangle)]
pub extern "C" fn pool_inject_fault(id: u32, kind: u32) -> i32 {
    let fault = pool::Fault::from_kind(kind);
    if fault.is_none() && kind != 0 {
        return fail(err!(
            Status::InvalidArgument,
            "fault kind {} (0, 1 or 2)",
            kind
        ));
    }
    pool::inject_fault(id.min(pool::MAX_HELPERS), fault);
    0
}

/// Diagnostics: runs `jobs` jobs of pseudo-random sizes (from `seed`), changing the thread count
/// between jobs within `1..=max_threads`, each job filling an array through stack-heavy kernels.
/// Returns a checksum that must not depend on the thread counts.
#[unsafe(no_mangle)]
pub extern "C" fn pool_selftest(jobs: u32, seed: u32, max_threads: u32) -> i32 {
    status(pool::selftest(jobs, seed, max_threads).map(|c| (c & 0x7FFF_FFFF) as i32))
}

/// Diagnostics: reads `len` bytes at `ptr` `passes` times on the pool's threads (streaming read
/// bandwidth, timed by the host); returns the wrapping sum of their u32 words & 0x7FFFFFFF.
#[unsafe(no_mangle)]
pub extern "C" fn stream_read(ptr: *const u8, len: usize, passes: u32) -> i32 {
    // SAFETY: the host passes memory it owns.
    status(
        unsafe { bytes(ptr, len) }
            .and_then(|data| crate::probe::stream_read(data, passes))
            .map(|s| (s & 0x7FFF_FFFF) as i32),
    )
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

unsafe fn math_apply_checked(
    which: u32,
    input: *const u8,
    output: *mut u8,
    n: usize,
) -> Result<i32> {
    use crate::math;
    if which == 4 {
        // SAFETY: the caller's contract.
        let out = unsafe { bytes_mut(output as *mut f32, n)? };
        if !core::ptr::eq(input, output) {
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
        _ => {
            return Err(err!(
                Status::InvalidArgument,
                "math_apply: unknown function {}",
                which
            ));
        }
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

// ---------------------------------------------------------------------------------------------
// The engines (driver only)

static DRIVER: DriverCell<Driver> = DriverCell::new();

/// The driver's state, created on first use.
fn driver() -> &'static mut Driver {
    // SAFETY: exports below are driver-only (ABI.md); no reference from an earlier call is
    // alive when the next export runs.
    unsafe {
        if DRIVER.get().is_none() {
            DRIVER.set(Some(Driver::default()));
        }
        DRIVER
            .get()
            .unwrap_or_else(|| core::arch::wasm32::unreachable())
    }
}

/// Sets the KV cache length (tokens) that the next `load_model` uses; 0 = the model's own
/// context length, capped at 4096.
#[unsafe(no_mangle)]
pub extern "C" fn set_context(tokens: u32) -> i32 {
    driver().llm.context_request = tokens as usize;
    0
}

/// Sets the type the next `load_model` turns F32, F16 and BF16 matrices into as it reads them:
/// 0 keeps every tensor as stored, 8 (GGML_TYPE_Q8_0) gives Q8_0 blocks rounded as ggml's
/// `quantize_row_q8_0_ref` (the bytes `llama-quantize --pure` writes). Anything else is
/// UNSUPPORTED. Returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn set_quantize(ggml_type: u32) -> i32 {
    use crate::quant::GgmlType;
    let request = match GgmlType::from_id(ggml_type) {
        GgmlType::F32 => None, // id 0
        GgmlType::Q8_0 => Some(GgmlType::Q8_0),
        other => {
            return fail(err!(
                Status::Unsupported,
                "quantizing at load to type {} ({}); supported: 0 (keep as stored), 8 (Q8_0)",
                ggml_type,
                other.name()
            ));
        }
    };
    driver().llm.quantize_request = request;
    0
}

/// Loads a GGUF model from `ptr..ptr+len`, a block from `alloc(len)` that the module owns from
/// now on, whatever the outcome (it is freed on failure, when another model is loaded, or on
/// `unload_model`; the host must not free it). Files with only a vocabulary give a tokenizer
/// and no weights. Returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn load_model(ptr: *mut u8, len: usize) -> i32 {
    let llm = &mut driver().llm;
    llm.unload();
    // SAFETY: the host hands over `alloc(len)` memory; nothing else uses it from now on.
    status(unsafe { Block::from_raw(ptr, len) }.and_then(|file| llm.load(file).map(|()| 0)))
}

/// Drops the model and frees its file and the text-result buffer (`result_ptr`).
#[unsafe(no_mangle)]
pub extern "C" fn unload_model() {
    let d = driver();
    d.llm.unload();
    // Text results are the model's (pieces, stats, info): their buffer goes with it.
    d.result = alloc::vec::Vec::new();
}

/// Writes a JSON description of the loaded model to the result buffer; returns its length
/// (read it at `result_ptr()`).
#[unsafe(no_mangle)]
pub extern "C" fn model_info() -> i32 {
    let d = driver();
    status(d.llm.model_info(&mut d.result).map(|n| n as i32))
}

/// Address of the result buffer of the last text-returning call (`model_info`, `detokenize`,
/// `detokenize_stream`), valid until the next such call.
#[unsafe(no_mangle)]
pub extern "C" fn result_ptr() -> *const u8 {
    driver().result.as_ptr()
}

/// Runs one token at the next position; returns the address of its logits (`vocab` f32), or 0
/// on error (see `last_error`: CONTEXT_FULL when the cache is full).
#[unsafe(no_mangle)]
pub extern "C" fn step(token: u32) -> *const f32 {
    let r = driver().llm.model().and_then(|m| {
        m.forward(&[token], None)?;
        Ok(m.logits.as_ptr())
    });
    r.unwrap_or_else(|e| {
        fail(e);
        core::ptr::null()
    })
}

/// Runs `n` tokens (`u32` ids at `ids`) in batches; afterwards `logits()` holds the last one's.
/// Returns `n`.
#[unsafe(no_mangle)]
pub extern "C" fn prefill(ids: *const u32, n: usize) -> i32 {
    // SAFETY: the host passes n ids it wrote.
    status(unsafe { ids_slice(ids, n) }.and_then(|ids| {
        driver().llm.model()?.forward(ids, None)?;
        Ok(n as i32)
    }))
}

/// Like `prefill`, and writes the logits after every position to `out` (`(n, vocab)` f32).
#[unsafe(no_mangle)]
pub extern "C" fn prefill_logits(ids: *const u32, n: usize, out: *mut f32) -> i32 {
    // SAFETY: the host passes n ids and room for n * vocab floats.
    status(unsafe { ids_slice(ids, n) }.and_then(|ids| {
        let m = driver().llm.model()?;
        let vocab = m.cfg.vocab;
        let total = n
            .checked_mul(vocab)
            .ok_or_else(|| err!(Status::InvalidArgument, "n too large"))?;
        let out = unsafe { bytes_mut(out, total)? };
        m.forward(
            ids,
            Some(&mut |i, l: &[f32]| out[i * vocab..(i + 1) * vocab].copy_from_slice(l)),
        )?;
        Ok(n as i32)
    }))
}

/// Address of the logits after the last token run (`vocab` f32), 0 without a model.
#[unsafe(no_mangle)]
pub extern "C" fn logits() -> *const f32 {
    driver()
        .llm
        .model_ref()
        .map_or(core::ptr::null(), |m| m.logits.as_ptr())
}

/// Forgets every cached token.
#[unsafe(no_mangle)]
pub extern "C" fn reset() -> i32 {
    status(driver().llm.model().map(|m| {
        m.reset();
        0
    }))
}

/// Keeps the first `n` cached tokens (to rewind a conversation). Returns `n`. A model with
/// sliding-window layers (gemma3) keeps only window + 31 positions in those layers; going back
/// further than that re-runs the `n` kept tokens to rebuild them.
#[unsafe(no_mangle)]
pub extern "C" fn kv_truncate(n: u32) -> i32 {
    status(
        driver()
            .llm
            .model()
            .and_then(|m| m.truncate(n as usize).map(|()| n as i32)),
    )
}

/// Tokens in the KV cache.
#[unsafe(no_mangle)]
pub extern "C" fn kv_len() -> i32 {
    status(driver().llm.model().map(|m| m.pos as i32))
}

/// Tokenizes `len` bytes of UTF-8 at `text`. `flags`: 1 add BOS/EOS as the model's metadata
/// says, 2 parse special tokens written in the text. Writes up to `cap` ids to `out` and returns
/// the total count (call again with a larger buffer if it exceeds `cap`).
#[unsafe(no_mangle)]
pub extern "C" fn tokenize(
    text: *const u8,
    len: usize,
    flags: u32,
    out: *mut u32,
    cap: usize,
) -> i32 {
    // SAFETY: the host passes its text and room for cap ids.
    status(unsafe { bytes(text, len) }.and_then(|text| {
        let ids = driver().llm.tokenize(text, flags)?;
        let out = unsafe { bytes_mut(out, cap.min(ids.len()))? };
        let n = out.len();
        out.copy_from_slice(&ids[..n]);
        i32::try_from(ids.len()).map_err(|_| err!(Status::InvalidArgument, "too many ids"))
    }))
}

/// Turns `n` ids into text in the result buffer; returns its length. `flags`: 1 render control
/// tokens as their text.
#[unsafe(no_mangle)]
pub extern "C" fn detokenize(ids: *const u32, n: usize, flags: u32) -> i32 {
    // SAFETY: the host passes n ids.
    let d = driver();
    status(
        unsafe { ids_slice(ids, n) }
            .and_then(|ids| Ok(d.llm.detokenize(ids, flags, &mut d.result)? as i32)),
    )
}

/// Streaming detokenization: puts in the result buffer the complete UTF-8 text that token `id`
/// adds (a piece ending inside a character waits for the next); `id = -1` flushes and restarts.
#[unsafe(no_mangle)]
pub extern "C" fn detokenize_stream(id: i32, flags: u32) -> i32 {
    let d = driver();
    status(
        d.llm
            .stream_piece(id as i64, flags, &mut d.result)
            .map(|n| n as i32),
    )
}

/// Loads a Model2Vec model from its files: `model.safetensors` (a block from `alloc` that the
/// module owns from now on, like `load_model`'s), `tokenizer.json` and `config.json` (copied;
/// the host may free them). Returns the vector width.
#[unsafe(no_mangle)]
pub extern "C" fn load_embedder(
    st: *mut u8,
    st_len: usize,
    tok: *const u8,
    tok_len: usize,
    cfg: *const u8,
    cfg_len: usize,
) -> i32 {
    let e = &mut driver().embedder;
    e.unload();
    // SAFETY: the host's buffers, as documented; the safetensors block is ours from here on.
    let r = unsafe { Block::from_raw(st, st_len) }
        .and_then(|st| unsafe { Ok((st, bytes(tok, tok_len)?, bytes(cfg, cfg_len)?)) });
    status(r.and_then(|(st, tok, cfg)| e.load(st, tok, cfg).map(|d| d as i32)))
}

/// Writes a JSON description of the loaded embedder to the result buffer (`kind`:
/// `model2vec` or `bert`, `dim`; an encoder's layers, `max_tokens` and `pooling` too); returns
/// its length (read it at `result_ptr()`).
#[unsafe(no_mangle)]
pub extern "C" fn embedder_info() -> i32 {
    let d = driver();
    status(d.embedder.info(&mut d.result).map(|n| n as i32))
}

/// Drops the embedder and frees its file and the buffers its embeddings grew.
#[unsafe(no_mangle)]
pub extern "C" fn unload_embedder() {
    driver().embedder.unload();
}

/// The sentence vector of `len` bytes of UTF-8 at `text`, written to `out` (`dim` f32).
/// Returns `dim`.
#[unsafe(no_mangle)]
pub extern "C" fn embed(text: *const u8, len: usize, out: *mut f32) -> i32 {
    let e = &mut driver().embedder;
    let dim = match e.dim() {
        Ok(d) => d,
        Err(x) => return fail(x),
    };
    // SAFETY: the host passes its text and room for dim floats.
    status(
        unsafe { bytes(text, len).and_then(|t| Ok((t, bytes_mut(out, dim)?))) }
            .and_then(|(t, out)| e.embed(t, out).map(|d| d as i32)),
    )
}

/// Embeds `n` texts in one call (split across the thread pool in the threaded build): the
/// texts lie back to back at `texts`, text `i` is bytes `offsets[i]..offsets[i + 1]` (`offsets`:
/// `n + 1` u32, ordered), its vector goes to `out + i * dim` (`out`: `(n, dim)` f32). Each
/// vector equals `embed`'s for that text, for any thread count. Returns `n`; if some texts fail
/// (invalid UTF-8) they get zero vectors and the error names the lowest such index.
#[unsafe(no_mangle)]
pub extern "C" fn embed_batch(
    texts: *const u8,
    offsets: *const u32,
    n: usize,
    out: *mut f32,
) -> i32 {
    let e = &mut driver().embedder;
    let dim = match e.dim() {
        Ok(d) => d,
        Err(x) => return fail(x),
    };
    // SAFETY: the host passes n + 1 offsets, the text bytes up to offsets[n], and room for
    // n * dim floats.
    status(
        unsafe {
            let count = n
                .checked_add(1)
                .ok_or_else(|| err!(Status::InvalidArgument, "n too large"));
            count.and_then(|c| ids_slice(offsets, c)).and_then(|offs| {
                let len = offs.last().copied().unwrap_or(0) as usize;
                let floats = n
                    .checked_mul(dim)
                    .ok_or_else(|| err!(Status::InvalidArgument, "n too large"))?;
                Ok((bytes(texts, len)?, offs, bytes_mut(out, floats)?))
            })
        }
        .and_then(|(texts, offs, out)| e.embed_batch(texts, offs, out))
        .and_then(|n| {
            i32::try_from(n).map_err(|_| err!(Status::InvalidArgument, "too many texts"))
        }),
    )
}

/// The token ids `embed` pools for the text (after dropping [UNK], truncated), up to `cap`
/// written to `out`; returns the count.
#[unsafe(no_mangle)]
pub extern "C" fn embed_ids(text: *const u8, len: usize, out: *mut u32, cap: usize) -> i32 {
    // SAFETY: the host passes its text and room for cap ids.
    status(unsafe { bytes(text, len) }.and_then(|text| {
        let ids = driver().embedder.embed_ids(text)?;
        let out = unsafe { bytes_mut(out, cap.min(ids.len()))? };
        let n = out.len();
        out.copy_from_slice(&ids[..n]);
        Ok(ids.len() as i32)
    }))
}

/// # Safety
/// As [`bytes`], for `n` ids.
unsafe fn ids_slice<'a>(ids: *const u32, n: usize) -> Result<&'a [u32]> {
    // SAFETY: the caller's contract.
    unsafe { bytes_mut(ids as *mut u32, n) }.map(|s| &*s)
}

// ---------------------------------------------------------------------------------------------
// Chat and sampling (driver only). A conversation is messages added with `chat_add`; each
// `chat_start` runs only what is new since the last reply (the KV cache keeps the rest), then
// `chat_next` returns the reply piece by piece. Timestamps come from the host (`now_ms`, any
// monotonic clock in milliseconds, or 0): the module has no clock import.

/// Forgets the conversation and every cached token. Returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn chat_reset() -> i32 {
    status(driver().llm.chat_reset().map(|()| 0))
}

/// Appends a message of `len` bytes of UTF-8 at `text` (copied). `role`: 0 system, 1 user,
/// 2 assistant, 3 raw text (no template markup; a reply continues it). Returns the number of
/// messages in the conversation.
#[unsafe(no_mangle)]
pub extern "C" fn chat_add(role: u32, text: *const u8, len: usize) -> i32 {
    // SAFETY: the host passes its text.
    status(unsafe { bytes(text, len) }.and_then(|t| Ok(driver().llm.chat_add(role, t)? as i32)))
}

/// Starts a reply of at most `max_tokens` tokens (0: until the context is full): runs the
/// messages added since the last reply and the template's generation prompt. Returns the
/// prompt tokens run. CONTEXT_FULL when they do not fit (unless dropping oldest turns is on),
/// STOPPED when the stop flag was set while reading the prompt (nothing changes then).
#[unsafe(no_mangle)]
pub extern "C" fn chat_start(max_tokens: u32, now_ms: f64) -> i32 {
    status(
        driver()
            .llm
            .chat_start(max_tokens, now_ms)
            .map(|n| n as i32),
    )
}

/// Generates the next token: its text (complete UTF-8, possibly empty while a character is
/// incomplete) goes to the result buffer; returns its length. Once the reply is over it
/// returns -END (end-of-generation token or `max_tokens`), -STOPPED (stop flag) or
/// -CONTEXT_FULL; the call that notices the end returns the last held-back bytes (>= 0).
#[unsafe(no_mangle)]
pub extern "C" fn chat_next(now_ms: f64) -> i32 {
    let d = driver();
    status(d.llm.chat_next(now_ms, &mut d.result).map(|n| n as i32))
}

/// The id the last `chat_next` sampled (the end-of-generation token included), or -1.
#[unsafe(no_mangle)]
pub extern "C" fn chat_last_token() -> i32 {
    driver().llm.chat.last_token.map_or(-1, |t| t as i32)
}

/// The ids in the KV cache (prompt and replies, in order): up to `cap` written to `out`;
/// returns the total.
#[unsafe(no_mangle)]
pub extern "C" fn chat_tokens(out: *mut u32, cap: usize) -> i32 {
    let ids = driver().llm.chat.ids();
    // SAFETY: the host passes room for cap ids.
    status(
        unsafe { bytes_mut(out, cap.min(ids.len())) }.and_then(|out| {
            let n = out.len();
            out.copy_from_slice(&ids[..n]);
            i32::try_from(ids.len()).map_err(|_| err!(Status::InvalidArgument, "too many ids"))
        }),
    )
}

/// JSON in the result buffer: state, template, prompt and reply tokens, prefill/decode ms and
/// tokens/s, cache use, dropped messages, last token. Returns its length.
#[unsafe(no_mangle)]
pub extern "C" fn chat_stats() -> i32 {
    let d = driver();
    status(d.llm.chat_stats(&mut d.result).map(|n| n as i32))
}

/// Flags: 1 = when a new turn does not fit, drop the oldest turns (after leading system
/// messages) and re-read the rest, instead of failing with CONTEXT_FULL; 2 = let a model that
/// can reason think (Qwen3: no empty `<think>` block in front of the reply).
#[unsafe(no_mangle)]
pub extern "C" fn chat_set_options(flags: u32) -> i32 {
    status(driver().llm.chat_set_options(flags).map(|()| 0))
}

/// Constrains the next reply (the next `chat_start`; used up by it): `kind` 0 none, 1 GBNF
/// grammar text (llama.cpp's dialect), 2 JSON schema text, 3 any JSON object (`text` ignored).
/// `len` bytes of UTF-8 at `text`. Returns 0; an invalid grammar or schema fails with
/// BAD_FORMAT (or UNSUPPORTED) and a message naming the byte position and the reason.
#[unsafe(no_mangle)]
pub extern "C" fn chat_set_grammar(kind: u32, text: *const u8, len: usize) -> i32 {
    // SAFETY: the host passes its text.
    status(
        unsafe { bytes(text, len) }
            .and_then(|t| driver().llm.chat_set_grammar(kind, t).map(|()| 0)),
    )
}

/// Template by id: 0 the model's (detected), 1.. the templates in wasmind.h's order (1 chatml,
/// 2 llama3, 3 gemma, 4 llama2-sys, 5 mistral-v1, ...). The next `chat_start` re-reads the
/// conversation.
#[unsafe(no_mangle)]
pub extern "C" fn chat_set_template(id: u32) -> i32 {
    status(driver().llm.chat_set_template(id).map(|()| 0))
}

/// Template by name (`len` bytes at `name`: llama.cpp's names, or `qwen3`; empty: the model's).
/// INVALID_ARGUMENT, listing the known names, for an unknown one.
#[unsafe(no_mangle)]
pub extern "C" fn chat_set_template_name(name: *const u8, len: usize) -> i32 {
    // SAFETY: the host passes its text.
    status(
        unsafe { bytes(name, len) }
            .and_then(|n| driver().llm.chat_set_template_name(n).map(|()| 0)),
    )
}

/// Renders a conversation without a model: `json` (`{"messages": [{"role", "content"}..],
/// "add_assistant": bool, "think": bool}`) with the template named by `name` (empty: the loaded
/// model's, else ChatML). The text goes to the result buffer; returns its length.
#[unsafe(no_mangle)]
pub extern "C" fn template_render(
    name: *const u8,
    name_len: usize,
    json: *const u8,
    json_len: usize,
) -> i32 {
    let d = driver();
    // SAFETY: the host passes its name and its JSON.
    status(
        unsafe { bytes(name, name_len).and_then(|n| Ok((n, bytes(json, json_len)?))) }
            .and_then(|(n, j)| Ok(d.llm.template_render(n, j, &mut d.result)? as i32)),
    )
}

/// Sampler settings; the RNG restarts from `seed`. `temperature <= 0` is greedy; `top_k` 0,
/// `top_p` 1, `min_p` 0 and `repeat_penalty` 1 turn those steps off.
#[unsafe(no_mangle)]
pub extern "C" fn sampler_set(
    temperature: f32,
    top_k: u32,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
    repeat_window: u32,
    seed: u32,
) -> i32 {
    let s = crate::sampler::Settings {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty,
        repeat_window,
        seed: seed as u64,
    };
    status(driver().llm.sampler_set(s).map(|()| 0))
}

/// The sampler's chat defaults (what a fresh module uses) as JSON in the result buffer:
/// `temperature`, `top_k`, `top_p`, `min_p`, `repeat_penalty`, `repeat_window`, `seed`. Returns
/// its length.
#[unsafe(no_mangle)]
pub extern "C" fn sampler_defaults() -> i32 {
    let d = driver();
    d.result.clear();
    crate::sampler::Settings::default().write_json(&mut d.result);
    d.result.len() as i32
}

/// Samples a token from `logits()` with the sampler settings; `history` (`n` ids, oldest
/// first) feeds the repetition penalty. Returns the id.
#[unsafe(no_mangle)]
pub extern "C" fn sample(history: *const u32, n: usize) -> i32 {
    // SAFETY: the host passes n ids.
    status(unsafe { ids_slice(history, n) }.and_then(|h| Ok(driver().llm.sample(h)? as i32)))
}
