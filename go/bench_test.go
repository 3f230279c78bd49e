package wasmind

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The benchmarks time what host-tests' `bench` (src/bin/bench.rs) times in wasmtime, on the
// same SIMD128 modules, so the two hosts' figures compare:
//
//   - `go test -run '^$' -bench . -benchtime 3x`: Go benchmarks, "st" the single-threaded
//     module, "mt2" the threaded one on 2 threads;
//   - the test binary with WASMIND_BENCH=1 takes bench.rs's command line (llm, tokenize, embed)
//     and prints its JSON lines (engine "wazero"): `cargo xtask bench` runs it beside the
//     wasmtime and Node hosts and its report puts the rows in the same tables.
//
// Prefill: the prompt from an empty cache, one prefill call. Decode: step and the host's
// argmax over the logits, a token at a time. Embed: embed_batch (Model2Vec) or embed per text,
// the texts placed in memory once.

// benchPrompt is xtask/src/bench.rs PROMPT (148 tokens).
const benchPrompt = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHere is a short passage. The river town woke slowly: bakers lit their ovens before dawn, fishermen checked nets by lantern light, and the first ferry sounded its horn across the fog. By noon the market square was full of voices, carts and the smell of bread. Children ran between stalls while traders argued over the price of apples, wool and copper pots. In the evening the lamps came on one by one along the quay. Write a long, detailed story that continues this passage, describing the people of the town, their work, and what happens to them over one year.<|im_end|>\n<|im_start|>assistant\n"

// bench is one Instance under measurement; fail ends the run (b.Fatal, or the JSON mode's exit).
type bench struct {
	inst *Instance
	m    *module
	fail func(...any)
}

func (b *bench) check(v int32, err error) int32 {
	if err != nil {
		b.fail(err)
	}
	return v
}

// ids places the prompt's ids (BOS and special tokens parsed, as bench.rs) in memory.
func (b *bench) ids(text string) (uint32, int) {
	ids, err := b.inst.Tokenize(context.Background(), text, TokenizeOptions{AddSpecial: true, ParseSpecial: true})
	if err != nil {
		b.fail(err)
	}
	return b.place(ids), len(ids)
}

// place copies ids into a new block.
func (b *bench) place(ids []int32) uint32 {
	p, err := b.m.alloc(context.Background(), 4*uint64(len(ids)))
	if err != nil {
		b.fail(err)
	}
	view, _ := b.m.view(p, 4*uint64(len(ids)))
	for k, id := range ids {
		binary.LittleEndian.PutUint32(view[4*k:], uint32(id))
	}
	return p
}

// vocab is the rows of the loaded model's output.
func (b *bench) vocab() int {
	info, err := b.inst.Info(context.Background())
	if err != nil || info.Model == nil {
		b.fail("model_info", err)
	}
	var v struct {
		Vocab int `json:"vocab"`
	}
	if err := json.Unmarshal(info.Model.JSON, &v); err != nil {
		b.fail(err)
	}
	return v.Vocab
}

// prefill runs n ids at p from an empty cache; the logits' address.
func (b *bench) prefill(p uint32, n int) uint32 {
	ctx := context.Background()
	b.check(b.m.checked(ctx, "reset"))
	b.check(b.m.checked(ctx, "prefill", uint64(p), uint64(n)))
	logits, err := b.m.call(ctx, "logits")
	if err != nil {
		b.fail(err)
	}
	return uint32(logits)
}

// argmax of the vocab logits at p.
func (b *bench) argmax(p uint32, vocab int) int {
	row, _ := b.m.view(p, 4*uint64(vocab))
	best, at := float32(math.Inf(-1)), 0
	for t := range vocab {
		if x := math.Float32frombits(binary.LittleEndian.Uint32(row[4*t:])); x > best {
			best, at = x, t
		}
	}
	return at
}

// step runs token t; the next logits' address.
func (b *bench) step(t int) uint32 {
	p, err := b.m.call(context.Background(), "step", uint64(t))
	if err != nil || p == 0 {
		b.fail("step", err, b.m.lastError(context.Background()))
	}
	return uint32(p)
}

// packTexts places texts back to back and their n+1 offsets; embed_batch's arguments.
func (b *bench) packTexts(texts []string) (uint32, uint32) {
	ctx := context.Background()
	t, err := b.m.put(ctx, strings.Join(texts, ""))
	if err != nil {
		b.fail(err)
	}
	offsets := make([]int32, 0, len(texts)+1)
	at := 0
	for _, text := range texts {
		offsets = append(offsets, int32(at))
		at += len(text)
	}
	return t, b.place(append(offsets, int32(at)))
}

