package wasmind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
)

// Role is who wrote a message.
type Role string

// The roles a conversation holds.
const (
	System    Role = "system"
	User      Role = "user"
	Assistant Role = "assistant" // a reply, as the model wrote it (e.g. restored history)
)

var roleIDs = map[Role]uint64{System: 0, User: 1, Assistant: 2} // WASMIND_ROLE_*

// Message is one turn of a conversation.
type Message struct {
	Role    Role
	Content string
}

// Sampler is how the next token is drawn: repetition penalty over the last RepeatWindow
// tokens, then greedy if Temperature <= 0, else top-k, min-p, top-p, temperature and a draw
// seeded by Seed (abi/ABI.md "Sampler"). TopK 0, TopP 1, MinP 0, RepeatPenalty 1 are off.
type Sampler struct {
	Temperature   float32 `json:"temperature"`
	TopK          int     `json:"top_k"`
	TopP          float32 `json:"top_p"`
	MinP          float32 `json:"min_p"`
	RepeatPenalty float32 `json:"repeat_penalty"`
	RepeatWindow  int     `json:"repeat_window"`
	Seed          uint32  `json:"seed"`
}

// Greedy is the sampler that always takes the most likely token, without a repetition penalty
// (what llama.cpp's references use).
func Greedy() *Sampler {
	return &Sampler{Temperature: 0, TopP: 1, RepeatPenalty: 1, RepeatWindow: 64}
}

// ChatOptions are the settings of one reply.
type ChatOptions struct {
	// MaxTokens ends the reply after this many tokens; 0 runs until the end-of-generation token
	// or a full context.
	MaxTokens int
	// Sampler: nil is the module's defaults (temperature 0.2, top-k 40, top-p 0.95, min-p 0.05,
	// repeat penalty 1.1 over 64 tokens, seed 0). Each reply starts its draws from the seed, so
	// the same conversation and Sampler give the same reply.
	Sampler *Sampler
	// At most one constraint: GBNF text (llama.cpp's dialect), a JSON schema (the reply is an
	// instance of it), or any JSON object. A schema keyword the grammar cannot enforce is
	// refused (Unsupported), never ignored.
	Grammar    string
	JSONSchema string
	JSONObject bool
}

// ReplyStats describes the last reply (Instance.LastReply).
type ReplyStats struct {
	// FinishReason: "stop" (the model ended it), "length" (MaxTokens or a full context),
	// "stopped" (a cancelled context, Close, or an abandoned iteration).
	FinishReason string
	State        string  `json:"state"`         // the module's: eog, limit, context_full, stopped
	PromptTokens int     `json:"prompt_tokens"` // tokens the reply's start ran (new ones only)
	Tokens       int     `json:"tokens"`        // tokens of the reply
	PrefillTPS   float64 `json:"prefill_tps"`
	DecodeTPS    float64 `json:"decode_tps"`
	KVTokens     int     `json:"kv_tokens"`  // the conversation's tokens in the cache
	LastToken    int32   `json:"last_token"` // the last id sampled (the end token included), or -1
	GrammarMasks int     `json:"grammar_masks"`
}

var finishReasons = map[string]string{"eog": "stop", "limit": "length", "context_full": "length",
	"stopped": "stopped"}

// chatState is what the Instance knows of the module's conversation.
type chatState struct {
	reply   uint64    // the current reply's number (every Chat takes the next)
	busy    bool      // chat_start ran and the reply has not ended
	history []Message // the conversation the module holds, its last reply included; nil: none
	last    ReplyStats
}

// ErrSuperseded ends a reply's iteration when another Chat started on the same Instance.
var ErrSuperseded = errors.New("wasmind: another Chat started on this Instance; this reply is over")

// nowMs is the monotonic clock in milliseconds the module's timings take (chat_stats).
func nowMs() float64 { return float64(time.Since(clockStart)) / 1e6 }

