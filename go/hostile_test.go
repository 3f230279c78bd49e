package wasmind

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
)

// xorShift64 is host-tests' XorShift64: the same junk as the Rust hostile-file test.
type xorShift64 uint64

func (x *xorShift64) next() uint64 {
	*x ^= *x << 13
	*x ^= *x >> 7
	*x ^= *x << 17
	return uint64(*x)
}

// moduleError is err as a module status that is not a trap (a trap would mean the module
// crashed on the input).
func moduleError(t *testing.T, err error, what string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Status == Trap || e.Message == "" {
		t.Fatalf("%s: %v (want a status with a message)", what, err)
	}
	return e
}

// Hostile GGUF files, as host-tests/tests/model.rs hostile_files_are_errors_not_traps: the
// tiny Q4_K file truncated at every KiB and odd places, random bytes (half behind a valid
// magic), absurd tensor and key counts, and bytes corrupted all over the header. Every load is
// a status, never a trap or a panic, and the Instance works afterwards.
func TestHostileModelFilesAreErrors(t *testing.T) {
	file, err := os.ReadFile(fixture(t, "models/tiny/tiny-llama-Q4_K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	inst := newInstance(t, 1)
	ctx := context.Background()
	load := func(b []byte) error { return inst.LoadModel(ctx, bytes.NewReader(b), LoadOptions{Context: 64}) }
	refused := func(b []byte, what string) {
		t.Helper()
		moduleError(t, load(b), what)
	}
	cuts := []int{len(file) - 1, 1, 3, 4, 8, 23}
	for cut := 0; cut < len(file); cut += 1024 {
		cuts = append(cuts, cut)
	}
	for _, cut := range cuts {
		refused(file[:cut], "truncated")
	}
	rng := xorShift64(0x9e37_79b9_7f4a_7c15)
	for k := range 200 {
		junk := make([]byte, 16+rng.next()%4096)
		for j := range junk {
			junk[j] = byte(rng.next())
		}
		if k%2 == 0 {
			copy(junk, "GGUF")
			binary.LittleEndian.PutUint32(junk[4:], 3)
		}
		refused(junk, "random bytes")
	}
	for _, offset := range []int{8, 16} { // tensor count, key count
		bad := bytes.Clone(file)
		for _, v := range []uint64{^uint64(0), 1 << 40} {
			binary.LittleEndian.PutUint64(bad[offset:], v)
			refused(bad, "absurd count")
		}
	}
	headerEnd := min(4096, len(file))
	for range 300 {
		bad := bytes.Clone(file)
		for range 4 {
			bad[rng.next()%uint64(headerEnd)] = byte(rng.next())
		}
		if err := load(bad); err != nil { // some corruptions are still valid files
			moduleError(t, err, "corrupted header")
		}
	}
	if err := load(file); err != nil {
		t.Fatalf("the intact file after the hostile ones: %v", err)
	}
	if info, err := inst.Info(ctx); err != nil || info.Model == nil || info.Model.Layers == 0 {
		t.Fatalf("%+v %v", info, err)
	}
	t.Logf("%d truncations, 200 random files, 4 absurd counts, 300 corrupted headers refused", len(cuts))
}

func TestHostileReaders(t *testing.T) {
	inst := newInstance(t, 1)
	ctx := context.Background()
	head := make([]byte, 1<<16)
	f, err := os.Open(fixture(t, smollm2))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	// A reader shorter than the size it was given, or longer, or of unknown length.
	err = inst.LoadModel(ctx, bytes.NewReader(head), LoadOptions{Size: 1 << 20})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short reader: %v", err)
	}
	if err := inst.LoadModel(ctx, bytes.NewReader(head), LoadOptions{Size: 1000}); !errors.Is(err, InvalidArgument) {
		t.Fatalf("long reader: %v", err)
	}
	if err := inst.LoadModel(ctx, io.MultiReader(bytes.NewReader(head)), LoadOptions{}); !errors.Is(err, InvalidArgument) {
		t.Fatalf("reader of unknown length: %v", err)
	}
	// A reader that fails mid-way: its error, and the block is given back.
	broken := io.MultiReader(bytes.NewReader(head[:5000]), iotest.ErrReader(errors.New("disk on fire")))
	if err := inst.LoadModel(ctx, broken, LoadOptions{Size: int64(len(head))}); err == nil || err.Error() != "disk on fire" {
		t.Fatalf("failing reader: %v", err)
	}
	// The file truncated by a few bytes, streamed from disk: a clean BAD_FORMAT.
	short := filepath.Join(t.TempDir(), "short.gguf")
	data, err := os.ReadFile(fixture(t, smollm2))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, data[:len(data)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := inst.LoadModelFile(ctx, short, LoadOptions{}); !errors.Is(err, BadFormat) {
		t.Fatalf("short file: %v", err)
	}
	// A cancelled context stops the stream.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := inst.LoadModel(cancelled, bytes.NewReader(data), LoadOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled load: %v", err)
	}
	// A safetensors file where a model is expected, and a missing file.
	if err := inst.LoadModelFile(ctx, fixture(t, potion+"/model.safetensors"), LoadOptions{}); err == nil {
		t.Fatal("a safetensors file loaded as a GGUF model")
	}
	if err := inst.LoadModelFile(ctx, filepath.Join(t.TempDir(), "missing.gguf"), LoadOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	// Everything refused left the memory as it was: the real model loads and answers.
	if err := inst.LoadModel(ctx, bytes.NewReader(data), LoadOptions{Context: 256}); err != nil {
		t.Fatal(err)
	}
	if text, err := reply(inst, ctx, []Message{{User, "What is the capital of France?"}}, greedy()); err != nil || text == "" {
		t.Fatalf("%q %v", text, err)
	}
}

// Damaged Model2Vec folders (as python/tests/test_hostile.py): each a module status.
func TestDamagedModel2VecFolders(t *testing.T) {
	dir := fixture(t, potion)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	st, tok, cfg := read("model.safetensors"), read("tokenizer.json"), read("config.json")
	rng := xorShift64(1)
	junk := func(n int) []byte {
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(rng.next())
		}
		return b
	}
	cases := map[string][3][]byte{
		"truncated-safetensors": {st[:len(st)/2], tok, cfg},
		"random-safetensors":    {junk(1 << 16), tok, cfg},
		"empty-safetensors":     {{}, tok, cfg},
		"header-only":           {st[:8], tok, cfg},
		"config-not-json":       {st, tok, []byte(`{"normalize": tru`)},
		"config-wrong-type":     {st, tok, []byte(`{"normalize": "yes"}`)},
		"tokenizer-truncated":   {st, tok[:len(tok)/3], cfg},
		"tokenizer-random":      {st, junk(4096), cfg},
	}
	inst := newInstance(t, 1)
	ctx := context.Background()
	for name, files := range cases {
		err := inst.LoadEmbedderFrom(ctx, bytes.NewReader(files[0]), files[1], files[2])
		e := moduleError(t, err, name)
		if e.Status != BadFormat && e.Status != Unsupported && e.Status != InvalidUTF8 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := inst.LoadEmbedder(ctx, filepath.Join(t.TempDir(), "nothing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing folder: %v", err)
	}
	if err := inst.LoadEmbedderFrom(ctx, bytes.NewReader(st), tok, nil); !errors.Is(err, InvalidArgument) {
		t.Fatalf("tokenizer without config: %v", err)
	}
	if err := inst.LoadEmbedder(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if v, err := inst.Embed(ctx, []string{"still works"}); err != nil || len(v[0]) != 256 {
		t.Fatal(err)
	}
}
