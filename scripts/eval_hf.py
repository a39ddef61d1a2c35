#!/usr/bin/env python3
"""eval_hf.py: HellaSwag and LAMBADA for a Hugging Face causal LM, scored exactly as train_gpt_fp4 does.

  python3 scripts/eval_hf.py hf/enwiki_nvfp4                     # a model exported by scripts/export_hf.py
  python3 scripts/eval_hf.py /path/to/gpt2 --items 1000          # any GPT-2-like model directory

Reads the same token files as the trainer (data/eval/*.bin, written by dev/data/eval_prepro.py), so
both score the same token sequences, and lays out the same rows (llmc/run/eval_tasks.h): context, then
candidate; a context longer than the row loses its oldest tokens (--seq-len: the trainer's row length,
which its log line gives as <task>_seq; by default the longest item rounded up to 64, at most the
model's positions). Scoring:
  HellaSwag: the ending with the lowest mean per-token loss wins (the first on a tie); accuracy.
  LAMBADA:   correct when every token of the last word is the argmax of its logits; perplexity =
             exp(summed loss of the word, averaged over passages).
Prints one line per task and, with --json, writes the numbers; --dump DIR writes every row's summed
loss, token count and greedy hit as <task>_rows.tsv, the format of train_gpt_fp4 --eval-dump.
Needs numpy, torch and transformers (requirements.txt; torch and transformers are its optional part).
Expected failures (a missing package, model directory or token file, a directory given for a file) end in
one line "error: ..." on stderr and exit status 1.
"""
import argparse
import json
import math
import os
import sys
import time

try:
    import numpy as np
except ImportError:
    print("error: scripts/eval_hf.py needs numpy: python3 -m pip install -r requirements.txt", file=sys.stderr)
    sys.exit(1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "dev", "data"))
from eval_prepro import KIND_CHOICE, read_eval_file   # noqa: E402

EOT = 50256
TASK_FILES = {"hellaswag": "hellaswag_val.bin", "lambada": "lambada_test.bin"}


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def missing_packages(names):
    """The names of those packages that do not import (a broken install counts as missing)."""
    missing = []
    for name in names:
        try:
            __import__(name)
        except (ImportError, OSError):
            missing.append(name)
    return missing


def check_model_dir(path):
    """One error line for a path that cannot be a Hugging Face model directory."""
    if not os.path.exists(path):
        die(f"model directory {path} not found; give a Hugging Face model directory "
            f"(scripts/export_hf.py writes one: python3 scripts/export_hf.py CKPT hf/NAME)")
    if not os.path.isdir(path):
        die(f"{path} is not a directory; give a Hugging Face model directory (config.json and the weights), "
            f"e.g. one written by scripts/export_hf.py")
    if not os.path.isfile(os.path.join(path, "config.json")):
        die(f"{path} holds no config.json: not a Hugging Face model directory (scripts/export_hf.py writes one)")


def row_of(ctx, cand, seq):
    """(tokens, first, n): the row's tokens (unpadded), the position that predicts the candidate's first
    token, and its token count; as eval_row in llmc/eval_tasks.h."""
    keep = min(len(ctx), seq - len(cand))
    if keep < 1:
        raise ValueError(f"a candidate of {len(cand)} tokens does not fit a row of {seq}")
    toks = list(ctx[len(ctx) - keep:]) + list(cand)
    return toks, keep - 1, len(cand), keep < len(ctx)


