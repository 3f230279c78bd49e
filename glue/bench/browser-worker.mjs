// browser-worker.mjs: wasmind's side of the Chromium bench (chromium.mjs), in a module Worker
// (the driver blocks in memory.atomic.wait32 while helpers work, which a page may not): loads the
// module through glue/wasmind.js, fetches the model and runs measure.mjs's LLM measurement.
import { load, memoryFor } from '../wasmind.js';
import { measureLlm } from './measure.mjs';

self.onmessage = async ({ data: { threads, relaxed, prompt, longPrompt, gen, reps } }) => {
  try {
    let file = new Uint8Array(await (await fetch('/model.gguf')).arrayBuffer());
    const dist = new URL('/dist/', location.origin);
    const wm = threads === 0 ? await load({ threaded: false, relaxed, dist })
      : await load({ threaded: true, threads, relaxed, maxMemory: memoryFor(file.length) + 64 * 2 ** 20, dist });
    // The module keeps its own copy: drop ours once it is loaded (as the page API never holds one).
    const takeModel = () => { const f = file; file = null; return f; };
    const r = measureLlm(wm, { takeModel, prompt, longPrompt, gen, reps });
    const memoryBytes = wm.memory.buffer.byteLength;
    await wm.close();
    self.postMessage({ ...r, threaded: wm.threaded, relaxed: wm.relaxed, memory_bytes: memoryBytes });
  } catch (e) {
    self.postMessage({ error: String(e?.stack ?? e) });
  }
};
