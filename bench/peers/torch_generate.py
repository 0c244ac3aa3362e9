#!/usr/bin/env python3
"""Peer of bench_generate: transformers' GPT2LMHeadModel.generate (greedy, KV cache) on the
SAME GPT-2 124M folder and prompts as bench_generate (the folder bench_lm/bench_generate
write into DIR: --dir, else $GPUCORE_BENCH_LM_DIR, else $TMPDIR/gpucore-bench-lm). Prompt
row b of a (B, P) case is ids[b*P : (b+1)*P] of the token stream, as bench_generate.

Cases "B1 P64 N64 f32", "B4 P64 N64 f32", and the same in bf16 (bench_generate's names, so
gpucore-bench joins the rows). f32: the model in f32; bf16: the model's weights in bf16
(model.to(torch.bfloat16)), as ours. No end-of-sequence token (every run makes N tokens, as
ours with no eos), all-ones attention mask, torch.no_grad, eval mode.

Rows (bench contract, "peer": "torch <version>"): new_tokens_per_s, prefill_ms (generate with
max_new_tokens 1), decode_step_ms = (all - prefill) / (N - 1), decode_tokens_per_s (medians
over the runs after one warm-up) and, where DIR/ours_generate.jsonl holds bench_generate's ids
for the same case, ids_agree_vs_libgpucore: how many of row 0's new ids equal ours before the
first difference (N: all; in f32 greedy decoding on equal logits gives equal ids, unless two
logits tie within float rounding).

  torch_generate.py [--json] [--quick|--full] [--dir DIR] [--dtype f32,bf16] [--batch 1,4]
                    [--prompt 64] [--new 64] [--repeats R] [--threads N]

Prints nothing and exits 0 when torch or transformers is absent, or DIR has no model.
"""
import argparse
import json
import os
import statistics
import sys
import time

from torch_lm import NTOK, default_dir, load_peer  # beside this script: the same folder and token stream


def read_ours(path):
    """bench_generate's ids per case."""
    ids = {}
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("metric") == "ids":
                    ids[r["case"]] = r["values"]
    except (OSError, ValueError):
        pass
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="JSON lines (always; the driver's calling convention)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="3 runs after a warm-up (default)")
    size.add_argument("--full", action="store_true", help="7 runs after a warm-up")
    ap.add_argument("--dir", default=default_dir())
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--batch", default="1,4")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    a = ap.parse_args()
    repeats = a.repeats if a.repeats >= 1 else (7 if a.full else 3)
    got = load_peer("torch_generate", a.dir, a.threads)
    if got is None:
        return 0
    np, torch, transformers, tokens = got
    peer = "torch %s" % torch.__version__
    ours_ids = read_ours(os.path.join(a.dir, "ours_generate.jsonl"))

    def row(case, metric, value, unit):
        print(json.dumps({"bench": "generate", "case": case, "device": "cpu", "metric": metric, "value": value,
                          "unit": unit, "peer": peer, "impl": "transformers %s GPT2LMHeadModel.generate"
                          % transformers.__version__}), flush=True)

    P, N = a.prompt, a.new
    for dt in a.dtype.split(","):
        model = transformers.GPT2LMHeadModel.from_pretrained(a.dir, torch_dtype=torch.float32).eval()
        if dt == "bf16":
            model = model.to(torch.bfloat16)
        model.generation_config.eos_token_id = None  # every run makes N tokens
        model.generation_config.pad_token_id = 0
        for B in (int(b) for b in a.batch.split(",")):
            case = "B%d P%d N%d %s" % (B, P, N, dt)
            ids = torch.from_numpy(tokens[np.arange(B * P) % NTOK].reshape(B, P).copy())
            mask = torch.ones_like(ids)

            def run(n):
                t0 = time.perf_counter()
                with torch.no_grad():
                    out = model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, use_cache=True)
                ms = (time.perf_counter() - t0) * 1e3
                assert out.shape[1] == P + n, "generate stopped early (%d of %d new tokens)" % (out.shape[1] - P, n)
                return ms, out

            _, out = run(N)  # warm-up
            pre, full = [], []
            for r in range(repeats):
                pre.append(run(1)[0])
                ms, out = run(N)
                full.append(ms)
                print("torch_generate: %s run %d: prefill %.1f ms, all %.1f ms" % (case, r, pre[-1], ms),
                      file=sys.stderr, flush=True)
            p, t = statistics.median(pre), statistics.median(full)
            row(case, "new_tokens_per_s", B * N / (t * 1e-3), "tokens/s")
            row(case, "prefill_ms", p, "ms")
            if N > 1:
                step = (t - p) / (N - 1)
                row(case, "decode_step_ms", step, "ms")
                row(case, "decode_tokens_per_s", B / (step * 1e-3), "tokens/s")
            mine = ours_ids.get(case)
            if mine and len(mine) == N:
                theirs = out[0, P:].tolist()
                agree = next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y), N)
                row(case, "ids_agree_vs_libgpucore", agree, "tokens")
        del model
    return 0


if __name__ == "__main__":
    sys.exit(main())
