// The driver side of the demo, in a module Worker (a browser's main thread may not block).
// Loads wasmind (threaded if this context is cross-origin isolated), runs pool_selftest on the
// pool and on the single-threaded module, and posts both checksums back. With `fault` ('trap' or
// 'stall'), helper 0 fails mid-job instead: it posts how long the pool took to report it.
import { load, canUseThreads } from '../wasmind.js';

async function lostHelper(threads, jobs, seed, fault) {
  const wm = await load({ threads });
  wm.injectFault(0, fault);
  let t0 = performance.now(), error = null;
  try { wm.poolSelftest(jobs, seed, wm.exports.pool_threads()); } catch (e) { error = { status: e.status, message: e.message }; }
  const lostMs = performance.now() - t0;
  let again = null;
  try { wm.poolSelftest(1, seed, 2); } catch (e) { again = e.status; }
  t0 = performance.now();
  await wm.close();
  return { done: true, fault, error, lostMs, again, closeMs: performance.now() - t0, helpersAfterClose: wm.exports.pool_helpers_ready() };
}

self.onmessage = async ({ data: { threads, jobs, seed, fault } }) => {
  try {
    if (fault) { self.postMessage(await lostHelper(threads, jobs, seed, fault)); return; }
    let t0 = performance.now();
    const wm = await load({ threads });
    const loadMs = performance.now() - t0;
    const helpers = wm.exports.pool_helpers_ready(), poolThreads = wm.exports.pool_threads();
    t0 = performance.now();
    const checksum = wm.poolSelftest(jobs, seed, poolThreads);
    const poolMs = performance.now() - t0;
    await wm.close();
    const st = await load({ threaded: false });
    t0 = performance.now();
    const stChecksum = st.poolSelftest(jobs, seed, 1);
    const stMs = performance.now() - t0;
    self.postMessage({ done: true, canUseThreads: canUseThreads(), threaded: wm.threaded, relaxed: wm.relaxed, helpers,
      threads: poolThreads, jobs, seed, checksum, stChecksum, loadMs, poolMs, stMs,
      helpersAfterClose: wm.exports.pool_helpers_ready() });
  } catch (e) {
    self.postMessage({ done: true, error: String(e?.stack ?? e) });
  }
};
