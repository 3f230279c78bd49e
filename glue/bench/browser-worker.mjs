// browser-worker.mjs: wasmind's side of the Chromium bench (chromium.mjs), in a module Worker
// (the driver blocks in memory.atomic.wait32 while helpers work, which a page may not): loads the
// module through glue/wasmind.js, fetches the model and runs measure.mjs's LLM measurement.
import { load, memoryFor } from '../wasmind.js';
import { measureLlm } from './measure.mjs';

self.onmessage = async ({ data: { threads, prompt, longPrompt, gen, reps } }) => {
  try {
    const modelBytes = new Uint8Array(await (await fetch('/model.gguf')).arrayBuffer());
    const wm = threads === 0 ? await load({ threaded: false, dist: new URL('/dist/', location.origin) })
      : await load({ threaded: true, threads, maxMemory: memoryFor(modelBytes.length) + 64 * 2 ** 20, dist: new URL('/dist/', location.origin) });
    const r = measureLlm(wm, { modelBytes, prompt, longPrompt, gen, reps });
    const memoryBytes = wm.memory.buffer.byteLength;
    await wm.close();
    self.postMessage({ ...r, threaded: wm.threaded, memory_bytes: memoryBytes });
  } catch (e) {
    self.postMessage({ error: String(e?.stack ?? e) });
  }
};