func newBench(tb testing.TB, cfg Config) *bench {
	inst, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { inst.Close(context.Background()) })
	return &bench{inst: inst, m: inst.m, fail: tb.Fatal}
}

var benchThreads = []struct {
	name    string
	threads int
}{{"st", 1}, {"mt2", 2}}

func benchModel(tb testing.TB, threads int) *bench {
	b := newBench(tb, Config{Threads: threads})
	if err := b.inst.LoadModelFile(context.Background(), fixture(tb, smollm2), LoadOptions{Context: 2048}); err != nil {
		tb.Fatal(err)
	}
	return b
}

func BenchmarkPrefill(tb *testing.B) {
	for _, c := range benchThreads {
		tb.Run(c.name, func(tb *testing.B) {
			b := benchModel(tb, c.threads)
			p, n := b.ids(benchPrompt)
			b.prefill(p, n) // warm-up
			tb.ResetTimer()
			for range tb.N {
				b.prefill(p, n)
			}
			tb.ReportMetric(float64(n*tb.N)/tb.Elapsed().Seconds(), "tok/s")
		})
	}
}

func BenchmarkDecode(tb *testing.B) {
	for _, c := range benchThreads {
		tb.Run(c.name, func(tb *testing.B) {
			b := benchModel(tb, c.threads)
			p, n := b.ids(benchPrompt)
			vocab := b.vocab()
			logits := b.prefill(p, n)
			tb.ResetTimer()
			for k := range tb.N {
				if k > 0 && k%1024 == 0 { // stay within the context: a fresh prompt
					tb.StopTimer()
					logits = b.prefill(p, n)
					tb.StartTimer()
				}
				logits = b.step(b.argmax(logits, vocab))
			}
			tb.ReportMetric(float64(tb.N)/tb.Elapsed().Seconds(), "tok/s")
		})
	}
}

func BenchmarkEmbed(tb *testing.B) {
	texts := readTexts(tb.Fatal, fixture(tb, "reference/corpus.json"))
	for _, c := range benchThreads {
		tb.Run(c.name, func(tb *testing.B) {
			b := newBench(tb, Config{Threads: c.threads})
			if err := b.inst.LoadEmbedder(context.Background(), fixture(tb, potion)); err != nil {
				tb.Fatal(err)
			}
			run := b.embedBatch(texts, 256)
			run() // warm-up
			tb.ResetTimer()
			for range tb.N {
				run()
			}
			s := tb.Elapsed().Seconds()
			tb.ReportMetric(float64(len(texts)*tb.N)/s, "texts/s")
			tb.ReportMetric(float64(textBytes(texts)*tb.N)/s/1e6, "MB/s")
		})
	}
}

// embedBatch places texts and a (n, dim) output once; a function that runs embed_batch on them.
func (b *bench) embedBatch(texts []string, dim int) func() {
	ctx := context.Background()
	t, o := b.packTexts(texts)
	v, err := b.m.alloc(ctx, 4*uint64(dim*len(texts)))
	if err != nil {
		b.fail(err)
	}
	return func() { b.check(b.m.checked(ctx, "embed_batch", uint64(t), uint64(o), uint64(len(texts)), uint64(v))) }
}

func readTexts(fail func(...any), path string) []string {
	raw, err := os.ReadFile(path)
	var texts []string
	if err == nil {
		err = json.Unmarshal(raw, &texts)
	}
	if err != nil {
		fail(path, err)
	}
	return texts
}

func textBytes(texts []string) int {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	return n
}

// --- the JSON mode: bench.rs's command line and output ----------------------------------

