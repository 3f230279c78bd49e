package wasmind

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// modelVocab is model_info's "vocab": the rows of the output matrix.
func modelVocab(t *testing.T, info Info) int {
	t.Helper()
	var v struct {
		Vocab int `json:"vocab"`
	}
	if err := json.Unmarshal(info.Model.JSON, &v); err != nil || v.Vocab <= 0 {
		t.Fatalf("model_info %s: %v", info.Model.JSON, err)
	}
	return v.Vocab
}

// prefillLogits runs prefill_logits on ids from an empty cache: (len(ids), vocab) f32 as bytes.
func prefillLogits(t *testing.T, inst *Instance, ids []int32, vocab int) []byte {
	t.Helper()
	ctx := context.Background()
	if err := inst.lock(); err != nil {
		t.Fatal(err)
	}
	defer inst.mu.Unlock()
	m := inst.m
	if _, err := m.checked(ctx, "reset"); err != nil {
		t.Fatal(err)
	}
	in, err := m.alloc(ctx, 4*uint64(len(ids)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.free(ctx, in, 4*uint64(len(ids)))
	b, _ := m.view(in, 4*uint64(len(ids)))
	for k, id := range ids {
		b[4*k], b[4*k+1], b[4*k+2], b[4*k+3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
	}
	size := 4 * uint64(len(ids)*vocab)
	out, err := m.alloc(ctx, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.free(ctx, out, size)
	if _, err := m.checked(ctx, "prefill_logits", uint64(in), uint64(len(ids)), uint64(out)); err != nil {
		t.Fatal(err)
	}
	logits, err := m.read(out, size)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// The logits of every prompt position are bit-identical for 1, 2 and 3 threads (the module's
// promise; each output element is computed inside one chunk by one thread).
func TestLogitsBitIdenticalAcrossThreads(t *testing.T) {
	var ref smollm2Reference
	reference(t, "smollm2-q4_1.json", &ref)
	ids := ref.Greedy[0].PromptIDs
	var first []byte
	for _, threads := range []int{1, 2, 3} {
		inst := withModel(t, threads)
		info, err := inst.Info(context.Background())
		if err != nil || info.Threads != threads || info.Model == nil {
			t.Fatalf("threads %d: %+v %v", threads, info, err)
		}
		logits := prefillLogits(t, inst, ids, modelVocab(t, info))
		if first == nil {
			first = logits
		} else if !bytes.Equal(first, logits) {
			t.Fatalf("threads %d: the logits differ from 1 thread's", threads)
		}
		inst.Close(context.Background())
	}
	t.Logf("%d positions x %d logits, the same bits on 1, 2 and 3 threads", len(ids), len(first)/4/len(ids))
}

// A helper that traps mid-job (pool_inject_fault kind 1, ABI.md "A lost helper"): the driver's
// call fails with HELPER_LOST after its 3 s wait, every compute call after it too (the status
// is sticky), and Close still returns.
func TestLostHelperIsAStatus(t *testing.T) {
	inst := withModel(t, 2)
	ctx := context.Background()
	if err := inst.lock(); err != nil {
		t.Fatal(err)
	}
	_, err := inst.m.checked(ctx, "pool_inject_fault", 0, 1)
	inst.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{User, "What is the capital of France?"}}
	if _, err := reply(inst, ctx, msgs, greedy()); !errors.Is(err, HelperLost) {
		t.Fatalf("with a trapped helper: %v", err)
	}
	if _, err := reply(inst, ctx, msgs, greedy()); !errors.Is(err, HelperLost) {
		t.Fatalf("after the lost helper: %v", err)
	}
	if err := inst.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
