// firefox-restart.mjs's cycles in a Firefox without automation (no WebDriver BiDi, no DevTools):
// with no worker-debugger listeners Firefox never blocks a worker's new Worker(). The page runs the cycles
// itself and POSTs its result. ROOT: the checkout whose glue/ and dist/ are served (another
// worktree's, to try the glue as it was).
//   WASMIND_FIXTURES=/work/main/target/fixtures [ROOT=dir] node glue/repro/firefox-restart-plain.mjs [cycles] [runs]
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '../demo/serve.js';
import { MODEL_FILE } from '../test/harness.mjs';
const cycles = Number(process.argv[2] ?? 25), runs = Number(process.argv[3] ?? 3);
const PAGE = `<!doctype html><meta charset="utf-8"><script type="module">
import { Wasmind } from '/glue/index.js';
const deadline = (p, what, ms = 30000) => Promise.race([p, new Promise((_, fail) => setTimeout(() => fail(new Error(what + ': no answer')), ms))]);
const times = []; let error = null;
try {
  await Wasmind.deleteCached();
  const ai = await deadline(Wasmind.create({ threads: 2, startTimeout: 20000 }), 'create');
  if (!ai.threaded) throw new Error('not threaded');
  await deadline(ai.load('/model.gguf', { context: 256 }), 'first load');
  for (let i = 0; i < ${cycles}; i++) {
    const t0 = performance.now();
    await deadline(ai.unload(), 'unload ' + i);
    await new Promise((r) => setTimeout(r, 300));
    await deadline(ai.load('/model.gguf', { context: 256 }), 'load ' + i);
    times.push(Math.round(performance.now() - t0));
  }
} catch (e) { error = e.message; }
await fetch('/result', { method: 'POST', body: JSON.stringify({ times, error }) });
</script>`;
let done;
const server = await serve({ port: 0, root: process.env.ROOT ?? fileURLToPath(new URL('../../', import.meta.url)), files: { '/model.gguf': MODEL_FILE }, pages: { '/plain.html': PAGE },
  intercept: async (req, res, url) => {
    if (url.pathname !== '/result') return false;
    let body = ''; for await (const c of req) body += c;
    res.end('ok'); done?.(JSON.parse(body)); return true;
  } });
for (let run = 0; run < runs; run++) {
  const profile = mkdtempSync(join(tmpdir(), 'ff-plain-'));
  writeFileSync(join(profile, 'user.js'), 'user_pref("browser.shell.checkDefaultBrowser", false);\nuser_pref("browser.startup.homepage_override.mstone", "ignore");\nuser_pref("datareporting.policy.dataSubmissionEnabled", false);\n');
  const ff = spawn(process.env.FIREFOX_BIN ?? '/usr/lib/firefox-esr/firefox-esr', ['--headless', '--no-remote', '--profile', profile, `http://127.0.0.1:${server.address().port}/plain.html`], { stdio: 'ignore' });
  const result = await Promise.race([new Promise((r) => { done = r; }), new Promise((r) => setTimeout(() => r({ error: 'no result in 300 s' }), 300000))]);
  console.log(`run ${run}: ${JSON.stringify(result)}`);
  ff.kill(); await new Promise((r) => ff.once('exit', r)); rmSync(profile, { recursive: true, force: true });
}
server.close();
