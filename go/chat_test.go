package wasmind

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// reference/smollm2-q4_1.json (llama.cpp on SmolLM2-135M-Instruct Q4_1).
type smollm2Reference struct {
	Tokenize []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"tokenize"`
	Greedy []referenceChat `json:"greedy"`
}

type referenceChat struct {
	User      string  `json:"user"`
	System    *string `json:"system"`
	Prompt    string  `json:"prompt"`
	PromptIDs []int32 `json:"prompt_ids"`
	IDs       []int32 `json:"ids"`
	Text      string  `json:"text"`
	Steps     []struct {
		Logits []float64 `json:"logits"`
	} `json:"steps"`
}

func (c referenceChat) messages() []Message {
	var m []Message
	if c.System != nil {
		m = append(m, Message{System, *c.System})
	}
	return append(m, Message{User, c.User})
}

const replyTokens = 12 // python/tests/conftest.py REPLY_TOKENS

func greedy() ChatOptions { return ChatOptions{MaxTokens: replyTokens, Sampler: Greedy()} }

// reply runs a reply to its end: its text, or the error that ended it.
func reply(inst *Instance, ctx context.Context, msgs []Message, opts ChatOptions) (string, error) {
	var b strings.Builder
	for piece, err := range inst.Chat(ctx, msgs, opts) {
		if err != nil {
			return b.String(), err
		}
		b.WriteString(piece)
	}
	return b.String(), nil
}

func TestPromptAndCorpusIDsEqualLlamaCpp(t *testing.T) {
	var ref smollm2Reference
	reference(t, "smollm2-q4_1.json", &ref)
	inst := sharedModel(t)
	ctx := context.Background()
	for _, c := range ref.Greedy {
		ids, err := inst.Tokenize(ctx, c.Prompt, TokenizeOptions{ParseSpecial: true})
		if err != nil || !slices.Equal(ids, c.PromptIDs) {
			t.Fatalf("%q: prompt ids %v (%v), llama.cpp %v", c.User, ids, err, c.PromptIDs)
		}
	}
	for _, r := range ref.Tokenize {
		ids, err := inst.Tokenize(ctx, r.Text, TokenizeOptions{})
		if err != nil || !slices.Equal(ids, r.IDs) {
			t.Fatalf("%.60q: ids %v (%v), llama.cpp %v", r.Text, ids, err, r.IDs)
		}
	}
	t.Logf("%d prompts and %d corpus texts tokenize as llama.cpp's", len(ref.Greedy), len(ref.Tokenize))
}

// compareGreedy is glue/test/reference.mjs compareGreedy (and python/tests'): the prompt ids
// equal llama.cpp's; the reply's tokens equal llama.cpp's up to the first step where its top two
// logits are less than `decisive` apart. Returns the tokens compared.
func compareGreedy(t *testing.T, inst *Instance, c referenceChat, text string) int {
	t.Helper()
	ids, err := inst.ChatTokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := len(c.PromptIDs)
	if len(ids) < n || !slices.Equal(ids[:n], c.PromptIDs) {
		t.Fatalf("%q: prompt ids %v, llama.cpp %v", c.User, ids, c.PromptIDs)
	}
	r := inst.LastReply()
	got := ids[n:]
	if r.FinishReason == "stop" {
		got = append(got, r.LastToken)
	}
	compared := 0
	for k := 0; k < len(got) && k < len(c.Steps); k++ {
		if l := c.Steps[k].Logits; l[0]-l[1] < decisive {
			break
		}
		if got[k] != c.IDs[k] {
			t.Fatalf("%q: token %d is %d, llama.cpp's %d (reply %v vs %v)", c.User, k, got[k], c.IDs[k], got, c.IDs)
		}
		compared++
	}
	if len(got) <= len(c.IDs) && slices.Equal(got, c.IDs[:len(got)]) && !strings.HasPrefix(c.Text, text) {
		t.Fatalf("%q: text %q, llama.cpp's %q", c.User, text, c.Text)
	}
	return compared
}

// The replies follow llama.cpp's while it is decisive, with 1 and 2 threads, and the two
// thread counts give the same replies token for token.
func TestGreedyRepliesFollowLlamaCpp(t *testing.T) {
	var ref smollm2Reference
	reference(t, "smollm2-q4_1.json", &ref)
	replies := map[int][][]int32{}
	for _, threads := range []int{1, 2} {
		inst := withModel(t, threads)
		compared := 0
		for _, c := range ref.Greedy {
			text, err := reply(inst, context.Background(), c.messages(), greedy())
			if err != nil {
				t.Fatalf("threads %d, %q: %v", threads, c.User, err)
			}
			compared += compareGreedy(t, inst, c, text)
			ids, _ := inst.ChatTokens(context.Background())
			replies[threads] = append(replies[threads], ids)
		}
		t.Logf("%d thread(s): %d decisive tokens equal llama.cpp's", threads, compared)
		if compared < 40 {
			t.Fatalf("threads %d: only %d decisive tokens compared", threads, compared)
		}
		inst.Close(context.Background())
	}
	for k := range replies[1] {
		if !slices.Equal(replies[1][k], replies[2][k]) {
			t.Fatalf("chat %d: 1 thread %v, 2 threads %v", k, replies[1][k], replies[2][k])
		}
	}
}

func TestFollowUpRunsOnlyNewMessages(t *testing.T) {
	inst := sharedModel(t)
	ctx := context.Background()
	first := []Message{{User, "What is the capital of France?"}}
	a, err := reply(inst, ctx, first, greedy())
	if err != nil || !strings.Contains(a, "Paris") {
		t.Fatalf("%q %v", a, err)
	}
	before := inst.LastReply().KVTokens
	b, err := reply(inst, ctx, append(first, Message{Assistant, a}, Message{User, "And of Italy?"}), greedy())
	if err != nil || !strings.Contains(b, "Rome") {
		t.Fatalf("%q %v", b, err)
	}
	r := inst.LastReply()
	if r.PromptTokens >= 20 || r.KVTokens <= before {
		t.Fatalf("the follow-up ran %d prompt tokens (cache %d before, %d after)", r.PromptTokens, before, r.KVTokens)
	}
}

func TestGrammarsAndSchemas(t *testing.T) {
	inst := sharedModel(t)
	ctx := context.Background()
	msgs := []Message{{User, "Describe a person as JSON with name and age."}}
	schema := `{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
		"required": ["name", "age"], "additionalProperties": false}`
	text, err := reply(inst, ctx, msgs, ChatOptions{MaxTokens: 60, Sampler: Greedy(), JSONSchema: schema})
	var person struct {
		Name *string
		Age  *int
	}
	if err != nil || json.Unmarshal([]byte(text), &person) != nil || person.Name == nil || person.Age == nil {
		t.Fatalf("schema reply %q (%v)", text, err)
	}
	text, err = reply(inst, ctx, msgs, ChatOptions{MaxTokens: 80, Sampler: Greedy(), JSONObject: true})
	var obj map[string]any
	if err != nil || json.Unmarshal([]byte(text), &obj) != nil || inst.LastReply().FinishReason != "stop" {
		t.Fatalf("JSON object reply %q (%v) %+v", text, err, inst.LastReply())
	}
	text, err = reply(inst, ctx, msgs, ChatOptions{MaxTokens: 10, Sampler: Greedy(), Grammar: `root ::= "yes" | "no"`})
	if err != nil || (text != "yes" && text != "no") {
		t.Fatalf("GBNF reply %q (%v)", text, err)
	}
	for _, bad := range []ChatOptions{{Grammar: "root ::= ("}, {JSONSchema: `{"type": "strin"}`},
		{JSONSchema: `{"not": {}}`}} {
		_, err := reply(inst, ctx, msgs, bad)
		if !errors.Is(err, BadFormat) && !errors.Is(err, Unsupported) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if _, err := reply(inst, ctx, msgs, ChatOptions{Grammar: "root ::= \"a\"", JSONObject: true}); !errors.Is(err, InvalidArgument) {
		t.Fatal(err)
	}
	// Seeded sampling: the same Sampler gives the same reply.
	s := &Sampler{Temperature: 1, TopK: 40, TopP: 0.95, RepeatPenalty: 1.1, RepeatWindow: 64, Seed: 7}
	a, err1 := reply(inst, ctx, []Message{{User, "Write a word."}}, ChatOptions{MaxTokens: 8, Sampler: s})
	b, err2 := reply(inst, ctx, []Message{{User, "Write a word."}}, ChatOptions{MaxTokens: 8, Sampler: s})
	if err1 != nil || err2 != nil || a != b {
		t.Fatalf("seeded replies %q %q (%v %v)", a, b, err1, err2)
	}
}

// Cancelling the context stops a reply within a token; the instance goes on working.
func TestCancelledContextStopsWithinAToken(t *testing.T) {
	for _, threads := range []int{1, 2} {
		inst := withModel(t, threads)
		ctx, cancel := context.WithCancel(context.Background())
		pieces, after := 0, 0
		var end error
		for piece, err := range inst.Chat(ctx, []Message{{User, "Write a long story about a river town."}}, ChatOptions{}) {
			if err != nil {
				end = err
				break
			}
			if piece != "" {
				pieces++
			}
			if pieces == 3 {
				cancel()
			} else if pieces > 3 {
				after++
			}
		}
		cancel()
		if !errors.Is(end, context.Canceled) || after > 1 || inst.LastReply().State != "stopped" {
			t.Fatalf("threads %d: ended with %v, %d pieces after the cancel, %+v", threads, end, after, inst.LastReply())
		}
		// A context cancelled before the reply: no text, its error.
		text, err := reply(inst, ctx, []Message{{User, "Hi"}}, greedy())
		if text != "" || !errors.Is(err, context.Canceled) {
			t.Fatalf("threads %d: a cancelled context gave %q, %v", threads, text, err)
		}
		text, err = reply(inst, context.Background(), []Message{{User, "What is the capital of France?"}}, greedy())
		if err != nil || !strings.Contains(text, "Paris") {
			t.Fatalf("threads %d: after the cancel %q %v", threads, text, err)
		}
	}
}

// A deadline that passes while the module reads a long prompt stops it between 64-token
// chunks: nothing is generated, and the call returns soon after the deadline.
func TestDeadlineStopsTheReadOfALongPrompt(t *testing.T) {
	inst := withModel(t, 1)
	long := strings.Repeat("The river town woke slowly and the ferry sounded its horn. ", 70) // ~900 tokens
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	text, err := reply(inst, ctx, []Message{{User, long}}, greedy())
	late := time.Since(deadline(ctx))
	if text != "" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%q, %v", text, err)
	}
	// Stopped while reading the prompt, the module put the cache back as it was (empty); had
	// it read the whole prompt, the ~900 tokens would be there.
	if ids, err := inst.ChatTokens(context.Background()); err != nil || len(ids) != 0 {
		t.Fatalf("%d tokens in the cache after the deadline (%v)", len(ids), err)
	}
	// One chunk of 64 tokens is well under a second alone; the bound leaves room for a busy
	// machine.
	if late > 30*time.Second {
		t.Fatalf("returned %v after the deadline", late)
	}
	t.Logf("returned %v after the deadline", late.Round(time.Millisecond))
	text, err = reply(inst, context.Background(), []Message{{User, "What is the capital of France?"}}, greedy())
	if err != nil || !strings.Contains(text, "Paris") {
		t.Fatalf("after the deadline %q %v", text, err)
	}
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// Leaving the loop early stops the reply; the next one starts afresh.
func TestAbandonedReplyThenNewReply(t *testing.T) {
	inst := sharedModel(t)
	msgs := []Message{{User, "What is the capital of France?"}}
	n := 0
	for _, err := range inst.Chat(context.Background(), msgs, greedy()) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}
	if inst.LastReply().State != "stopped" {
		t.Fatalf("%+v", inst.LastReply())
	}
	text, err := reply(inst, context.Background(), msgs, greedy())
	if err != nil || !strings.Contains(text, "Paris") {
		t.Fatalf("%q %v", text, err)
	}
}

func TestContextFullAndBadMessages(t *testing.T) {
	inst := newInstance(t, 1)
	ctx := context.Background()
	if _, err := reply(inst, ctx, []Message{{User, "Hi"}}, greedy()); !errors.Is(err, NoModel) {
		t.Fatalf("no model: %v", err)
	}
	if err := inst.LoadModelFile(ctx, fixture(t, smollm2), LoadOptions{Context: 16}); err != nil {
		t.Fatal(err)
	}
	if _, err := reply(inst, ctx, []Message{{User, strings.Repeat("word ", 40)}}, greedy()); !errors.Is(err, ContextFull) {
		t.Fatalf("a long message in 16 tokens: %v", err)
	}
	text, err := reply(inst, ctx, []Message{{User, "Hi"}}, ChatOptions{Sampler: Greedy()})
	if err != nil || inst.LastReply().FinishReason != "length" {
		t.Fatalf("%q %v %+v", text, err, inst.LastReply())
	}
	for _, msgs := range [][]Message{nil, {{Role: "tool", Content: "x"}}} {
		if _, err := reply(inst, ctx, msgs, greedy()); !errors.Is(err, InvalidArgument) {
			t.Fatalf("%v: %v", msgs, err)
		}
	}
	if _, err := reply(inst, ctx, []Message{{User, "caf\xc3"}}, greedy()); !errors.Is(err, InvalidUTF8) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	if _, err := inst.Tokenize(ctx, "caf\xc3", TokenizeOptions{}); !errors.Is(err, InvalidUTF8) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}
