// sizes.mjs: what a page downloads, module by module and part by part, for the bench's report
// (report.mjs) and the size budget (glue/test/modules.test.mjs).
//
// A module's size is its bytes and its bytes as a server compresses them: gzip at level 9 with
// Node's zlib (Chromium's fork, whose output here is ~4% larger than GNU gzip -9's). A part is
// the functions of one of the crate's modules (`wasmind::quant`, `wasmind::chat::jinja`, ...:
// the first `wasmind::` path in the function's name in dist/*.symbols.txt, so a generic of
// `core` monomorphized for the tokenizer counts as the tokenizer's; the exports of src/abi.rs
// by their plain names), `core` and `alloc`, the allocator and runtime (`dlmalloc`, `mem*`),
// the data section (tables, strings) and the rest of the file (types, exports, ...). A part's
// gzip is that of its bytes alone: the parts' gzips add up to more than the module's.
import { gzipSync } from 'node:zlib';
import { existsSync, readFileSync } from 'node:fs';

/** Issue 61: each gzipped module at most 300 KB. */
export const GZIP_BUDGET = 300_000;
export const MODULES = ['wasmind.wasm', 'wasmind-mt.wasm', 'wasmind-relaxed.wasm', 'wasmind-relaxed-mt.wasm'];

export const gzipSize = (bytes) => gzipSync(bytes, { level: 9 }).length;

/** The top-level sections of a wasm file: [{ id, start, end }] (payload byte ranges). */
function sections(bytes) {
  const out = [];
  let p = 8;
  while (p < bytes.length) {
    const id = bytes[p++];
    let size = 0, shift = 0, b;
    do { b = bytes[p++]; size += (b & 0x7f) * 2 ** shift; shift += 7; } while (b & 0x80);
    out.push({ id, start: p, end: p + size });
    p += size;
  }
  return out;
}

/** The part a function belongs to, from its (demangled) name. */
function partOf(name) {
  const m = name.match(/wasmind::(\w+)(?:::(\w+))?/);
  if (m) return m[1] === 'chat' && m[2] === 'jinja' ? 'chat::jinja' : m[1];
  if (/dlmalloc|^__|^(memcpy|memmove|memset|memcmp|bcmp)$/.test(name)) return 'allocator, runtime';
  if (/(core|alloc)::|^<(str|char|\[\w+\]|[iuf](8|16|32|64|128|size))>::/.test(name)) return 'core, alloc';
  // The exports of src/abi.rs keep their plain names.
  if (/^\w+$/.test(name)) return 'abi';
  return 'other code';
}

/** `{ part: { raw, gzip } }` of a module, from its bytes and its symbols file's text
 *  (`index offset name` lines: each function's file offset). */
export function parts(bytes, symbolsText) {
  const code = sections(bytes).find((s) => s.id === 10);
  const data = sections(bytes).find((s) => s.id === 11);
  const fns = symbolsText.split('\n').filter((l) => /^\d+ 0x/.test(l)).map((l) => {
    const [, off, ...name] = l.split(' ');
    return { off: Number(off), name: name.join(' ') };
  }).sort((a, b) => a.off - b.off);
  const chunks = new Map();
  const add = (part, from, to) => {
    if (!chunks.has(part)) chunks.set(part, []);
    chunks.get(part).push(bytes.subarray(from, to));
  };
  fns.forEach((f, i) => add(partOf(f.name), f.off, i + 1 < fns.length ? fns[i + 1].off : code.end));
  if (data) add('data (tables, strings)', data.start, data.end);
  // Everything else: the section headers, types, imports, exports, the code before the first
  // function (its count and the first body's size).
  const covered = [[fns.length ? fns[0].off : code.end, code.end], ...(data ? [[data.start, data.end]] : [])];
  const rest = [];
  let at = 0;
  for (const [from, to] of covered.sort((a, b) => a[0] - b[0])) { rest.push(bytes.subarray(at, from)); at = to; }
  rest.push(bytes.subarray(at));
  chunks.set('headers, types, exports', rest);
  const out = {};
  for (const [part, list] of chunks) {
    const joined = Buffer.concat(list);
    out[part] = { raw: joined.length, gzip: gzipSize(joined) };
  }
  return out;
}

/** The modules of `dist` that exist: [{ file, raw, gzip, parts (null without a symbols file) }]. */
export function moduleSizes(dist) {
  return MODULES.filter((m) => existsSync(`${dist}/${m}`)).map((file) => {
    const bytes = readFileSync(`${dist}/${file}`);
    const symbols = `${dist}/${file.replace(/\.wasm$/, '.symbols.txt')}`;
    return { file, raw: bytes.length, gzip: gzipSize(bytes),
      parts: existsSync(symbols) ? parts(bytes, readFileSync(symbols, 'utf8')) : null };
  });
}
