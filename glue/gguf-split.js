// gguf-split.js: joins the parts of a split GGUF (llama.cpp's `gguf-split`:
// `name-00001-of-0000N.gguf`) into one GGUF as it streams, for glue/driver.js. The module reads one
// file, and the bytes of all parts back to back are not one: every part is a whole GGUF (header,
// key-values, tensor infos, its own data section with offsets from its own start). The first part
// has the model's key-values and `split.no`/`split.count`/`split.tensors.count`; the others only
// the `split.*` keys. So the joined file is: a new header (the first part's key-values without
// `split.*`, every part's tensor infos with offsets moved by where that part's data lands), then
// each part's data section in order, each starting at a multiple of the alignment. Only the
// headers are parsed in JS (a few MB at most: the vocabulary); the data streams through.

const TYPE_SIZE = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const STRING = 8, ARRAY = 9, U32 = 4;
const enc = new TextEncoder(), dec = new TextDecoder();

class NeedMore extends Error {}

/** Parses a GGUF header from `b` (Uint8Array, possibly only the start of the file). Returns
 *  { kvs: [{ key, start, end }], tensors: [{ name, dims, type, offset }], alignment, dataStart },
 *  or throws NeedMore when `b` ends inside the header. */
export function parseHeader(b) {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let at = 0;
  const need = (n) => { if (at + n > b.length) throw new NeedMore(); };
  const u32 = () => { need(4); const x = v.getUint32(at, true); at += 4; return x; };
  const u64 = () => { need(8); const x = Number(v.getBigUint64(at, true)); at += 8; return x; };
  const str = () => { const n = u64(); need(n); const s = dec.decode(b.subarray(at, at + n)); at += n; return s; };
  const skipValue = (type) => {
    if (type === STRING) { const n = u64(); need(n); at += n; return; }
    if (type === ARRAY) {
      const t = u32(), n = u64();
      if (t === STRING || t === ARRAY) { for (let i = 0; i < n; i++) skipValue(t); return; }
      const size = TYPE_SIZE[t];
      if (!size) throw new Error(`GGUF: unknown array type ${t}`);
      need(size * n); at += size * n; return;
    }
    const size = TYPE_SIZE[type];
    if (!size) throw new Error(`GGUF: unknown value type ${type}`);
    need(size); at += size;
  };
  need(4);
  if (dec.decode(b.subarray(0, 4)) !== 'GGUF') throw new Error('not a GGUF file');
  at = 4;
  const version = u32();
  if (version < 2) throw new Error(`GGUF version ${version} is not supported`);
  const nTensors = u64(), nKv = u64();
  const kvs = [];
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const start = at, key = str(), type = u32(), valueAt = at;
    skipValue(type);
    if (key === 'general.alignment' && type === U32) alignment = v.getUint32(valueAt, true);
    kvs.push({ key, start, end: at });
  }
  const tensors = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str(), nDims = u32(), dims = [];
    for (let d = 0; d < nDims; d++) dims.push(u64());
    tensors.push({ name, dims, type: u32(), offset: u64() });
  }
  return { kvs, tensors, alignment, dataStart: Math.ceil(at / alignment) * alignment, bytes: b };
}

const align = (n, a) => Math.ceil(n / a) * a;

/** Reads chunks of `iter` until the header parses; returns { header, rest } where `rest` are the
 *  bytes read past the data start (copied: the chunks' buffers are reused). */
export async function readHeader(iter) {
  let buf = new Uint8Array(0);
  for (;;) {
    const { value, done } = await iter.next();
    if (done) throw new Error('GGUF: the file ends inside its header');
    const grown = new Uint8Array(buf.length + value.byteLength);
    grown.set(buf); grown.set(value, buf.length); buf = grown;
    try {
      const header = parseHeader(buf);
      if (buf.length < header.dataStart) continue; // the padding is not all here yet
      return { header, rest: buf.slice(header.dataStart) };
    } catch (e) { if (!(e instanceof NeedMore)) throw e; }
  }
}

/** The joined file's header for parts of `sizes` bytes: { bytes (padded to the alignment),
 *  bases (where each part's data section starts in the joined file), total }. */
export function joinHeaders(headers, sizes) {
  const alignment = headers[0].alignment;
  const kvs = headers[0].kvs.filter((k) => !k.key.startsWith('split.'));
  const bases = []; let data = 0;
  headers.forEach((h, i) => { bases.push(data); data = align(data + sizes[i] - h.dataStart, alignment); });
  const parts = [];
  const u32 = (x) => { const a = new Uint8Array(4); new DataView(a.buffer).setUint32(0, x, true); parts.push(a); };
  const u64 = (x) => { const a = new Uint8Array(8); new DataView(a.buffer).setBigUint64(0, BigInt(x), true); parts.push(a); };
  parts.push(enc.encode('GGUF')); u32(3);
  u64(headers.reduce((n, h) => n + h.tensors.length, 0)); u64(kvs.length);
  for (const k of kvs) parts.push(headers[0].bytes.subarray(k.start, k.end));
  headers.forEach((h, i) => {
    for (const t of h.tensors) {
      const name = enc.encode(t.name);
      u64(name.length); parts.push(name); u32(t.dims.length);
      for (const d of t.dims) u64(d);
      u32(t.type); u64(bases[i] + t.offset);
    }
  });
  const len = parts.reduce((n, p) => n + p.length, 0);
  const bytes = new Uint8Array(align(len, alignment));
  let at = 0;
  for (const p of parts) { bytes.set(p, at); at += p.length; }
  const last = headers.length - 1;
  const total = bytes.length + bases[last] + sizes[last] - headers[last].dataStart;
  return { bytes, bases: bases.map((b) => b + bytes.length), total };
}
