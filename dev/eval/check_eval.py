#!/usr/bin/env python3
"""check_eval.py: the GPU checks of the held-out evaluation and the Hugging Face export (dev/eval/device_check.sh
runs them after training a small model). Each check prints PASS or FAIL with its numbers; the exit status
is 1 when any failed.

  hf:   the exported model in transformers against train_gpt_fp4 (a BF16 run):
        1. --eval-only on the final checkpoint gives the training run's final in-loop numbers;
        2. logits: transformers (FP32) on the batch the trainer dumped (--eval-dump) against the
           trainer's BF16 logits, within BF16 tolerance (relative L2 error < 2%);
        3. HellaSwag and LAMBADA computed in transformers (scripts/eval_hf.py, the same token files, rows
           and scoring) agree with the trainer's in-loop numbers within 0.2 points (LAMBADA perplexity
           within 2%), with the per-row losses compared too (how many decisions flip, and why);
        4. generation: greedy decoding with the KV cache (model.generate) equals greedy decoding
           without it, sampling runs, and the exported tokenizer decodes the text.
  fp4:  an FP4 (nvfp4) run with in-loop evaluations in BF16 (--eval-precision bf16, which switches the
        model's recipe to BF16 and back) trains exactly as the same run without evaluations (both
        with LLMC_ATTENTION=own, which is bitwise deterministic), and its evaluations are sane.

  python3 dev/eval/check_eval.py hf --hf DIR --train-log RUN/log.jsonl --eval-log RUN/eval.jsonl --dump DUMP
  python3 dev/eval/check_eval.py fp4 --with-eval RUN1/log.jsonl --without-eval RUN2/log.jsonl
"""
import argparse
import json
import math
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "dev", "data"))
from eval_hf import EOT, TASK_FILES, evaluate_task, load_model   # noqa: E402
from eval_prepro import read_eval_file   # noqa: E402

failures = []


def report(ok, what, detail):
    print(f"{'PASS' if ok else 'FAIL'} {what}: {detail}", flush=True)
    if not ok:
        failures.append(what)


def read_log(path, kind):
    out = []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("type") == kind:
                out.append(r)
    return out


def tasks_of(line):
    return [t for t in TASK_FILES if f"{t}_acc" in line]


def read_rows(path):
    """The trainer's <task>_rows.tsv: {(item, candidate): (loss_sum, tokens, hit)}."""
    rows = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or line.startswith("item"):
                continue
            i, c, loss, n, hit, _ = line.split("\t")
            rows[(int(i), int(c))] = (float(loss), int(n), int(hit))
    return rows


def check_logits(model, dump, device):
    import torch
    with open(os.path.join(dump, "logits.bin"), "rb") as f:
        rows, seq, V = np.frombuffer(f.read(12), dtype="<i4")
        toks = np.frombuffer(f.read(4 * rows * seq), dtype="<i4").reshape(rows, seq)
        bits = np.frombuffer(f.read(2 * rows * seq * V), dtype="<u2").reshape(rows, seq, V)
    ours = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    with torch.no_grad():
        theirs = model(torch.tensor(toks, dtype=torch.long, device=device)).logits[..., :V].double().cpu().numpy()
    rel = np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)
    maxabs = np.abs(ours - theirs).max()
    # the loss of each position's next token, as the evaluation uses the logits
    def nll(lg):
        m = lg.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(lg - m).sum(-1, keepdims=True)))[..., 0]
        nxt = toks[:, 1:]
        return lse[:, :-1] - np.take_along_axis(lg[:, :-1], nxt[..., None], -1)[..., 0]
    dl = np.abs(nll(ours) - nll(theirs))
    agree = (ours.argmax(-1) == theirs.argmax(-1)).mean()
    report(rel < 0.02, f"logits of {rows} rows x {seq} positions, transformers FP32 vs train_gpt_fp4 BF16",
           f"relative L2 error {rel:.4f} (limit 0.02), max |diff| {maxabs:.4f} (max |logit| {np.abs(theirs).max():.2f}), "
           f"next-token loss |diff| mean {dl.mean():.4f} max {dl.max():.4f}, argmax agrees at {100 * agree:.2f}% of positions")