def default_seq(items, n_positions):
    longest = max(len(c) + max(len(x) for x in cs) for c, cs, _ in items)
    return min(-(-longest // 64) * 64, n_positions)


def score_rows(model, rows, batch, device, dtype):
    """rows: [(tokens, first, n)] -> (summed loss, greedy hit) per row, in float64 from float32 logits.
    Each batch runs padded to its longest row; causal attention makes the padding after a row irrelevant."""
    import torch
    losses = np.zeros(len(rows))
    hits = np.zeros(len(rows), dtype=bool)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))   # similar lengths together: less padding
    head = model.get_output_embeddings()
    for b0 in range(0, len(order), batch):
        idx = order[b0:b0 + batch]
        width = max(len(rows[i][0]) for i in idx)
        ids = torch.full((len(idx), width), EOT, dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, :len(rows[i][0])] = torch.tensor(rows[i][0])
        ids = ids.to(device)
        with torch.no_grad(), torch.autocast(device_type=device.split(":")[0], dtype=dtype, enabled=dtype != torch.float32):
            hidden = model.base_model(input_ids=ids).last_hidden_state
        # the LM head only where a candidate token is predicted, in float32
        sel_r, sel_t, tgt = [], [], []
        for r, i in enumerate(idx):
            toks, first, n, _ = rows[i]
            sel_r += [r] * n
            sel_t += list(range(first, first + n))
            tgt += toks[first + 1:first + 1 + n]
        h = hidden[torch.tensor(sel_r, device=device), torch.tensor(sel_t, device=device)].float()
        with torch.no_grad():
            logits = torch.nn.functional.linear(h, head.weight.float())
            if head.bias is not None:
                logits = logits + head.bias.float()
            vocab = model.config.vocab_size
            logits = logits[:, :vocab]
            tg = torch.tensor(tgt, device=device)
            tok_loss = (torch.logsumexp(logits, dim=-1) - logits.gather(1, tg[:, None])[:, 0]).double().cpu().numpy()
            tok_hit = (logits.argmax(dim=-1) == tg).cpu().numpy()
        k = 0
        for i in idx:
            n = rows[i][2]
            losses[i] = tok_loss[k:k + n].sum()
            hits[i] = bool(tok_hit[k:k + n].all())
            k += n
    return losses, hits


def evaluate_task(model, name, path, seq, items_limit, batch, device, dtype):
    """-> dict of the task's numbers, and the per-row table (item, candidate, loss, tokens, hit, truncated)."""
    kind, items = read_eval_file(path)
    if seq is None:   # from the whole file, as the trainer's eval_shape takes it from the file's header
        # (GPT-2 configs call the context length n_positions, Llama ones max_position_embeddings)
        cfg = model.config
        positions = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 1024
        seq = default_seq(items, positions)
    if items_limit:
        items = items[:items_limit]
    rows, meta = [], []
    for i, (ctx, cands, label) in enumerate(items):
        for c, cand in enumerate(cands):
            toks, first, n, trunc = row_of(ctx, cand, seq)
            rows.append((toks, first, n, trunc))
            meta.append((i, c))
    t0 = time.time()
    losses, hits = score_rows(model, rows, batch, device, dtype)
    correct = loss_sum = 0.0
    truncated = 0
    k = 0
    for i, (ctx, cands, label) in enumerate(items):
        nc = len(cands)
        mean = [losses[k + c] / rows[k + c][2] for c in range(nc)]
        if kind == KIND_CHOICE:
            winner = 0
            for c in range(1, nc):   # the first of equals wins, as eval_choice_winner does
                if mean[c] < mean[winner]:
                    winner = c
            correct += winner == label
        else:
            correct += bool(hits[k + label])
        loss_sum += losses[k + label]
        truncated += any(rows[k + c][3] for c in range(nc))
        k += nc
    res = {f"{name}_acc": correct / len(items), f"{name}_items": len(items), f"{name}_seq": seq,
           "seconds": time.time() - t0}
    if kind != KIND_CHOICE:
        res[f"{name}_ppl"] = math.exp(loss_sum / len(items))
    if truncated:
        res[f"{name}_truncated"] = truncated
    table = [(i, c, losses[k], rows[k][2], int(hits[k]), int(rows[k][3])) for k, (i, c) in enumerate(meta)]
    return res, table


