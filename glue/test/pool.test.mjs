// The thread pool under Node: one driver (this thread) and N helpers in worker_threads on one
// shared memory. pool_selftest's checksum must equal the single-threaded module's, and
// close() (pool_shutdown) must release every helper so the process can exit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { load, WasmindError } from '../wasmind.js';

const JOBS = 2000, SEED = 0x5eed;
const st = await load({ threaded: false });
const expected = st.poolSelftest(JOBS, SEED, 8);

test('single-threaded module: no helpers, checksum independent of max_threads', () => {
  assert.equal(st.threaded, false);
  assert.equal(st.poolSelftest(JOBS, SEED, 1), expected);
  assert.equal(st.exports.helper_loop(0), -9, 'helper_loop: -WASMIND_E_WRONG_THREAD');
  assert.match(st.lastError(), /threaded/);
});

for (const helpers of [1, 2, 4]) {
  test(`threaded module, ${helpers} helper(s): ${JOBS} mixed jobs give the single-threaded checksum`, async () => {
    const mt = await load({ threads: helpers + 1 });
    try {
      assert.equal(mt.threaded, true);
      assert.equal(mt.exports.pool_helpers_ready(), helpers);
      assert.equal(mt.exports.pool_threads(), helpers + 1);
      assert.equal(mt.poolSelftest(JOBS, SEED, helpers + 1), expected);
      assert.equal(mt.exports.pool_threads(), helpers + 1, 'selftest restores the thread count');
    } finally {
      await mt.close();
    }
    // After shutdown the driver still works, alone.
    assert.equal(mt.exports.pool_helpers_ready(), 0);
    assert.equal(mt.poolSelftest(50, SEED, 4), st.poolSelftest(50, SEED, 4));
  });
}

test('close() releases the helpers: a script that loads 4 helpers exits by itself', () => {
  const script = `import { load } from ${JSON.stringify(new URL('../wasmind.js', import.meta.url).href)};
    const mt = await load({ threads: 5 });
    const c = mt.poolSelftest(200, 1, 5);
    await mt.close();
    console.log('closed', c, mt.helpers.length);`;
  const file = join(mkdtempSync(join(tmpdir(), 'wasmind-')), 'close.mjs');
  writeFileSync(file, script);
  const out = execFileSync(process.execPath, [file], { timeout: 60000 });
  assert.match(String(out), /^closed \d+ 0$/m);
});

test('a pool that cannot get its helper stacks fails cleanly (no hang, helpers ended)', async () => {
  // 4 MiB of memory holds about two 1 MiB helper stacks, not seven.
  const t0 = Date.now();
  await assert.rejects(load({ threads: 8, maxMemory: 4 << 20 }), (e) => e instanceof WasmindError && e.status === 'OUT_OF_MEMORY');
  assert.ok(Date.now() - t0 < 9000, 'started helpers left helper_loop (close() did not need its timeout)');
});

test('errors carry the module message', () => {
  assert.throws(() => st.check(st.exports.math_apply(99, 16, 16, 1)),
    (e) => e instanceof WasmindError && e.code === 1 && e.status === 'INVALID_ARGUMENT' && /unknown function 99/.test(e.message));
  assert.equal(st.exports.last_error_code(), -1);
});

// A lost helper (abi/ABI.md): one that traps, or stalls holding a chunk as a worker terminated
// mid-job would, makes the running call fail with HELPER_LOST within 5 s instead of hanging;
// every compute call after it fails at once, and close() ends the workers without its timeout.
for (const kind of ['trap', 'stall']) {
  test(`a helper that ${kind}s mid-job: HELPER_LOST within 5 s, then at once; close() ends it`, async () => {
    const mt = await load({ threads: 3 });
    mt.injectFault(1, kind);
    let t0 = Date.now();
    assert.throws(() => mt.poolSelftest(100000, SEED, 3),
      (e) => e instanceof WasmindError && e.status === 'HELPER_LOST' && /helper thread stopped mid-job/.test(e.message));
    const lostMs = Date.now() - t0;
    assert.ok(lostMs < 5000, `the error took ${lostMs} ms`);
    assert.equal(mt.poolLost(), true);
    t0 = Date.now();
    assert.throws(() => mt.poolSelftest(10, SEED, 3), (e) => e.status === 'HELPER_LOST');
    assert.ok(Date.now() - t0 < 500, 'later calls fail at once');
    t0 = Date.now();
    await mt.close();
    assert.ok(Date.now() - t0 < 3000, `close() took ${Date.now() - t0} ms`);
    console.log(`# ${kind}: HELPER_LOST after ${lostMs} ms`);
  });
}
