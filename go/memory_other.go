//go:build !unix

package wasmind

// reserve allocates n bytes from the Go heap (no mmap here): the runtime maps large objects
// lazily from the OS, but a reused span is zeroed in full, so MaxMemory should be set near
// what the model needs on such systems. The GC never moves it, so the address stays fixed.
func reserve(n uint64) ([]byte, func()) {
	if n == 0 || n != uint64(int(n)) {
		return nil, func() {}
	}
	return make([]byte, n), func() {}
}