def write_rows(path, name, seq, table):
    with open(path, "w") as f:
        f.write(f"# {name} seq {seq} (scripts/eval_hf.py)\nitem\tcandidate\tloss_sum\ttokens\thit\ttruncated\n")
        for i, c, loss, n, hit, trunc in table:
            f.write(f"{i}\t{c}\t{loss:.9g}\t{n}\t{hit}\t{trunc}\n")


def load_model(path, device):
    """The model in float32 (whatever its files hold), in eval mode."""
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path).float().to(device).eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("model", help="a Hugging Face model directory (scripts/export_hf.py writes one)")
    ap.add_argument("--tasks", default="hellaswag,lambada")
    ap.add_argument("--data_dir", default=os.path.join(REPO, "data", "eval"), help="the token files")
    ap.add_argument("--items", type=int, default=0, help="the first N items of each task (0: all)")
    ap.add_argument("--seq-len", type=int, default=None, help="row length (default: the longest item rounded up to 64)")
    ap.add_argument("--batch", type=int, default=128, help="rows per forward")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="the transformer's compute (autocast); the LM head and the losses are float32")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    ap.add_argument("--dump", default=None, help="directory for <task>_rows.tsv")
    args = ap.parse_args()
    missing = missing_packages(["torch", "transformers"])
    if missing:
        die(f"scripts/eval_hf.py needs torch and transformers ({' and '.join(missing)} missing here): "
            f"python3 -m pip install torch transformers (the optional part of requirements.txt)")
    tasks = [t for t in args.tasks.split(",") if t]
    for name in tasks:
        if name not in TASK_FILES:
            die(f"unknown task '{name}' in --tasks (hellaswag, lambada)")
    if not tasks:
        die("--tasks names no task (hellaswag, lambada)")
    for name in tasks:
        path = os.path.join(args.data_dir, TASK_FILES[name])
        if os.path.isdir(path):
            die(f"{path} is a directory, not an eval token file")
        if not os.path.isfile(path):
            die(f"{path} not found; build it with python3 dev/data/eval_prepro.py, or pass --data_dir "
                f"(the folder of hellaswag_val.bin and lambada_test.bin; the repo ships them in data/eval)")
    if args.items < 0 or args.batch < 1 or (args.seq_len is not None and args.seq_len < 2):
        die("--items must be 0 or more, --batch 1 or more, --seq-len 2 or more")
    if args.json and os.path.isdir(args.json):
        die(f"--json {args.json} is a directory; give a file path")
    if args.dump and os.path.exists(args.dump) and not os.path.isdir(args.dump):
        die(f"--dump {args.dump} exists and is not a directory")
    check_model_dir(args.model)

    import torch
    device = args.device if torch.cuda.is_available() or not args.device.startswith("cuda") else "cpu"
    dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
    try:
        model = load_model(args.model, device)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        die(f"{args.model}: transformers cannot load the model: {first}")
    out = {"model": args.model, "dtype": args.dtype}
    for name in tasks:
        try:
            res, table = evaluate_task(model, name, os.path.join(args.data_dir, TASK_FILES[name]), args.seq_len,
                                       args.items, args.batch, device, dtype)
        except ValueError as e:   # a damaged token file, or a candidate longer than --seq-len
            die(str(e))
        out.update({k: v for k, v in res.items() if k != "seconds"})
        line = f"{name}: accuracy {100 * res[name + '_acc']:.2f}% of {res[name + '_items']}"
        if name + "_ppl" in res:
            line += f", perplexity {res[name + '_ppl']:.2f}"
        print(f"{line} (rows of {res[name + '_seq']} tokens, {res['seconds']:.1f} s)")
        if args.dump:
            try:
                os.makedirs(args.dump, exist_ok=True)
                write_rows(os.path.join(args.dump, f"{name}_rows.tsv"), name, res[name + "_seq"], table)
            except OSError as e:
                die(f"{e.filename or args.dump}: {e.strerror or e}")
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
        except OSError as e:
            die(f"{args.json}: {e.strerror or e}")


if __name__ == "__main__":
    main()
