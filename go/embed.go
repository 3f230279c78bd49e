package wasmind

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
)

// The texts Embed hands the module in one embed_batch call, at most.
const (
	batchTexts = 1024
	batchBytes = 4 << 20
)

// Embed is the loaded embedder's vector for each text ((len(texts), dim) float32), bit-identical
// for any thread count (the threaded module splits each batch across its threads). A text that
// is not UTF-8 fails with InvalidUTF8 naming its index. ctx is checked between batches of up
// to 1,024 texts.
func (i *Instance) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if err := i.lock(); err != nil {
		return nil, err
	}
	defer i.mu.Unlock()
	dim, err := i.embedDim(ctx)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		end, bytes := start, 0
		for end < len(texts) && end-start < batchTexts && (end == start || bytes+len(texts[end]) <= batchBytes) {
			bytes += len(texts[end])
			end++
		}
		vecs, err := i.m.embedBatch(ctx, texts[start:end], bytes, dim)
		if err != nil {
			var e *Error
			if start > 0 && errors.As(err, &e) {
				e.Message += " (in the batch that starts at text " + strconv.Itoa(start) + ")"
			}
			return nil, err
		}
		out = append(out, vecs...)
		start = end
	}
	return out, nil
}

// embedDim is the loaded embedder's dimension (NO_MODEL without one).
func (i *Instance) embedDim(ctx context.Context) (int, error) {
	var info EmbedderInfo
	_, ok, err := i.m.infoJSON(ctx, "embedder_info", &info)
	if err != nil {
		return 0, err
	}
	if !ok || info.Dim <= 0 {
		return 0, errorf(NoModel, "no embedder is loaded (LoadEmbedder)")
	}
	return info.Dim, nil
}

// embedBatch runs embed_batch on texts (bytes long in all): the texts back to back in linear
// memory, their n+1 offsets, the (n, dim) vectors read back.
func (m *module) embedBatch(ctx context.Context, texts []string, bytes, dim int) ([][]float32, error) {
	n := len(texts)
	var t, o, v uint32
	defer func() {
		m.free(ctx, t, uint64(bytes))
		m.free(ctx, o, 4*uint64(n+1))
		m.free(ctx, v, 4*uint64(n*dim))
	}()
	var err error
	if t, err = m.alloc(ctx, uint64(bytes)); err != nil {
		return nil, err
	}
	if o, err = m.alloc(ctx, 4*uint64(n+1)); err != nil {
		return nil, err
	}
	if v, err = m.alloc(ctx, 4*uint64(n*dim)); err != nil {
		return nil, err
	}
	offsets, err := m.view(o, 4*uint64(n+1))
	if err != nil {
		return nil, err
	}
	at := uint32(0)
	for k, text := range texts {
		binary.LittleEndian.PutUint32(offsets[4*k:], at)
		m.mem.WriteString(t+at, text)
		at += uint32(len(text))
	}
	binary.LittleEndian.PutUint32(offsets[4*n:], at)
	if _, err := m.checked(ctx, "embed_batch", uint64(t), uint64(o), uint64(n), uint64(v)); err != nil {
		return nil, err
	}
	raw, err := m.view(v, 4*uint64(n*dim))
	if err != nil {
		return nil, err
	}
	flat := make([]float32, n*dim)
	for k := range flat {
		flat[k] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:]))
	}
	vecs := make([][]float32, n)
	for k := range vecs {
		vecs[k] = flat[k*dim : (k+1)*dim : (k+1)*dim]
	}
	return vecs, nil
}