var clockStart = time.Now()

// Chat runs a reply to the conversation and yields its text as it is generated, a piece per
// token (complete UTF-8). It ends with the reply, or yields one non-nil error and ends: an
// *Error from the module, or ctx's error when ctx is done (the module stops within a token,
// between 64-token prompt chunks while reading the prompt). Breaking out of the loop stops the
// reply. A conversation that continues the previous one (the same messages, then the reply as
// it was yielded, then new messages) runs only the new messages.
func (i *Instance) Chat(ctx context.Context, messages []Message, opts ChatOptions) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		id, release, err := i.startReply(ctx, messages, opts)
		if err != nil {
			yield("", err)
			return
		}
		defer release()
		var reply strings.Builder
		for {
			piece, state, err := i.next(ctx, id)
			if err != nil {
				yield("", err)
				return
			}
			if piece != "" {
				reply.WriteString(piece)
				if !yield(piece, nil) {
					i.abandon(ctx, id)
					return
				}
			}
			if state == "" {
				continue
			}
			if state == "stopped" {
				switch {
				case ctx.Err() != nil:
					yield("", ctx.Err())
				case i.closing.Load():
					yield("", ErrClosed)
				default:
					yield("", errorf(Stopped, "the reply was stopped"))
				}
				return
			}
			i.mu.Lock()
			if i.chat.reply == id && state == "eog" {
				i.chat.history = append(slices.Clone(messages), Message{Assistant, reply.String()})
			}
			i.mu.Unlock()
			return
		}
	}
}

// LastReply describes the last reply that ended.
func (i *Instance) LastReply() ReplyStats {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.chat.last
}

// startReply sets the sampler and the grammar, adds the messages the module does not hold
// yet, and runs them (chat_start). Returns the reply's number, and the function that ends
// ctx's hold on the stop flag once the reply is over.
func (i *Instance) startReply(ctx context.Context, messages []Message, opts ChatOptions) (uint64, func(), error) {
	id, err := i.prepareReply(ctx, messages, opts)
	if err != nil {
		return 0, nil, err
	}
	// From here a cancelled context writes the stop flag, from its own goroutine, as long as
	// this reply is the one running.
	i.stopMu.Lock()
	i.stopOwner = id
	i.stopMu.Unlock()
	stopAfter := context.AfterFunc(ctx, func() { i.requestStop(id) })
	release := func() {
		stopAfter()
		i.stopMu.Lock()
		if i.stopOwner == id {
			i.stopOwner = 0
		}
		i.stopMu.Unlock()
	}
	if err := i.lock(); err != nil {
		release()
		return 0, nil, err
	}
	defer i.mu.Unlock()
	if i.chat.reply != id {
		release()
		return 0, nil, ErrSuperseded
	}
	if _, err := i.m.checked(ctx, "chat_start", uint64(opts.MaxTokens), f64(nowMs())); err != nil {
		release()
		if errors.Is(err, Stopped) && ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		return 0, nil, err
	}
	i.chat.busy = true
	return id, release, nil
}

