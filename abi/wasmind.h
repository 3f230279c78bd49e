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
#define WASMIND_E_END              11  /* the reply is complete (end-of-generation token or max_tokens); not a failure */
#define WASMIND_E_HELPER_LOST      12  /* a helper stopped mid-job (trap, terminated worker): no progress for 3 s; sticky, unload and start a new module */

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
WASMIND_API uint32_t    heap_in_use(void);                  /* bytes in live blocks (leak checks) */
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
/* diagnostics: helper `id` fails in the next chunk it claims (kind 1 traps, 2 sleeps for ever, 0 clears) */
WASMIND_API int32_t     pool_inject_fault(uint32_t id, uint32_t kind);
/* diagnostics: reads len bytes passes times on the pool's threads (bandwidth); a checksum */
WASMIND_API int32_t     stream_read(wasmind_ptr data, uint32_t len, uint32_t passes);

/* tokenize flags */
#define WASMIND_TOKENIZE_ADD_SPECIAL   1 /* BOS/EOS as the model's metadata says */
#define WASMIND_TOKENIZE_PARSE_SPECIAL 2 /* special tokens written in the text become their ids */
/* detokenize flags */
#define WASMIND_DETOKENIZE_SPECIAL     1 /* render control tokens as their text */

/* Models (driver only). A text result is left in the result buffer: result_ptr(), the returned
 * length, valid until the next text-returning call. */
WASMIND_API int32_t     set_context(uint32_t tokens);      /* KV length for the next load; 0 = model's (max 4096) */
WASMIND_API int32_t     set_quantize(uint32_t ggml_type);  /* next load: 0 = as stored, 8 = F32/F16/BF16 matrices to Q8_0 */
WASMIND_API int32_t     load_model(wasmind_ptr file, uint32_t len); /* GGUF; the module owns the block */
WASMIND_API void        unload_model(void);
WASMIND_API int32_t     model_info(void);                  /* JSON in the result buffer; returns its length */
WASMIND_API wasmind_ptr result_ptr(void);
WASMIND_API wasmind_ptr step(uint32_t token);              /* logits (f32[vocab]) or 0 on error */
WASMIND_API int32_t     prefill(wasmind_ptr ids, uint32_t n);
WASMIND_API int32_t     prefill_logits(wasmind_ptr ids, uint32_t n, wasmind_ptr out); /* out: f32[n][vocab] */
WASMIND_API wasmind_ptr logits(void);                      /* after the last token run */
WASMIND_API int32_t     reset(void);
WASMIND_API int32_t     kv_truncate(uint32_t n);
WASMIND_API int32_t     kv_len(void);

/* Tokenizer (from the loaded GGUF, also vocabulary-only files) */
WASMIND_API int32_t     tokenize(wasmind_ptr text, uint32_t len, uint32_t flags, wasmind_ptr out, uint32_t cap); /* total ids */
WASMIND_API int32_t     detokenize(wasmind_ptr ids, uint32_t n, uint32_t flags); /* text in the result buffer */
WASMIND_API int32_t     detokenize_stream(int32_t id, uint32_t flags); /* complete UTF-8 of one more token; -1 flushes */

/* Embeddings: Model2Vec, or a BERT sentence encoder in one GGUF file */
/* load_embedder: the first block (model.safetensors, or a GGUF file with tok_len = cfg_len = 0) is owned by
 * the module from now on; the JSON files are copied. Returns dim. */
WASMIND_API int32_t     load_embedder(wasmind_ptr safetensors, uint32_t st_len, wasmind_ptr tokenizer_json, uint32_t tok_len, wasmind_ptr config_json, uint32_t cfg_len);
WASMIND_API void        unload_embedder(void);             /* drops the embedder and frees its file */
WASMIND_API int32_t     embedder_info(void);               /* JSON in the result buffer; returns its length */
WASMIND_API int32_t     embed(wasmind_ptr text, uint32_t len, wasmind_ptr out); /* out: f32[dim]; returns dim */
/* embed_batch: n texts back to back at `texts`, text i = bytes offsets[i]..offsets[i+1] (offsets: u32[n+1]);
 * out: f32[n][dim]. Split across the pool in the threaded build; each vector equals embed()'s. Returns n. */
WASMIND_API int32_t     embed_batch(wasmind_ptr texts, wasmind_ptr offsets, uint32_t n, wasmind_ptr out);
WASMIND_API int32_t     embed_ids(wasmind_ptr text, uint32_t len, wasmind_ptr out, uint32_t cap);

