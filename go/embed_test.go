package wasmind

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type model2vecReference struct {
	Dim  int `json:"dim"`
	Rows []struct {
		Text      string    `json:"text"`
		Embedding []float64 `json:"embedding"`
	} `json:"rows"`
}

// Model2Vec vectors against model2vec's for the 631 corpus texts, three models (f32, f16, a
// vocabulary-quantized distillation); the threaded module's bits equal the single-threaded's.
func TestModel2VecMatchesModel2Vec(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"potion-base-8M", "potion-base-8M-f16", "m2v-minilm-128-vq"} {
		var ref model2vecReference
		reference(t, name+".json", &ref)
		texts := make([]string, len(ref.Rows))
		for k, r := range ref.Rows {
			texts[k] = r.Text
		}
		inst := newInstance(t, 1)
		if err := inst.LoadEmbedder(ctx, fixture(t, "models/"+name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		info, err := inst.Info(ctx)
		if err != nil || info.Embedder == nil || info.Embedder.Dim != ref.Dim || info.Embedder.Kind != "model2vec" {
			t.Fatalf("%s: %+v %v", name, info.Embedder, err)
		}
		got, err := inst.Embed(ctx, texts)
		if err != nil || len(got) != len(texts) {
			t.Fatalf("%s: %d vectors, %v", name, len(got), err)
		}
		worst, zeros := 1.0, 0
		for k, r := range ref.Rows {
			if !slices.ContainsFunc(r.Embedding, func(x float64) bool { return x != 0 }) {
				zeros++
				if slices.ContainsFunc(got[k], func(x float32) bool { return x != 0 }) {
					t.Fatalf("%s: text %d should embed to zeros", name, k)
				}
				continue
			}
			c := cosine(got[k], r.Embedding)
			worst = min(worst, c)
			if c < minCosine {
				t.Fatalf("%s: text %d: cosine %v", name, k, c)
			}
		}
		t.Logf("%s: %d texts, worst cosine %.8f, %d zero vectors", name, len(texts), worst, zeros)
		inst.Close(ctx)
		if name != "potion-base-8M" {
			continue
		}
		two := newInstance(t, 2)
		if err := two.LoadEmbedder(ctx, fixture(t, "models/"+name)); err != nil {
			t.Fatal(err)
		}
		again, err := two.Embed(ctx, texts)
		if err != nil {
			t.Fatal(err)
		}
		for k := range got {
			if !bitsEqual(got[k], again[k]) {
				t.Fatalf("text %d: 2 threads change the bits", k)
			}
		}
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// A BERT sentence encoder (all-MiniLM-L6-v2, F16 GGUF) against llama.cpp's vectors
// (host-tests/testdata/bert/minilm-reference.json), on 1 and 2 threads.
func TestBertEncoderMatchesLlamaCpp(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "host-tests/testdata/bert/minilm-reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Texts []string `json:"texts"`
		Rows  []struct {
			IDs       []int32   `json:"ids"`
			Embedding []float64 `json:"embedding"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	// The texts of up to 32 tokens (wazero runs the encoder's long texts in seconds each; the
	// wasmtime host tests take all 70).
	var texts []string
	var want [][]float64
	for k, r := range ref.Rows {
		if len(r.IDs) <= 32 {
			texts = append(texts, ref.Texts[k])
			want = append(want, r.Embedding)
		}
	}
	var first [][]float32
	for _, threads := range []int{1, 2} {
		inst := newInstance(t, threads)
		if err := inst.LoadEmbedder(context.Background(), fixture(t, "models/all-MiniLM-L6-v2-F16.gguf")); err != nil {
			t.Fatal(err)
		}
		vecs, err := inst.Embed(context.Background(), texts)
		if err != nil {
			t.Fatal(err)
		}
		worst := 1.0
		for k, w := range want {
			worst = min(worst, cosine(vecs[k], w))
		}
		if worst < minCosine {
			t.Fatalf("threads %d: worst cosine %v", threads, worst)
		}
		t.Logf("threads %d: %d texts, worst cosine %.7f", threads, len(vecs), worst)
		if first == nil {
			first = vecs
		} else if !slices.EqualFunc(first, vecs, bitsEqual) {
			t.Fatal("2 threads change the bits")
		}
	}
}

func TestEmbedErrors(t *testing.T) {
	ctx := context.Background()
	inst := newInstance(t, 1)
	if _, err := inst.Embed(ctx, []string{"a"}); !errors.Is(err, NoModel) {
		t.Fatalf("no embedder: %v", err)
	}
	if err := inst.LoadEmbedder(ctx, fixture(t, potion)); err != nil {
		t.Fatal(err)
	}
	// Over a batch of 1,024 texts, so the failing one is in the second batch.
	texts := make([]string, 1500)
	for k := range texts {
		texts[k] = "fine"
	}
	texts[1300] = "caf\xc3"
	_, err := inst.Embed(ctx, texts)
	var e *Error
	if !errors.As(err, &e) || e.Status != InvalidUTF8 || !strings.Contains(e.Message, "276") ||
		!strings.Contains(e.Message, "1024") {
		t.Fatalf("%v", err)
	}
	if v, err := inst.Embed(ctx, []string{"still works", ""}); err != nil || len(v) != 2 || len(v[0]) != 256 {
		t.Fatalf("%v %v", len(v), err)
	}
	if v, err := inst.Embed(ctx, nil); err != nil || len(v) != 0 {
		t.Fatalf("%v %v", v, err)
	}
}