// prepareReply checks the options, sets the sampler and the grammar and adds the messages the
// module does not hold yet. Returns the reply's number.
func (i *Instance) prepareReply(ctx context.Context, messages []Message, opts ChatOptions) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(messages) == 0 {
		return 0, errorf(InvalidArgument, "a conversation needs at least one message")
	}
	for k, msg := range messages {
		if _, ok := roleIDs[msg.Role]; !ok {
			return 0, errorf(InvalidArgument, "message %d: role %q is not system, user or assistant", k, msg.Role)
		}
	}
	kind, grammar, err := grammarOf(opts)
	if err != nil {
		return 0, err
	}
	if opts.MaxTokens < 0 || opts.MaxTokens > 1<<31-1 {
		return 0, errorf(InvalidArgument, "MaxTokens %d: from 0 (no limit) to 2^31-1", opts.MaxTokens)
	}
	s := i.defaults
	if opts.Sampler != nil {
		s = *opts.Sampler
	}
	if s.TopK < 0 || s.RepeatWindow < 0 {
		return 0, errorf(InvalidArgument, "Sampler: TopK %d, RepeatWindow %d: not negative", s.TopK, s.RepeatWindow)
	}
	if err := i.lock(); err != nil {
		return 0, err
	}
	defer i.mu.Unlock()
	m, c := i.m, &i.chat
	c.reply++
	id := c.reply
	if _, err := m.checked(ctx, "sampler_set", f32(s.Temperature), uint64(s.TopK), f32(s.TopP),
		f32(s.MinP), f32(s.RepeatPenalty), uint64(s.RepeatWindow), uint64(s.Seed)); err != nil {
		return 0, err
	}
	fresh := messages
	if h := c.history; !c.busy && h != nil && len(messages) > len(h) && slices.Equal(messages[:len(h)], h) {
		fresh = messages[len(h):]
	} else if _, err := m.checked(ctx, "chat_reset"); err != nil {
		return 0, err
	}
	c.history, c.busy = nil, false
	for _, msg := range fresh {
		if err := i.add(ctx, roleIDs[msg.Role], msg.Content); err != nil {
			return 0, err
		}
	}
	gp, err := m.put(ctx, grammar)
	if err != nil {
		return 0, err
	}
	_, err = m.checked(ctx, "chat_set_grammar", kind, uint64(gp), uint64(len(grammar)))
	m.free(ctx, gp, uint64(len(grammar)))
	if err != nil {
		return 0, err
	}
	return id, nil
}

func (i *Instance) add(ctx context.Context, role uint64, text string) error {
	p, err := i.m.put(ctx, text)
	if err != nil {
		return err
	}
	_, err = i.m.checked(ctx, "chat_add", role, uint64(p), uint64(len(text)))
	i.m.free(ctx, p, uint64(len(text)))
	return err
}

// grammarOf is chat_set_grammar's kind and text for the options.
func grammarOf(opts ChatOptions) (uint64, string, error) {
	set := 0
	for _, on := range []bool{opts.Grammar != "", opts.JSONSchema != "", opts.JSONObject} {
		if on {
			set++
		}
	}
	switch {
	case set > 1:
		return 0, "", errorf(InvalidArgument, "ChatOptions: at most one of Grammar, JSONSchema, JSONObject")
	case opts.Grammar != "":
		return 1, opts.Grammar, nil // WASMIND_GRAMMAR_GBNF
	case opts.JSONSchema != "":
		return 2, opts.JSONSchema, nil // WASMIND_GRAMMAR_JSON_SCHEMA
	case opts.JSONObject:
		return 3, "", nil // WASMIND_GRAMMAR_JSON_OBJECT
	}
	return 0, "", nil
}

// next runs chat_next for reply id: a piece of text, or the state it ended in ("" while it
// goes on).
func (i *Instance) next(ctx context.Context, id uint64) (string, string, error) {
	if err := i.lock(); err != nil {
		return "", "", err
	}
	defer i.mu.Unlock()
	if i.chat.reply != id || !i.chat.busy {
		return "", "", ErrSuperseded
	}
	m := i.m
	if ctx.Err() != nil {
		m.stop() // chat_start cleared a flag set while it began
	}
	v, err := m.call(ctx, "chat_next", f64(nowMs()))
	if err != nil {
		return "", "", err
	}
	switch rc := int32(uint32(v)); {
	case rc >= 0:
		ptr, err := m.call(ctx, "result_ptr")
		if err != nil {
			return "", "", err
		}
		b, err := m.view(uint32(ptr), uint64(rc))
		return string(b), "", err
	case rc == -int32(End) || rc == -int32(Stopped) || rc == -int32(ContextFull):
		return "", i.finish(ctx), nil
	default:
		i.chat.busy = false
		return "", "", m.failure(ctx, rc)
	}
}

