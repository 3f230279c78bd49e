/*
 * wasmind.h: the exports of wasmind.wasm / wasmind-mt.wasm, for a host (wasmtime, wazero, a
 * browser) that calls them. Every function below is a WebAssembly export of both modules.
 *
 * Types are as the module sees them (wasm32): `wasmind_ptr` is an offset into the module's
 * linear memory (i32), obtained from `alloc`. Results: an int32_t >= 0 is success (a count, a
 * size, 0); < 0 is -WASMIND_E_*, and last_error()/last_error_len() give a UTF-8 message.
 * See ABI.md for who may call what from which thread, the shared state layout, and threading.
 *
 * The host-tests check that every WASMIND_API line here is an export with this signature.
 */
#ifndef WASMIND_H
#define WASMIND_H
#include <stddef.h>
#include <stdint.h>

typedef uint32_t wasmind_ptr; /* offset in linear memory */
#define WASMIND_API /* exported function */

#define WASMIND_ABI_VERSION 1

/* Status codes: functions return the negative value. Never renumbered. */
#define WASMIND_OK                  0
#define WASMIND_E_INVALID_ARGUMENT  1  /* out-of-range argument, bad pointer or length */
#define WASMIND_E_OUT_OF_MEMORY     2  /* an allocation failed; nothing changed */
#define WASMIND_E_BAD_FORMAT        3  /* malformed input bytes (truncated, inconsistent) */
#define WASMIND_E_UNSUPPORTED       4  /* well formed but not implemented (tensor type, arch) */
#define WASMIND_E_NO_MODEL          5  /* needs a loaded model or embedder */
#define WASMIND_E_CONTEXT_FULL      6  /* KV cache full; nothing written past its end */
#define WASMIND_E_INVALID_UTF8      7  /* text is not valid UTF-8 */
#define WASMIND_E_BUFFER_TOO_SMALL  8  /* output buffer too small; size in the message */
#define WASMIND_E_WRONG_THREAD      9  /* not allowed from this build or thread */
#define WASMIND_E_STOPPED          10  /* generation stopped through the stop flag */

/* Shared state block (threaded build: shared by every instance). Offsets from shared_state(). */
#define WASMIND_SHARED_MAGIC        0x646e6d77u /* "wmnd" little-endian, at offset 0 */
#define WASMIND_SHARED_STOP         64  /* u32: nonzero asks generation to stop */
#define WASMIND_SHARED_POOL         128 /* pool words, see ABI.md */
#define WASMIND_HELPER_STACK_MIN    (256 * 1024) /* smallest stack a helper should get */
#define WASMIND_MAX_HELPERS         255

/* math_apply function ids */
#define WASMIND_MATH_EXP   0 /* f64 */
#define WASMIND_MATH_LOG   1 /* f64 */
#define WASMIND_MATH_SIN   2 /* f64 */
#define WASMIND_MATH_COS   3 /* f64 */
#define WASMIND_MATH_EXPF4 4 /* f32, the 4-lane SIMD exp */

/* Memory and errors */
WASMIND_API wasmind_ptr alloc(uint32_t size);              /* 16-aligned; 0 when out of memory */
WASMIND_API void        free(wasmind_ptr ptr, uint32_t size);
WASMIND_API wasmind_ptr last_error(void);                  /* UTF-8, not NUL-terminated */
WASMIND_API uint32_t    last_error_len(void);
WASMIND_API int32_t     last_error_code(void);             /* negative status, or 0 */
WASMIND_API uint32_t    abi_version(void);                 /* WASMIND_ABI_VERSION */
WASMIND_API uint32_t    is_threaded(void);                 /* 1 for wasmind-mt.wasm */
WASMIND_API wasmind_ptr shared_state(void);
WASMIND_API void        request_stop(void);                /* any thread */

/* Thread pool (threaded build; in the single-threaded build jobs run on the caller) */
WASMIND_API int32_t     helper_loop(uint32_t id);          /* helpers only; returns after pool_shutdown */
WASMIND_API int32_t     pool_set_threads(uint32_t n);      /* driver; returns helpers listening */
WASMIND_API uint32_t    pool_threads(void);
WASMIND_API int32_t     pool_helpers_ready(void);
WASMIND_API void        pool_shutdown(void);               /* driver; releases every helper */
WASMIND_API int32_t     pool_selftest(uint32_t jobs, uint32_t seed, uint32_t max_threads);

/* Diagnostics */
WASMIND_API int32_t     math_apply(uint32_t which, wasmind_ptr in, wasmind_ptr out, uint32_t n);

#endif /* WASMIND_H */
