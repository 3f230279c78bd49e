package wasmind

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The modules embedded in the package (go/modules/, committed so that `go get` needs no Rust
// toolchain) are byte for byte the ones `cargo xtask dist` builds from this checkout
// (the build is path-independent: --remap-path-prefix). cargo xtask test builds dist/ first.
func TestEmbeddedModulesEqualDist(t *testing.T) {
	dist := os.Getenv("WASMIND_DIST")
	if dist == "" {
		dist = filepath.Join(repoRoot(), "dist")
	}
	for name, embedded := range map[string][]byte{"wasmind.wasm": singleThreadedWasm, "wasmind-mt.wasm": threadedWasm} {
		built, err := os.ReadFile(filepath.Join(dist, name))
		if os.IsNotExist(err) {
			skipped(t, fmt.Sprintf("%s is not built (cargo xtask dist): the embedded copies are not compared", filepath.Join(dist, name)))
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(built, embedded) {
			t.Errorf("go/modules/%s (sha256 %x, %d bytes) differs from %s (sha256 %x, %d bytes): "+
				"refresh the copies with `cargo xtask go-modules` and commit them", name,
				sha256.Sum256(embedded), len(embedded), filepath.Join(dist, name), sha256.Sum256(built), len(built))
		}
	}
}