// finish records the ended reply's statistics; returns its state.
func (i *Instance) finish(ctx context.Context) string {
	c := &i.chat
	c.busy = false
	c.last = ReplyStats{State: "unknown", LastToken: -1}
	if text, err := i.m.resultText(ctx, "chat_stats"); err == nil {
		if err := json.Unmarshal([]byte(text), &c.last); err != nil {
			c.last.State = fmt.Sprintf("unreadable chat_stats: %v", err)
		}
	}
	c.last.FinishReason = finishReasons[c.last.State]
	return c.last.State
}

// abandon stops reply id when its caller left the loop early: the stop flag, then chat_next
// until the module says the reply is over.
func (i *Instance) abandon(ctx context.Context, id uint64) {
	if i.lock() != nil {
		return
	}
	defer i.mu.Unlock()
	if i.chat.reply != id || !i.chat.busy {
		return
	}
	i.m.stop()
	for range 4 {
		v, err := i.m.call(ctx, "chat_next", f64(nowMs()))
		if err != nil || int32(uint32(v)) < 0 {
			break
		}
	}
	i.finish(ctx)
	i.chat.history = nil
}

// Tokenize options.
type TokenizeOptions struct {
	AddSpecial   bool // BOS/EOS as the model's metadata says
	ParseSpecial bool // control tokens written in the text become their ids
}

// Tokenize is the loaded model's token ids for text.
func (i *Instance) Tokenize(ctx context.Context, text string, opts TokenizeOptions) ([]int32, error) {
	if err := i.lock(); err != nil {
		return nil, err
	}
	defer i.mu.Unlock()
	flags := uint64(0)
	if opts.AddSpecial {
		flags |= 1
	}
	if opts.ParseSpecial {
		flags |= 2
	}
	m := i.m
	p, err := m.put(ctx, text)
	if err != nil {
		return nil, err
	}
	defer m.free(ctx, p, uint64(len(text)))
	cap := uint64(len(text) + 8)
	for {
		out, err := m.alloc(ctx, 4*cap)
		if err != nil {
			return nil, err
		}
		n, err := m.checked(ctx, "tokenize", uint64(p), uint64(len(text)), flags, uint64(out), cap)
		var ids []int32
		if err == nil && uint64(n) <= cap {
			ids, err = m.readIDs(out, uint64(n))
		}
		m.free(ctx, out, 4*cap)
		if err != nil || ids != nil {
			return ids, err
		}
		cap = uint64(n)
	}
}

// ChatTokens is the ids in the KV cache: the conversation as run so far, the last reply
// included but not its end-of-generation token (LastReply().LastToken is that one).
func (i *Instance) ChatTokens(ctx context.Context) ([]int32, error) {
	if err := i.lock(); err != nil {
		return nil, err
	}
	defer i.mu.Unlock()
	m := i.m
	n, err := m.checked(ctx, "chat_tokens", 0, 0)
	if err != nil {
		return nil, err
	}
	out, err := m.alloc(ctx, 4*uint64(n))
	if err != nil {
		return nil, err
	}
	defer m.free(ctx, out, 4*uint64(n))
	if _, err := m.checked(ctx, "chat_tokens", uint64(out), uint64(n)); err != nil {
		return nil, err
	}
	return m.readIDs(out, uint64(n))
}

// readIDs is n little-endian u32 ids at ptr.
func (m *module) readIDs(ptr uint32, n uint64) ([]int32, error) {
	b, err := m.view(ptr, 4*n)
	if err != nil {
		return nil, err
	}
	ids := make([]int32, n)
	for k := range ids {
		ids[k] = int32(uint32(b[4*k]) | uint32(b[4*k+1])<<8 | uint32(b[4*k+2])<<16 | uint32(b[4*k+3])<<24)
	}
	return ids, nil
}
