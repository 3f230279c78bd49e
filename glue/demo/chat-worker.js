// The chat driver, in a module Worker (it blocks in memory.atomic.wait32 while helpers work, which
// a page's main thread may not). Loads wasmind (threaded when this context is cross-origin
// isolated) and the model, then answers each user message, posting the reply piece by piece.
import { load, memoryFor } from '../wasmind.js';

let wm = null;
self.onmessage = async ({ data: m }) => {
  try {
    if (m.type === 'load') {
      const r = await fetch(m.model);
      if (!r.ok) throw new Error(`${m.model}: HTTP ${r.status} (fetch the model: python3 models/fetch.py)`);
      const gguf = new Uint8Array(await r.arrayBuffer());
      wm = await load({ threads: m.threads, maxMemory: memoryFor(gguf.byteLength) });
      const info = wm.loadModel(gguf, { context: m.context });
      if (m.temperature !== undefined) wm.setSampler({ temperature: m.temperature, repeatPenalty: m.temperature > 0 ? 1.1 : 1 });
      self.postMessage({ type: 'ready', info, threaded: wm.threaded, threads: wm.exports.pool_threads(),
        stopFlag: wm.threaded ? wm.stopFlag() : null });
    } else if (m.type === 'user') {
      wm.addMessage('user', m.text);
      const it = wm.reply({ maxTokens: 512 });
      let r;
      while (!(r = it.next()).done) self.postMessage({ type: 'piece', text: r.value });
      self.postMessage({ type: 'done', stats: r.value });
    }
  } catch (e) {
    self.postMessage({ type: 'error', error: String(e?.stack ?? e) });
  }
};
