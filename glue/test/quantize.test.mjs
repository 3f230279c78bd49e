// loadModel's `quantize` option through glue/wasmind.js in Node: an F32 file quantized to Q8_0
// as it loads gives the logits of llama-quantize's Q8_0 file (the module's rounding is ggml's);
// an unknown type is refused before anything loads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fixture } from './reference.mjs';
import { load } from '../wasmind.js';

const tiny = (f) => readFileSync(fixture(`models/tiny/${f}`));
const ids = JSON.parse(readFileSync(fixture('models/tiny/tiny-arch-reference.json'))).tokens;

/** Logits after each id, one step at a time (raw exports). */
function logits(wm, vocab) {
  return ids.slice(0, 8).map((id) => {
    const ptr = wm.exports.step(id);
    assert.notEqual(ptr, 0, 'step failed');
    return Array.from(new Float32Array(wm.memory.buffer, ptr, vocab));
  });
}

test("{ quantize: 'q8_0' } equals the Q8_0 file; other types are refused", async () => {
  const wm = await load({ threaded: false });
  try {
    const q = wm.loadModel(tiny('tiny-gemma3-F32.gguf'), { context: 64, quantize: 'q8_0' });
    assert.equal(q.arch, 'gemma3');
    assert.ok(q.quantized_at_load_bytes > 0);
    assert.deepEqual(q.layer_kinds, ['local', 'local', 'local', 'local', 'local', 'global']);
    const a = logits(wm, q.vocab);
    const f = wm.loadModel(tiny('tiny-gemma3-Q8_0.gguf'), { context: 64 });
    assert.equal(f.quantized_at_load_bytes, 0);
    assert.deepEqual(logits(wm, f.vocab), a);
    assert.throws(() => wm.loadModel(tiny('tiny-gemma3-F32.gguf'), { quantize: 'q4_0' }), /quantize/);
  } finally {
    await wm.close();
  }
});
