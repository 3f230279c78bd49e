// The browser engines the page tests run in, each behind one small driver with the same page
// API, so a test is written once and run in all of them:
// - Chromium: Debian's `chromium` through playwright-core (CDP), a persistent profile on disk;
// - Firefox ESR: Debian's `firefox-esr` through puppeteer-core over WebDriver BiDi;
// - WebKitGTK: Debian's `WebKitWebDriver` (webkit2gtk-driver) driving its MiniBrowser over
//   plain WebDriver HTTP calls, under `xvfb-run` (xvfb) when there is no $DISPLAY.
// A page has goto(url), evaluate(fn, arg), waitForFunction(fn, arg, { timeout }), fill(selector,
// text), press(selector, key), click(selector) and errors() (the page's uncaught errors so far);
// `raw` is the engine's own page object (Chromium: for the DevTools protocol; WASMIND_BROWSER_CONSOLE=1
// prints Firefox's page console). A browser has
// newPage(), close(), pss() (bytes: the proportional set size of all its processes) and
// `version`. An engine that cannot start is a failure that names the apt package to install;
// WASMIND_SKIP_FIREFOX=1 / WASMIND_SKIP_WEBKIT=1 (or WASMIND_SKIP_BROWSER=1 for all three) skip
// its tests instead, and the skip goes into $WASMIND_SKIP_LOG.
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const FIREFOX = process.env.FIREFOX ?? '/usr/bin/firefox-esr';
export const WEBKIT_DRIVER = process.env.WEBKIT_DRIVER ?? '/usr/bin/WebKitWebDriver';
export const MINIBROWSER = process.env.MINIBROWSER ?? '/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser';
export const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];

const skipped = new Set();
/** The skip reason of an engine's tests (`false`: they run), logged once per test file. */
function skipOf(label, own, reason) {
  const why = reason ?? (process.env.WASMIND_SKIP_BROWSER === '1' ? 'WASMIND_SKIP_BROWSER=1' : process.env[own] === '1' ? `${own}=1` : false);
  if (why && process.env.WASMIND_SKIP_LOG && !skipped.has(label)) {
    skipped.add(label);
    appendFileSync(process.env.WASMIND_SKIP_LOG, `glue/test/${basename(process.argv[1] ?? '?')}: the ${label} tests (${why})\n`);
  }
  return why;
}

/** A dependency that is missing: an error that says what to run. */
const missing = (what, fix) => new Error(`${what} missing: ${fix}`);
async function importOrFail(name) {
  try { return await import(name); } catch (e) {
    throw missing(name, `run \`npm ci\` in the repository root (${e.message})`);
  }
}

/** Proportional set size (bytes; shared pages split between their users) of the processes
 *  `isRoot(pid, cmdline)` picks and all their descendants, from /proc. */
export function treePss(isRoot) {
  const procs = new Map();
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const ppid = Number(/PPid:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
      let pss = 0;
      try { pss = Number(/Pss:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0) * 1024; } catch { /* not ours */ }
      procs.set(Number(pid), { ppid, pss, cmd: readFileSync(`/proc/${pid}/cmdline`, 'utf8') });
    } catch { /* gone */ }
  }
  const roots = new Set([...procs].filter(([pid, p]) => isRoot(pid, p.cmd)).map(([pid]) => pid));
  let total = 0;
  for (const [pid, p] of procs) {
    let q = pid;
    for (let depth = 0; depth < 10 && q; depth++) { if (roots.has(q)) { total += p.pss; break; } q = procs.get(q)?.ppid; }
  }
  return total;
}

/** Uncaught errors and unhandled rejections of a page, kept in the page (for drivers without
 *  error events). */
const COLLECT_ERRORS = `if (!window.__wasmindErrors) { window.__wasmindErrors = [];
  addEventListener('error', (e) => __wasmindErrors.push(String(e.message)));
  addEventListener('unhandledrejection', (e) => __wasmindErrors.push(String(e.reason?.message ?? e.reason))); }`;

// ---- Chromium (playwright-core) ----

/** Chromium with a profile on disk (a persistent context, as a user's browser: OPFS files live
 *  on disk; an incognito-like context keeps them in memory). */
async function launchChromium() {
  if (!existsSync(CHROMIUM)) throw missing(CHROMIUM, 'apt-get install -y chromium (or set CHROMIUM=path)');
  const { chromium } = await importOrFail('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'wasmind-profile-'));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, args: FLAGS });
  const version = execFileSync(CHROMIUM, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).match(/[\d.]+/)?.[0];
  return {
    version, profile, context,
    newPage: async () => {
      const raw = await context.newPage(), errors = [];
      raw.on('pageerror', (e) => errors.push(e.message));
      return { raw, errors: async () => errors, goto: (url) => raw.goto(url), evaluate: (fn, arg) => raw.evaluate(fn, arg),
        waitForFunction: (fn, arg, options) => raw.waitForFunction(fn, arg, options),
        fill: (s, text) => raw.fill(s, text), press: (s, key) => raw.press(s, key), click: (s) => raw.click(s) };
    },
    // The browser process is the one with the profile and no --type=.
    pss: () => treePss((pid, cmd) => cmd.includes(profile) && !cmd.includes('--type=')),
    close: async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); },
  };
}

