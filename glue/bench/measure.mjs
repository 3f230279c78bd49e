// measure.mjs: the LLM measurement wasmind's JS hosts share — bench.mjs in Node and
// browser-worker.mjs in a Chromium module Worker — on a module loaded through glue/wasmind.js.
// Inputs are copied into linear memory once; the timed loops contain only export calls (and, for
// decode, the argmax over the logits that any host does to pick the next token).

export const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const now = () => performance.now() / 1000;

export function check(wm, rc, what) {
  if (rc < 0) throw new Error(`${what} failed (${rc}): ${wm.lastError()}`);
  return rc;
}

/** `s` as UTF-8 in a block of the module's memory: [pointer, length]. */
export function putText(wm, s) {
  const b = new TextEncoder().encode(s);
  return [b.length ? wm.put(b) : wm.exports.alloc(1), b.length];
}

function tokenizeIn(wm, text, flags) {
  const [p, n] = putText(wm, text);
  const cap = n + 8, out = wm.exports.alloc(cap * 4);
  const count = check(wm, wm.exports.tokenize(p, n, flags, out, cap), 'tokenize');
  return { ptr: out, n: count };
}

/** Streaming read bandwidth inside the module, on its pool's threads (the `stream_read`
 *  export over a `mib` MiB buffer, filled first so no page is the shared zero page): bytes/s,
 *  the best of `rounds` timed rounds of `passes` reads each. */
export function measureBandwidth(wm, { mib = 128, passes = 4, rounds = 5 } = {}) {
  const x = wm.exports, len = mib * 2 ** 20;
  const ptr = x.alloc(len);
  if (ptr === 0) throw new Error(`stream_read: no room for ${mib} MiB`);
  try {
    new Uint8Array(wm.memory.buffer, ptr, len).fill(0x5a);
    check(wm, x.stream_read(ptr, len, 1), 'stream_read'); // warm-up
    let best = 0;
    for (let r = 0; r < rounds; r++) {
      const t0 = now();
      check(wm, x.stream_read(ptr, len, passes), 'stream_read');
      best = Math.max(best, len * passes / (now() - t0));
    }
    return best;
  } finally { x.free(ptr, len); }
}

function loadFile(wm, file) {
  return wm.exports.load_model(wm.put(file), file.length);
}

/**
 * Measures the module's read bandwidth (when it has `stream_read`: before the model, so the
 * probe's buffer is reused for it), then loads the model that `takeModel()` hands over (the
 * caller need keep no copy of the file) and measures, `reps` times after one warm-up round:
 * batched prefill of `prompt`, greedy decode of `gen` tokens, and (with `longPrompt`) the time
 * to the first token of a long prompt: its prefill plus picking the first token. Returns the
 * rates of every round.
 */
export function measureLlm(wm, { takeModel, prompt, longPrompt, gen, reps, context = 2048 }) {
  const x = wm.exports;
  const bandwidth = typeof x.stream_read === 'function' ? measureBandwidth(wm) : null;
  x.set_context(context);
  check(wm, loadFile(wm, takeModel()), 'load_model'); // no reference to the file outlives this
  const infoLen = check(wm, x.model_info(), 'model_info'); // then result_ptr: the buffer may move
  const info = JSON.parse(new TextDecoder().decode(wm.bytes(x.result_ptr(), infoLen)));
  const vocab = info.vocab;
  const ids = tokenizeIn(wm, prompt, 3); // add BOS/EOS per metadata, parse special tokens
  const long = longPrompt ? tokenizeIn(wm, longPrompt, 3) : null;
  const argmax = (ptr) => {
    const l = new Float32Array(wm.memory.buffer, ptr, vocab);
    let best = 0;
    for (let i = 1; i < vocab; i++) if (l[i] > l[best]) best = i;
    return best;
  };
  const pre = [], dec = [], ttft = [];
  let generated = [];
  for (let rep = 0; rep <= reps; rep++) {
    check(wm, x.reset(), 'reset');
    let t0 = now();
    check(wm, x.prefill(ids.ptr, ids.n), 'prefill');
    const prefillS = now() - t0;
    let ptr = x.logits();
    const genNow = rep === 0 ? 8 : gen, out = [];
    t0 = now();
    for (let i = 0; i < genNow; i++) {
      const next = argmax(ptr);
      out.push(next);
      ptr = x.step(next);
      if (ptr === 0) throw new Error(`step failed: ${wm.lastError()}`);
    }
    const decodeS = now() - t0;
    if (rep > 0) { pre.push(ids.n / prefillS); dec.push(genNow / decodeS); generated = out; }
    if (long && rep > 0) {
      check(wm, x.reset(), 'reset');
      t0 = now();
      check(wm, x.prefill(long.ptr, long.n), 'prefill (long prompt)');
      argmax(x.logits());
      ttft.push((now() - t0) * 1000);
    }
  }
  return {
    prompt_tokens: ids.n, gen_tokens: gen, reps,
    prefill_tok_s: Math.max(...pre), prefill_tok_s_median: median(pre),
    decode_tok_s: Math.max(...dec), decode_tok_s_median: median(dec),
    prefill_all: pre, decode_all: dec, generated_head: generated.slice(0, 16),
    ...(long ? { long_prompt_tokens: long.n, ttft_ms: Math.min(...ttft), ttft_all: ttft } : {}),
    // Decode reads every weight once a token: its ceiling is bandwidth ÷ bytes per token.
    ...(bandwidth && info.weight_bytes_per_token ? {
      stream_gb_s: bandwidth / 1e9, weight_bytes_per_token: info.weight_bytes_per_token,
      decode_ceiling_tok_s: bandwidth / info.weight_bytes_per_token,
      decode_of_ceiling: Math.max(...dec) / (bandwidth / info.weight_bytes_per_token),
    } : {}),
  };
}