def check_tasks(model, final, dump, device):
    for name in tasks_of(final):
        res, table = evaluate_task(model, name, os.path.join(REPO, "data", "eval", TASK_FILES[name]),
                                   final[f"{name}_seq"], int(final[f"{name}_items"]), 256, device, __import__("torch").float32)
        ours, theirs = final[f"{name}_acc"], res[f"{name}_acc"]
        diff = 100 * abs(ours - theirs)
        detail = f"train_gpt_fp4 {100 * ours:.2f}%, transformers {100 * theirs:.2f}% ({diff:.2f} points, limit 0.2)"
        rows_path = os.path.join(dump, f"{name}_rows.tsv")
        if os.path.exists(rows_path):   # per row: where the two differ, and whether that moved a decision
            trainer = read_rows(rows_path)
            mean_diff = [abs(trainer[(i, c)][0] / n - loss / n) for i, c, loss, n, _, _ in table if (i, c) in trainer]
            hit_diff = sum(trainer[(i, c)][2] != hit for i, c, _, _, hit, _ in table if (i, c) in trainer)
            detail += (f"; per-candidate mean loss |diff| mean {np.mean(mean_diff):.4f} max {np.max(mean_diff):.4f} "
                       f"over {len(mean_diff)} rows")
            if name == "lambada":
                detail += f", greedy hits that differ: {hit_diff}"
            else:
                flips = count_flips(name, trainer, table)
                detail += f", decisions that differ: {flips}"
        report(diff <= 0.2, f"{name} accuracy", detail)
        if f"{name}_ppl" in final:
            a, b = final[f"{name}_ppl"], res[f"{name}_ppl"]
            ok = a is not None and math.isfinite(b) and abs(a - b) / b < 0.02
            report(ok, f"{name} perplexity", f"train_gpt_fp4 {a}, transformers {b:.3f} (limit 2% apart)")


def count_flips(name, trainer, table):
    """Multiple-choice items whose winner differs between the trainer's rows and transformers'."""
    _, items = read_eval_file(os.path.join(REPO, "data", "eval", TASK_FILES[name]))
    ours, theirs = {}, {}
    for i, c, loss, n, _, _ in table:
        if (i, c) in trainer:
            ours.setdefault(i, []).append(trainer[(i, c)][0] / n)
            theirs.setdefault(i, []).append(loss / n)
    return sum(int(np.argmin(ours[i]) != np.argmin(theirs[i])) for i in ours if len(ours[i]) == len(items[i][1]))


def check_generation(model, hf_dir, device):
    import torch
    _, items = read_eval_file(os.path.join(REPO, "data", "eval", TASK_FILES["hellaswag"]))
    prompt = torch.tensor([items[0][0][:32]], dtype=torch.long, device=device)
    n_new = 24
    with torch.no_grad():
        # (no min_new_tokens: it would mask <|endoftext|> and so differ from plain greedy decoding)
        cached = model.generate(prompt, max_new_tokens=n_new, do_sample=False, pad_token_id=EOT)
        ids, close = prompt, 0
        for _ in range(n_new):   # greedy without a KV cache: the whole sequence each time
            logits = model(ids, use_cache=False).logits[0, -1]
            top2 = torch.topk(logits, 2).values
            close += bool(top2[0] - top2[1] < 1e-4)
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
        torch.manual_seed(0)
        sampled = model.generate(prompt, max_new_tokens=n_new, do_sample=True, top_k=40, pad_token_id=EOT)
    # generate stops early at <|endoftext|>: compare what it produced
    same = torch.equal(cached[0], ids[0, :cached.shape[1]]) and cached.shape[1] > prompt.shape[1]
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(hf_dir)
        text = tok.decode(cached[0, prompt.shape[1]:])
        sample_text = tok.decode(sampled[0, prompt.shape[1]:])
        tok_ok = isinstance(text, str) and len(text) > 0
    except Exception as e:   # noqa: BLE001 (report any tokenizer problem as a failure, with its message)
        text, sample_text, tok_ok = f"(tokenizer failed: {e})", "", False
    report(same or close > 0, "greedy generation with the KV cache equals it without",
           f"{cached.shape[1] - prompt.shape[1]} tokens, {'identical' if same else f'differ (near-ties on the way: {close})'}: "
           f"{text!r}")
    report(prompt.shape[1] < sampled.shape[1] <= prompt.shape[1] + n_new, "sampling (top-k 40)", f"{sample_text!r}")
    report(tok_ok, "the exported tokenizer decodes", "AutoTokenizer.from_pretrained on the export directory")


