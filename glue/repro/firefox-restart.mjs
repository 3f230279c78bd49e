// A reproduction of Firefox's threaded restart hang (docs/engines.md, "Known problems"): a
// cross-origin isolated page that loads the threaded module with 2 threads, then unloads and
// loads again N times, each step with its own deadline. Prints one line a cycle and, on a hang,
// the step that hung and the content processes' pids (HOLD=1 keeps Firefox open for gdb).
//   WASMIND_FIXTURES=/work/main/target/fixtures node glue/repro/firefox-restart.mjs [cycles] [runs]
import puppeteer from 'puppeteer-core';
import { execFileSync } from 'node:child_process';
import { serve } from '../demo/serve.js';
import { MODEL_FILE } from '../test/harness.mjs';

const cycles = Number(process.argv[2] ?? 10), runs = Number(process.argv[3] ?? 1);
// CACHE=1: loads through the OPFS cache (as page.test.mjs); SETTLE=ms: a pause after each unload.
const opts = { cache: process.env.CACHE === '1', settle: Number(process.env.SETTLE ?? 0), threaded: process.env.THREADED !== '0' };
const PAGE = `<!doctype html><meta charset="utf-8"><title>restart</title>
<script type="module">import { Wasmind } from '/glue/index.js'; window.Wasmind = Wasmind; window.pageReady = true;</script>`;
const server = await serve({ port: 0, files: { '/model.gguf': MODEL_FILE }, pages: { '/restart.html': PAGE } });
const origin = `http://127.0.0.1:${server.address().port}`;
let hung = 0, total = 0;
for (let run = 0; run < runs; run++) {
  const browser = await puppeteer.launch({ browser: 'firefox', executablePath: process.env.FIREFOX ?? '/usr/bin/firefox-esr',
    protocol: 'webDriverBiDi', headless: true });
  const page = await browser.newPage();
  if (process.env.CONSOLE === '1') page.on('console', (m) => console.log(`  console: ${m.text()}`));
  await page.goto(`${origin}/restart.html`);
  await page.waitForFunction(() => window.pageReady);
  if (process.env.TRACE === '1') await page.evaluate(() => { window.TRACE = true; });
  const result = await page.evaluate(async ({ cycles, cache, settle, threaded }) => {
    const deadline = (p, what, ms = 30000) => Promise.race([p, new Promise((_, fail) => setTimeout(() => fail(new Error(`${what}: no answer in ${ms} ms`)), ms))]);
    const times = [];
    try {
      if (cache) await Wasmind.deleteCached();
      const ai = await deadline(Wasmind.create({ threads: 2, threaded, startTimeout: 20000 }), 'create');
      if (ai.threaded !== threaded) return { error: 'threaded: ' + ai.threaded };
      await deadline(ai.load('/model.gguf', { context: 256, cache }), 'first load');
      for (let i = 0; i < cycles; i++) {
        const t0 = performance.now();
        await deadline(ai.unload(), `unload ${i}`);
        if (settle) await new Promise((r) => setTimeout(r, settle));
        if (window.TRACE) window.__wasmindTrace = new SharedArrayBuffer(1024);
        await deadline(ai.load('/model.gguf', { context: 256, cache }), `load ${i}`);
        times.push(Math.round(performance.now() - t0));
      }
      return { times };
    } catch (e) {
      const t = window.__wasmindTrace && new Int32Array(window.__wasmindTrace);
      return { times, error: e.message, trace: t && [...t.subarray(1, 1 + Math.min(t[0], 250))].join(' ') };
    }
  }, { cycles, ...opts });
  total += result.times?.length ?? 0;
  console.log(`run ${run}: ${JSON.stringify(result)}`);
  if (result.error) {
    hung++;
    const pid = browser.process()?.pid;
    const kids = execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).trim().split('\n');
    console.log(`Firefox ${pid}, its processes: ${kids.join(' ')}`);
    if (process.env.HOLD === '1') { console.log('HOLD=1: Firefox stays open; Ctrl-C to end'); await new Promise(() => {}); }
  }
  await browser.close();
}
console.log(`${runs - hung} of ${runs} runs without a hang (${total} restarts completed)`);
server.close();