// ---- Firefox ESR (puppeteer-core, WebDriver BiDi) ----

async function launchFirefox() {
  if (!existsSync(FIREFOX)) throw missing(FIREFOX, 'apt-get install -y firefox-esr (or set FIREFOX=path)');
  const { default: puppeteer } = await importOrFail('puppeteer-core');
  const browser = await puppeteer.launch({ browser: 'firefox', executablePath: FIREFOX, protocol: 'webDriverBiDi', headless: true });
  const pid = browser.process()?.pid;
  return {
    version: (await browser.version()).replace(/^firefox\//i, ''),
    newPage: async () => {
      const raw = await browser.newPage(), errors = [];
      raw.on('pageerror', (e) => errors.push(e.message));
      if (process.env.WASMIND_BROWSER_CONSOLE === '1') raw.on('console', (m) => console.log(`console: ${m.text()}`));
      return { raw, errors: async () => errors, goto: (url) => raw.goto(url), evaluate: (fn, arg) => raw.evaluate(fn, arg),
        waitForFunction: (fn, arg, { timeout = 30000 } = {}) => raw.waitForFunction(fn, { timeout, polling: 50 }, arg),
        fill: (s, text) => raw.locator(s).fill(text), press: async (s, key) => { await raw.focus(s); await raw.keyboard.press(key); },
        click: (s) => raw.click(s) };
    },
    pss: () => treePss((p) => p === pid),
    close: () => browser.close(),
  };
}

// ---- WebKitGTK (WebKitWebDriver + MiniBrowser, WebDriver over HTTP) ----

const freePort = () => new Promise((ok, fail) => {
  const s = createServer().once('error', fail).listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
});
const ELEMENT = 'element-6066-11e4-a0ec-4f3d11d8b0ee';

async function launchWebKit() {
  if (!existsSync(WEBKIT_DRIVER)) throw missing(WEBKIT_DRIVER, 'apt-get install -y webkit2gtk-driver (or set WEBKIT_DRIVER=path)');
  if (!existsSync(MINIBROWSER)) throw missing(MINIBROWSER, 'apt-get install -y webkit2gtk-driver (its MiniBrowser; or set MINIBROWSER=path)');
  const port = await freePort();
  const display = !!process.env.DISPLAY;
  if (!display) {
    try { execFileSync('sh', ['-c', 'command -v xvfb-run'], { stdio: 'ignore' }); } catch { throw missing('xvfb-run', 'apt-get install -y xvfb (WebKitGTK needs an X display)'); }
  }
  // Its own process group, so close() ends xvfb-run, Xvfb, the driver and the browser together.
  const cmd = display ? [WEBKIT_DRIVER, `--port=${port}`] : ['xvfb-run', '-a', '-s', '-screen 0 1280x1024x24', WEBKIT_DRIVER, `--port=${port}`];
  const proc = spawn(cmd[0], cmd.slice(1), { detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const kill = () => { try { process.kill(-proc.pid, 'SIGTERM'); } catch { /* gone */ } };
  const wd = async (method, path, body) => {
    const r = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body) });
    const { value } = await r.json();
    if (!r.ok) throw new Error(`WebDriver ${method} ${path}: ${value?.error}: ${value?.message}`);
    return value;
  };
  let session;
  try {
    for (let i = 0; ; i++) {
      try { await wd('GET', '/status'); break; } catch (e) {
        if (i >= 150 || proc.exitCode !== null) throw new Error(`WebKitWebDriver did not start (${e.message}; ${stderr.trim()})`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    session = await wd('POST', '/session', { capabilities: { alwaysMatch: {
      'webkitgtk:browserOptions': { binary: MINIBROWSER, args: ['--automation'] } } } });
  } catch (e) {
    kill();
    throw new Error(`WebKitGTK could not start: ${e.message} (apt-get install -y webkit2gtk-driver xvfb)`);
  }
  const at = `/session/${session.sessionId}`;
  await wd('POST', `${at}/timeouts`, { script: 600000, pageLoad: 120000 });
  // One window, one page: newPage() gives the same page again.
  const errors = [];
  const run = async (script, args = []) => wd('POST', `${at}/execute/sync`, { script, args });
  /** `fn(arg)` in the page, awaited; its value as JSON (so values come back as the other
   *  drivers give them: plain objects, undefined fields left out). */
  const evaluate = async (fn, arg) => {
    const out = await wd('POST', `${at}/execute/async`, { args: [arg === undefined ? null : arg], script: `const done = arguments[arguments.length - 1];
      Promise.resolve().then(() => (${fn})(arguments[0] ?? undefined)).then(
        (v) => done(v === undefined ? '{}' : JSON.stringify({ v })), (e) => done(JSON.stringify({ e: e?.name + ': ' + e?.message + (e?.status ? ' (' + e.status + ')' : '') + '\\n' + (e?.stack ?? '') })));` });
    const r = JSON.parse(out);
    if ('e' in r) throw new Error(`in the page: ${r.e}`);
    return r.v;
  };
  const pull = async () => { try { errors.push(...(await run('return (window.__wasmindErrors ?? []).splice(0);'))); } catch { /* no page yet */ } };
  const element = async (s) => {
    const found = await wd('POST', `${at}/element`, { using: 'css selector', value: s });
    return found[ELEMENT] ?? found.ELEMENT ?? Object.values(found)[0];
  };
  const page = {
    raw: null,
    errors: async () => { await pull(); return errors; },
    goto: async (url) => { await pull(); await wd('POST', `${at}/url`, { url }); await run(COLLECT_ERRORS); },
    evaluate,
    waitForFunction: (fn, arg, { timeout = 30000 } = {}) => evaluate(`(arg) => new Promise((ok, fail) => {
      const t0 = Date.now();
      const poll = async () => { try { if (await (${fn})(arg)) return ok(true); } catch (e) { return fail(e); }
        if (Date.now() - t0 > ${timeout}) return fail(new Error('waitForFunction: ${timeout} ms passed'));
        setTimeout(poll, 50); };
      poll(); })`, arg),
    fill: async (s, text) => { const id = await element(s); await wd('POST', `${at}/element/${id}/clear`, {}); await wd('POST', `${at}/element/${id}/value`, { text }); },
    press: async (s, key) => {
      const keys = { Enter: '\uE007' };
      if (!keys[key]) throw new Error(`press: no WebDriver code for ${key}`);
      await wd('POST', `${at}/element/${await element(s)}/value`, { text: keys[key] });
    },
    click: async (s) => { await wd('POST', `${at}/element/${await element(s)}/click`, {}); },
  };
  return {
    version: session.capabilities.browserVersion,
    newPage: async () => page,
    pss: () => treePss((p) => p === proc.pid),
    close: async () => {
      await wd('DELETE', at).catch(() => {});
      kill();
      await new Promise((r) => (proc.exitCode !== null ? r() : proc.once('exit', r)));
    },
  };
}

/** The engines, in the order the tests run them. `features`: what the glue must find there
 *  (threads when cross-origin isolated, relaxed SIMD, the model cache, the offline demos). */
export const ENGINES = [
  { name: 'chromium', label: 'Chromium', launch: launchChromium, skip: skipOf('Chromium', 'WASMIND_SKIP_CHROMIUM'),
    features: { threads: true, relaxed: true, cache: 'opfs', offline: true } },
  // Firefox ESR 153: everything, but offline no Worker starts (its script is not served by the
  // page's service worker, neither from a blob: bootstrap nor from its own URL; a classic Worker
  // neither), so the offline demos cannot run there: demo.test.mjs asserts that and logs it.
  // (A threaded driver started again after unload() used to hang here: a `new Worker()` inside
  // the driver blocked for ever; the page now starts the helpers, see glue/driver.js.)
  { name: 'firefox', label: 'Firefox ESR', launch: launchFirefox, skip: skipOf('Firefox ESR', 'WASMIND_SKIP_FIREFOX'),
    features: { threads: true, relaxed: true, cache: 'opfs', offline: false } },
  // WebKitGTK 2.50: SIMD128 but no relaxed SIMD, no SharedArrayBuffer even when isolated, no
  // navigator.storage (its StorageAPI feature is off; on, OPFS fails in MiniBrowser's
  // automation session): the single-threaded SIMD128 module, and the Cache API as the cache.
  { name: 'webkit', label: 'WebKitGTK', launch: launchWebKit, skip: skipOf('WebKitGTK', 'WASMIND_SKIP_WEBKIT'),
    features: { threads: false, relaxed: false, cache: 'cache-api', offline: true } },
];
// WASMIND_ENGINES=firefox,webkit (say) runs those only; the others are logged as skipped.
for (const e of ENGINES) {
  const only = process.env.WASMIND_ENGINES?.split(',');
  if (!e.skip && only && !only.includes(e.name)) e.skip = skipOf(e.label, 'WASMIND_ENGINES', `WASMIND_ENGINES=${only}`);
}

export const engine = (name) => ENGINES.find((e) => e.name === name);

/** Where the tests write the support table's cells (one JSON object a line), made fresh by
 *  `cargo xtask test`; glue/test/engines-table.mjs renders it. */
export const RESULTS = process.env.WASMIND_ENGINE_RESULTS
  ?? fileURLToPath(new URL('../../target/test-results/engines.jsonl', import.meta.url));

/** Records what a test found in `engine` (`page`: 'isolated' or 'not isolated'), once its
 *  assertions passed: { engine, version, page, ...cells }. */
export function record(engine, browser, page, cells) {
  mkdirSync(dirname(RESULTS), { recursive: true });
  appendFileSync(RESULTS, `${JSON.stringify({ engine: engine.name, label: engine.label, version: browser.version, page, ...cells })}\n`);
}