def cmd_hf(args):
    import torch
    finals = read_log(args.train_log, "eval")
    evals = read_log(args.eval_log, "eval")
    if not finals or not evals:
        report(False, "eval lines", f"none in {args.train_log if not finals else args.eval_log}")
        return
    final = max(finals, key=lambda r: r["step"])   # the last weights, the ones the final checkpoint holds
    only = evals[-1]
    same = all(abs(final[k] - only[k]) < 1e-9 for t in tasks_of(final) for k in (f"{t}_acc",)) and \
        final["step"] == only["step"]
    report(same, "--eval-only on the final checkpoint reproduces the final in-loop evaluation",
           ", ".join(f"{t} {100 * final[t + '_acc']:.2f}% / {100 * only[t + '_acc']:.2f}%" for t in tasks_of(final)) +
           f" (step {final['step']} / {only['step']})")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(args.hf, device)
    print(f"transformers model from {args.hf} on {device}: {sum(p.numel() for p in model.parameters())} parameters")
    check_logits(model, args.dump, device)
    check_tasks(model, final, args.dump, device)
    check_generation(model, args.hf, device)


def cmd_fp4(args):
    a = {r["step"]: r["loss"] for r in read_log(args.with_eval, "train")}
    b = {r["step"]: r["loss"] for r in read_log(args.without_eval, "train")}
    same = a == b and len(a) > 0
    first = next((s for s in sorted(a) if a.get(s) != b.get(s)), None)
    report(same, "training with in-loop BF16 evaluations equals training without (nvfp4, bit for bit)",
           f"{len(a)} steps" + ("" if same else f"; first difference at step {first}: {a.get(first)} vs {b.get(first)}"))
    evals = read_log(args.with_eval, "eval")
    sane = len(evals) >= 2 and all(0.10 < e["hellaswag_acc"] < 0.40 and e["precision"] == "bf16" for e in evals)
    report(sane, "in-loop evaluations of the nvfp4 run",
           "; ".join(f"step {e['step']}: hellaswag {100 * e['hellaswag_acc']:.2f}% of {e['hellaswag_items']}" for e in evals))
    if args.eval_logs:
        lines = [read_log(p, "eval")[-1] for p in args.eval_logs]
        ok = all(0.10 < e["hellaswag_acc"] < 0.40 for e in lines)
        report(ok, "--eval-only of the nvfp4 checkpoint in each precision",
               "; ".join(f"{e['precision']}: hellaswag {100 * e['hellaswag_acc']:.2f}%, lambada "
                         f"{100 * e.get('lambada_acc', float('nan')):.2f}% ppl {e.get('lambada_ppl')}" for e in lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hf")
    h.add_argument("--hf", required=True, help="the exported model directory")
    h.add_argument("--train-log", required=True, help="log.jsonl of the BF16 training run (its in-loop eval lines)")
    h.add_argument("--eval-log", required=True, help="eval.jsonl of train_gpt_fp4 --eval-only on its final checkpoint")
    h.add_argument("--dump", required=True, help="the --eval-dump directory of that --eval-only run")
    f = sub.add_parser("fp4")
    f.add_argument("--with-eval", required=True)
    f.add_argument("--without-eval", required=True)
    f.add_argument("--eval-logs", nargs="*", default=[], help="eval.jsonl files of --eval-only runs on its checkpoint")
    args = ap.parse_args()
    (cmd_hf if args.cmd == "hf" else cmd_fp4)(args)
    print(f"check_eval {args.cmd}: {'all passed' if not failures else 'FAILED: ' + ', '.join(failures)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