func TestMain(m *testing.M) {
	if os.Getenv("WASMIND_BENCH") == "1" {
		os.Exit(benchMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// benchArgs is bench.rs's Args: `--name value` pairs after the command.
type benchArgs []string

func (a benchArgs) value(name, dflt string) string {
	if k := slices.Index(a, name); k >= 0 && k+1 < len(a) {
		return a[k+1]
	}
	return dflt
}

func (a benchArgs) number(name string, dflt float64) float64 {
	v, err := strconv.ParseFloat(a.value(name, ""), 64)
	if err != nil {
		return dflt
	}
	return v
}

func (a benchArgs) threads(dflt string) []int {
	var out []int
	for _, t := range strings.Split(a.value("--threads", dflt), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(t))
		if err != nil {
			panic(fmt.Sprintf("bad thread count %q", t))
		}
		out = append(out, n)
	}
	return out
}

// benchFail ends the JSON mode with the failure on stderr.
type benchFail struct{ msg string }

func benchMain(argv []string) (code int) {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "usage: WASMIND_BENCH=1 wasmind.test (llm | tokenize | embed) [bench.rs's options]")
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintln(os.Stderr, "bench:", r)
			code = 1
		}
	}()
	args := benchArgs(argv[1:])
	if dir := args.value("--dist", ""); dir != "" { // measure dist/'s modules, as the other hosts
		single, err1 := os.ReadFile(filepath.Join(dir, "wasmind.wasm"))
		threaded, err2 := os.ReadFile(filepath.Join(dir, "wasmind-mt.wasm"))
		if err1 != nil || err2 != nil {
			panic(fmt.Sprint(err1, err2))
		}
		singleThreadedWasm, threadedWasm = single, threaded
	}
	switch argv[0] {
	case "llm":
		benchLLM(args)
	case "tokenize":
		benchTokenize(args)
	case "embed":
		benchEmbedJSON(args)
	default:
		panic(fmt.Sprintf("unknown command %q", argv[0]))
	}
	return 0
}

// openBench starts the module bench.rs's --threads n names: 0 the single-threaded module, n >= 1
// the threaded one with n-1 helpers.
func openBench(threads int) *bench {
	inst, err := New(context.Background(), Config{Threads: max(1, threads), threaded: threads > 0})
	if err != nil {
		panic(err.Error())
	}
	fail := func(v ...any) { panic(fmt.Sprint(v...)) }
	return &bench{inst: inst, m: inst.m, fail: fail}
}

func moduleName(threads int) string {
	if threads == 0 {
		return "wasmind.wasm"
	}
	return "wasmind-mt.wasm"
}

func emit(row map[string]any) {
	row["engine"] = "wazero"
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		row["loadavg"], _ = strconv.ParseFloat(strings.Fields(string(l))[0], 64)
	}
	out, _ := json.Marshal(row)
	fmt.Println(string(out))
}

func best(xs []float64) float64 { return slices.Max(xs) }

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

func benchLLM(args benchArgs) {
	prompt, err := os.ReadFile(args.value("--prompt-file", ""))
	if err != nil {
		panic(err.Error())
	}
	var long []byte
	if path := args.value("--long-prompt-file", ""); path != "" {
		if long, err = os.ReadFile(path); err != nil {
			panic(err.Error())
		}
	}
	gen, reps := int(args.number("--gen", 128)), int(args.number("--reps", 3))
	for _, threads := range args.threads("0,1,2,4,8") {
		b := openBench(threads)
		if err := b.inst.LoadModelFile(context.Background(), args.value("--model", ""), LoadOptions{Context: 2048}); err != nil {
			panic(err.Error())
		}
		vocab := b.vocab()
		p, n := b.ids(string(prompt))
		var lp uint32
		var ln int
		if long != nil {
			lp, ln = b.ids(string(long))
		}
		var pre, dec, ttft []float64
		var generated []int
		for rep := 0; rep <= reps; rep++ { // one warm-up round, then reps timed ones
			t0 := time.Now()
			logits := b.prefill(p, n)
			prefillS := time.Since(t0).Seconds()
			genNow := gen
			if rep == 0 {
				genNow = 8
			}
			out := make([]int, 0, genNow)
			t1 := time.Now()
			for range genNow {
				next := b.argmax(logits, vocab)
				out = append(out, next)
				logits = b.step(next)
			}
			decodeS := time.Since(t1).Seconds()
			if rep == 0 {
				continue
			}
			pre, dec, generated = append(pre, float64(n)/prefillS), append(dec, float64(genNow)/decodeS), out
			if long != nil {
				t0 := time.Now()
				b.argmax(b.prefill(lp, ln), vocab)
				ttft = append(ttft, time.Since(t0).Seconds()*1000)
			}
		}
		row := map[string]any{"bench": "llm", "module": moduleName(threads), "threads": threads,
			"prompt_tokens": n, "gen_tokens": gen, "reps": reps,
			"prefill_tok_s": best(pre), "prefill_tok_s_median": median(pre),
			"decode_tok_s": best(dec), "decode_tok_s_median": median(dec),
			"prefill_all": pre, "decode_all": dec, "generated_head": generated[:min(16, len(generated))]}
		if long != nil {
			row["long_prompt_tokens"], row["ttft_ms"], row["ttft_all"] = ln, slices.Min(ttft), ttft
		}
		emit(row)
		b.inst.Close(context.Background())
	}
}

