package wasmind

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// After Close every call is ErrClosed (never a panic), and Close again is harmless.
func TestUseAfterClose(t *testing.T) {
	ctx := context.Background()
	for _, threads := range []int{1, 2} {
		inst, err := New(ctx, Config{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		if err := inst.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := inst.Close(ctx); err != nil {
			t.Fatal(err)
		}
		calls := map[string]error{
			"LoadModel":     inst.LoadModel(ctx, bytes.NewReader([]byte("GGUF")), LoadOptions{}),
			"LoadModelFile": inst.LoadModelFile(ctx, fixture(t, smollm2), LoadOptions{}),
			"LoadEmbedder":  inst.LoadEmbedder(ctx, fixture(t, potion)),
		}
		_, calls["Embed"] = inst.Embed(ctx, []string{"a"})
		_, calls["Tokenize"] = inst.Tokenize(ctx, "a", TokenizeOptions{})
		_, calls["ChatTokens"] = inst.ChatTokens(ctx)
		_, calls["Info"] = inst.Info(ctx)
		_, calls["Chat"] = reply(inst, ctx, []Message{{User, "Hi"}}, ChatOptions{})
		for name, err := range calls {
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("threads %d: %s after Close: %v", threads, name, err)
			}
		}
		_ = inst.LastReply()
	}
}

// Close from another goroutine ends a reply in progress with ErrClosed.
func TestCloseDuringAReply(t *testing.T) {
	inst := withModel(t, 2)
	ctx := context.Background()
	var end error
	pieces := 0
	for _, err := range inst.Chat(ctx, []Message{{User, "Write a long story."}}, ChatOptions{}) {
		if err != nil {
			end = err
			break
		}
		if pieces++; pieces == 2 {
			go inst.Close(ctx)
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !errors.Is(end, ErrClosed) {
		t.Fatalf("the reply ended with %v after %d pieces", end, pieces)
	}
}

// A MaxMemory below what the model needs: OUT_OF_MEMORY from the load, and the Instance goes on
// (the memory is a reservation that never moves; growing past it fails cleanly).
func TestMaxMemoryIsAnError(t *testing.T) {
	ctx := context.Background()
	for _, threads := range []int{1, 2} {
		inst, err := New(ctx, Config{Threads: threads, MaxMemory: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(ctx)
		err = inst.LoadModelFile(ctx, fixture(t, smollm2), LoadOptions{})
		if !errors.Is(err, OutOfMemory) {
			t.Fatalf("threads %d: a 98 MB model in 64 MiB: %v", threads, err)
		}
		if err := inst.LoadEmbedder(ctx, fixture(t, potion)); err != nil {
			t.Fatalf("threads %d: %v", threads, err)
		}
		if info, err := inst.Info(ctx); err != nil || info.MaxMemory != 64<<20 || info.Memory > 64<<20 {
			t.Fatalf("threads %d: %+v %v", threads, info, err)
		}
	}
}
