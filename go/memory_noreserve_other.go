//go:build unix && !linux

package wasmind

// Other Unix systems commit anonymous mappings lazily without the flag (or lack it).
const mapNoReserve = 0