// timedPasses is bench.rs timed_passes: one warm-up pass, then passes until minSecs have gone
// by (at least 3); their durations.
func timedPasses(minSecs float64, pass func()) []float64 {
	pass()
	start := time.Now()
	var times []float64
	for len(times) < 3 || time.Since(start).Seconds() < minSecs {
		t := time.Now()
		pass()
		times = append(times, time.Since(t).Seconds())
	}
	return times
}

func rates(times []float64, texts, bytes int) map[string]any {
	fast, med := slices.Min(times), median(times)
	return map[string]any{"texts": texts, "bytes": bytes, "passes": len(times),
		"texts_per_s": float64(texts) / fast, "mb_per_s": float64(bytes) / fast / 1e6,
		"texts_per_s_median": float64(texts) / med, "mb_per_s_median": float64(bytes) / med / 1e6}
}

func benchTokenize(args benchArgs) {
	texts := readTexts(func(v ...any) { panic(fmt.Sprint(v...)) }, args.value("--texts", ""))
	b := openBench(0)
	if err := b.inst.LoadModelFile(context.Background(), args.value("--model", ""), LoadOptions{}); err != nil {
		panic(err.Error())
	}
	ctx := context.Background()
	placed := make([][2]uint32, len(texts))
	most := 0
	for k, t := range texts {
		p, err := b.m.put(ctx, t)
		if err != nil {
			panic(err.Error())
		}
		placed[k], most = [2]uint32{p, uint32(len(t))}, max(most, len(t))
	}
	cap := uint64(most + 8)
	out, err := b.m.alloc(ctx, 4*cap)
	if err != nil {
		panic(err.Error())
	}
	ids := 0
	times := timedPasses(args.number("--min-secs", 1), func() {
		ids = 0
		for _, t := range placed {
			ids += int(b.check(b.m.checked(ctx, "tokenize", uint64(t[0]), uint64(t[1]), 0, uint64(out), cap)))
		}
	})
	row := rates(times, len(texts), textBytes(texts))
	row["bench"], row["module"], row["ids"] = "tokenize", moduleName(0), ids
	emit(row)
	b.inst.Close(ctx)
}

// benchEmbedJSON: a Model2Vec folder, embed per text (single thread) and embed_batch per
// thread count; or an encoder GGUF, embed per text per thread count (bench.rs embed).
func benchEmbedJSON(args benchArgs) {
	path := args.value("--model", "")
	st, err := os.Stat(path)
	if err != nil {
		panic(err.Error())
	}
	encoder := !st.IsDir()
	texts := readTexts(func(v ...any) { panic(fmt.Sprint(v...)) }, args.value("--texts", ""))
	set, minSecs := args.value("--set", "texts"), args.number("--min-secs", 1)
	ctx := context.Background()
	for _, threads := range args.threads("0,1,2") {
		b := openBench(threads)
		if err := b.inst.LoadEmbedder(ctx, path); err != nil {
			panic(err.Error())
		}
		dim, err := b.inst.embedDim(ctx)
		if err != nil {
			panic(err.Error())
		}
		row := func(api string, times []float64) {
			r := rates(times, len(texts), textBytes(texts))
			r["bench"], r["api"], r["set"], r["module"], r["threads"] = "embed", api, set, moduleName(threads), max(1, threads)
			emit(r)
		}
		if threads <= 1 || encoder {
			t, o := b.packTexts(texts)
			offsets, _ := b.m.read(o, 4*uint64(len(texts)+1))
			v, err := b.m.alloc(ctx, 4*uint64(dim))
			if err != nil {
				panic(err.Error())
			}
			row("embed", timedPasses(minSecs, func() {
				for k := range texts {
					from, to := binary.LittleEndian.Uint32(offsets[4*k:]), binary.LittleEndian.Uint32(offsets[4*k+4:])
					b.check(b.m.checked(ctx, "embed", uint64(t+from), uint64(to-from), uint64(v)))
				}
			}))
		}
		if !encoder {
			row("embed_batch", timedPasses(minSecs, b.embedBatch(texts, dim)))
		}
		b.inst.Close(ctx)
	}
}
