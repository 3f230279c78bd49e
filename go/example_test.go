package wasmind_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	wasmind "github.com/wasmind/wasmind/go"
)

// The test fixtures' copies of the models (`cargo xtask fixtures`; $WASMIND_FIXTURES overrides).
var (
	fixtures = func() string {
		if d := os.Getenv("WASMIND_FIXTURES"); d != "" {
			return d
		}
		return filepath.Join("..", "target", "fixtures")
	}()
	smolLM2  = filepath.Join(fixtures, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
	potion8M = filepath.Join(fixtures, "models", "potion-base-8M")
)

// A chat with SmolLM2 on two threads, streamed as it is generated.
func Example() {
	ctx := context.Background()
	inst, err := wasmind.New(ctx, wasmind.Config{Threads: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.LoadModelFile(ctx, smolLM2, wasmind.LoadOptions{Context: 1024}); err != nil {
		log.Fatal(err)
	}
	question := []wasmind.Message{{Role: wasmind.User, Content: "What is the capital of France?"}}
	for piece, err := range inst.Chat(ctx, question, wasmind.ChatOptions{Sampler: wasmind.Greedy()}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(piece)
	}
	fmt.Println()
	// Output: The capital of France is Paris.
}

// Sentence vectors from a Model2Vec folder.
func ExampleInstance_Embed() {
	ctx := context.Background()
	inst, err := wasmind.New(ctx, wasmind.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.LoadEmbedder(ctx, potion8M); err != nil {
		log.Fatal(err)
	}
	vecs, err := inst.Embed(ctx, []string{"It's dangerous to go alone!", "It's a secret to everybody."})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(vecs), len(vecs[0]))
	// Output: 2 256
}
