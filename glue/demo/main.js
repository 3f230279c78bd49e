// The page side of the demo: never blocks. The wasmind driver must be able to block
// (memory.atomic.wait32), so it runs in a module Worker (driver.js); the page only sends it a
// request and shows what comes back. The result is also left in window.wasmindDemo for tests.
const log = document.getElementById('log');
const params = Object.fromEntries(new URLSearchParams(location.search));
const request = { threads: params.threads ? Number(params.threads) : undefined,
  jobs: Number(params.jobs ?? 2000), seed: Number(params.seed ?? 1), fault: params.fault };

log.textContent = `crossOriginIsolated: ${self.crossOriginIsolated}\nloading…`;
const driver = new Worker(new URL('./driver.js', import.meta.url), { type: 'module', name: 'wasmind-driver' });
driver.onmessage = ({ data }) => {
  window.wasmindDemo = { ...data, pageIsolated: self.crossOriginIsolated };
  log.textContent = JSON.stringify(window.wasmindDemo, null, 2);
};
driver.onerror = (e) => {
  window.wasmindDemo = { done: true, error: e.message ?? 'driver worker failed' };
  log.textContent = window.wasmindDemo.error;
};
driver.postMessage(request);