/* Chat (driver only). chat_add messages, chat_start runs only what is new since the last reply
 * (the KV cache keeps the conversation), then chat_next until it returns < 0:
 *   n >= 0: the next piece of the reply, n bytes of complete UTF-8 at result_ptr() (may be 0);
 *   -WASMIND_E_END (end-of-generation token or max_tokens), -WASMIND_E_STOPPED (stop flag),
 *   -WASMIND_E_CONTEXT_FULL: the reply is over.
 * now_ms: the host's monotonic clock in milliseconds (or 0), for the timings in chat_stats(). */
#define WASMIND_ROLE_SYSTEM      0
#define WASMIND_ROLE_USER        1
#define WASMIND_ROLE_ASSISTANT   2
#define WASMIND_ROLE_RAW         3 /* text as it is, no template markup; the reply continues it */
#define WASMIND_CHAT_DROP_OLDEST 1 /* chat_set_options: drop the oldest turns when the context is full */
#define WASMIND_CHAT_THINK       2 /* chat_set_options: let a model that can reason think (Qwen3: no empty <think> block) */
/* chat_set_template ids: 0 the model's (detected from tokenizer.chat_template), then in this order
 * (names as chat_set_template_name and template_render take them, llama.cpp's but qwen3):
 * 1 chatml, 2 llama3, 3 gemma, 4 llama2-sys, 5 mistral-v1, 6 llama2, 7 llama2-sys-bos,
 * 8 llama2-sys-strip, 9 mistral-v3, 10 mistral-v3-tekken, 11 mistral-v7, 12 mistral-v7-tekken,
 * 13 phi3, 14 phi4, 15 zephyr, 16 vicuna, 17 deepseek3, 18 granite, 19 smolvlm, 20 falcon3,
 * 21 command-r, 22 exaone3, 23 llama4, 24 hunyuan-dense, 25 qwen3, 26 deepseek (DeepSeek Coder) */
#define WASMIND_TEMPLATE_AUTO    0
WASMIND_API int32_t     chat_reset(void);                  /* forget the conversation and the KV cache */
WASMIND_API int32_t     chat_add(uint32_t role, wasmind_ptr text, uint32_t len); /* returns the message count */
WASMIND_API int32_t     chat_start(uint32_t max_tokens, double now_ms); /* 0 = up to the context; returns prompt tokens run */
WASMIND_API int32_t     chat_next(double now_ms);          /* piece length in the result buffer, or < 0 when over */
WASMIND_API int32_t     chat_last_token(void);             /* id chat_next sampled last (end token included), or -1 */
WASMIND_API int32_t     chat_tokens(wasmind_ptr out, uint32_t cap); /* ids in the KV cache; returns the total */
WASMIND_API int32_t     chat_stats(void);                  /* JSON in the result buffer (timings, state, cache) */
WASMIND_API int32_t     chat_set_options(uint32_t flags);  /* WASMIND_CHAT_DROP_OLDEST | WASMIND_CHAT_THINK */
WASMIND_API int32_t     chat_set_template(uint32_t id);    /* WASMIND_TEMPLATE_AUTO or an id above */
/* by name; empty: the model's; INVALID_ARGUMENT (the message lists the names) for an unknown one */
WASMIND_API int32_t     chat_set_template_name(wasmind_ptr name, uint32_t len);
/* Renders a conversation without running it (no model needed): json = {"messages": [{"role":
 * "system"|"user"|"assistant", "content": "..."}, ...], "add_assistant": bool, "think": bool};
 * name: a template name, empty for the loaded model's (ChatML without one). The text is left in the
 * result buffer; returns its length. */
WASMIND_API int32_t     template_render(wasmind_ptr name, uint32_t name_len, wasmind_ptr json, uint32_t json_len);
#define WASMIND_GRAMMAR_NONE        0
#define WASMIND_GRAMMAR_GBNF        1 /* llama.cpp's GBNF text */
#define WASMIND_GRAMMAR_JSON_SCHEMA 2 /* JSON schema text */
#define WASMIND_GRAMMAR_JSON_OBJECT 3 /* any JSON object (text ignored) */
/* Constrain the next reply (used up by the next chat_start). Errors name the byte position. */
WASMIND_API int32_t     chat_set_grammar(uint32_t kind, wasmind_ptr text, uint32_t len);
/* Sampler: temperature <= 0 is greedy; top_k 0, top_p 1, min_p 0, repeat_penalty 1 are off. */
WASMIND_API int32_t     sampler_set(float temperature, uint32_t top_k, float top_p, float min_p, float repeat_penalty, uint32_t repeat_window, uint32_t seed);
WASMIND_API int32_t     sample(wasmind_ptr history, uint32_t n); /* a token from logits(); history feeds the penalty */
WASMIND_API int32_t     sampler_defaults(void);            /* JSON in the result buffer: the chat defaults */

/* Diagnostics */
WASMIND_API int32_t     math_apply(uint32_t which, wasmind_ptr in, wasmind_ptr out, uint32_t n);

#endif /* WASMIND_H */
