package wasmind

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The tests' files: `cargo xtask fixtures` makes them in <repo>/target/fixtures
// ($WASMIND_FIXTURES overrides the folder), as for host-tests, python/tests and glue/test.
const (
	smollm2   = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
	potion    = "models/potion-base-8M"
	minCosine = 0.99999 // as host-tests/tests/embed.rs
	decisive  = 0.5     // glue/test/reference.mjs: llama.cpp's top two logits at least this far apart
)

// repoRoot is the checkout: this package is <repo>/go.
func repoRoot() string {
	abs, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return abs
}

func fixturesDir() string {
	if d := os.Getenv("WASMIND_FIXTURES"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(), "target", "fixtures")
}

// fixture is a fixture's path; a missing one fails the test naming it and what makes it.
func fixture(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(fixturesDir(), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test fixture %s is missing: run `cargo xtask fixtures` (cargo xtask test runs it "+
			"first; or set WASMIND_FIXTURES)", p)
	}
	return p
}

// skipped skips a test that cannot run, never silently: a line in $WASMIND_SKIP_LOG too (the
// summary of `cargo xtask test` lists them), as host-tests' common::skipped.
func skipped(t testing.TB, why string) {
	t.Helper()
	if log := os.Getenv("WASMIND_SKIP_LOG"); log != "" {
		if f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "go %s: %s\n", t.Name(), why)
			f.Close()
		}
	}
	t.Skip(why)
}

// reference decodes reference/<name> (or <name>.gz) of the fixtures into v.
func reference(t testing.TB, name string, v any) {
	t.Helper()
	dir := filepath.Join(fixturesDir(), "reference")
	var r io.Reader
	if f, err := os.Open(filepath.Join(dir, name)); err == nil {
		defer f.Close()
		r = f
	} else {
		f, err := os.Open(filepath.Join(fixture(t, "reference/"+name+".gz")))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s.gz: %v", name, err)
		}
		r = z
	}
	if err := json.NewDecoder(r).Decode(v); err != nil {
		t.Fatalf("reference %s: %v", name, err)
	}
}

// newInstance starts an Instance that the test closes at its end.
func newInstance(t testing.TB, threads int) *Instance {
	t.Helper()
	inst, err := New(context.Background(), Config{Threads: threads})
	if err != nil {
		t.Fatalf("New(threads %d): %v", threads, err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	return inst
}

// withModel is an Instance with SmolLM2 loaded (context 1024).
func withModel(t testing.TB, threads int) *Instance {
	t.Helper()
	inst := newInstance(t, threads)
	if err := inst.LoadModelFile(context.Background(), fixture(t, smollm2), LoadOptions{Context: 1024}); err != nil {
		t.Fatal(err)
	}
	return inst
}

// shared SmolLM2 Instance (single-threaded) for the tests that only read replies.
var (
	sharedOnce sync.Once
	sharedInst *Instance
	sharedErr  error
)

func sharedModel(t testing.TB) *Instance {
	t.Helper()
	path := fixture(t, smollm2)
	sharedOnce.Do(func() {
		sharedInst, sharedErr = New(context.Background(), Config{})
		if sharedErr == nil {
			sharedErr = sharedInst.LoadModelFile(context.Background(), path, LoadOptions{Context: 1024})
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedInst
}

// cosine of two vectors in float64 (1 when both are zero).
func cosine(a []float32, b []float64) float64 {
	var ab, aa, bb float64
	for k := range a {
		ab += float64(a[k]) * b[k]
		aa += float64(a[k]) * float64(a[k])
		bb += b[k] * b[k]
	}
	if aa == 0 && bb == 0 {
		return 1
	}
	return ab / math.Sqrt(aa*bb)
}
