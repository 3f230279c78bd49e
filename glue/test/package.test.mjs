// `npm pack` makes a package that works: installed into a scratch folder (no network), imported
// from Node by its name, it starts the driver, loads the Model2Vec files and embeds, its types
// file is there and a TypeScript program type-checks against it (tsc from the devDependencies),
// and the low-level glue is reachable as `wasmind/low-level`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EMBEDDER_DIR } from './reference.mjs';

const root = fileURLToPath(new URL('../../', import.meta.url));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

test('npm pack + install into a scratch folder + import from Node', { timeout: 120000 }, () => {
  const scratch = mkdtempSync(join(tmpdir(), 'wasmind-pack-'));
  try {
    const out = execFileSync(npm, ['pack', '--json', '--pack-destination', scratch], { cwd: root, encoding: 'utf8' });
    const [{ filename, files }] = JSON.parse(out.slice(out.indexOf('[')));
    const names = files.map((f) => f.path);
    for (const f of ['glue/index.js', 'glue/index.d.ts', 'glue/driver.js', 'glue/worker.js', 'dist/wasmind.wasm', 'dist/wasmind-mt.wasm',
      'dist/wasmind-relaxed.wasm', 'dist/wasmind-relaxed-mt.wasm']) {
      assert.ok(names.includes(f), `${f} in the package`);
    }
    assert.ok(!names.some((f) => f.startsWith('glue/test/') || f.startsWith('src/')), 'no tests or Rust sources');
    writeFileSync(join(scratch, 'package.json'), JSON.stringify({ name: 'scratch', private: true, type: 'module' }));
    execFileSync(npm, ['install', '--offline', '--no-audit', '--no-fund', join(scratch, filename)], { cwd: scratch, stdio: 'pipe' });
    assert.ok(existsSync(join(scratch, 'node_modules/wasmind/glue/index.d.ts')));
    writeFileSync(join(scratch, 'use.mjs'), `import { Wasmind } from 'wasmind';
      import { load } from 'wasmind/low-level';
      const ai = await Wasmind.create({ threads: 2 });
      const { dim } = await ai.loadEmbedder(${JSON.stringify(EMBEDDER_DIR.href)});
      const v = await ai.embed('a sentence to embed');
      await ai.unload();
      const st = await load({ threaded: false });
      console.log(JSON.stringify({ threaded: ai.threaded, dim, length: v.length, lowLevel: st.threaded }));`);
    const result = JSON.parse(execFileSync(process.execPath, ['use.mjs'], { cwd: scratch, encoding: 'utf8', timeout: 60000 }));
    assert.deepEqual(result, { threaded: true, dim: 256, length: 256, lowLevel: false });
    // The types: a TypeScript program using the page API type-checks against the installed
    // package (resolved through its "exports"), and one that misuses it does not.
    const tsc = join(root, 'node_modules/typescript/bin/tsc');
    const check = (code) => {
      writeFileSync(join(scratch, 'use.ts'), code);
      try {
        execFileSync(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'es2022', '--lib', 'es2022,dom',
          '--module', 'nodenext', '--moduleResolution', 'nodenext', 'use.ts'], { cwd: scratch, encoding: 'utf8' });
        return '';
      } catch (e) { return e.stdout || String(e); }
    };
    const good = `import { Wasmind, type Message } from 'wasmind';
      const ai = await Wasmind.create({ threads: 2 });
      const info = await ai.load('model.gguf', { context: 512, onProgress: (p) => console.log(p.loaded / p.total) });
      const m: Message[] = [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hi' }] }];
      for await (const piece of ai.chat(m, { maxTokens: 8, temperature: 0, dropOldest: true, responseFormat: { type: 'json_object' } })) console.log(piece);
      const s = ai.stats(); if (s) console.log(s.state, s.droppedMessages, info.context);
      const v: Float32Array = await ai.embed('x'); const vs: Float32Array[] = await ai.embed(['x', 'y']); console.log(v, vs);
      export {};`;
    assert.equal(check(good), '');
    assert.match(check(`import { Wasmind } from 'wasmind';
      const ai = await Wasmind.create({ threads: '2' });
      export {};`), /use\.ts\(2,\d+\): error TS2322/); // threads: a number
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});
