#!/usr/bin/env python3
"""check_export.py: a Hugging Face export (scripts/export_hf.py) in transformers against its checkpoint and, given
a --eval-dump directory, against the trainer's own logits. GPT-2 and Llama alike (docs/MODELS.md).

  python3 dev/eval/check_export.py CKPT EXPORT_DIR DUMP_DIR          # on the GPU machine (dev/eval/device_check.sh)
  python3 dev/eval/check_export.py CKPT EXPORT_DIR                   # no trainer run: checks 1-4 only (CPU is fine)
  python3 dev/eval/check_export.py CKPT EXPORT_DIR --pair CKPT2 DIR2 ...   # more exports in one process (checks 1-4)

where DUMP_DIR comes from
  ./train_gpt_fp4 --eval-only --init-from CKPT --eval-precision bf16 --eval-dump DUMP_DIR -j VAL --batch-size R \\
      --seq-len T --val-batches 1 --out-dir RUN          # RUN/eval.jsonl: the val_loss of check 5 (--eval-log)

The export is loaded with AutoModelForCausalLM (float32, attn_implementation "eager"), and checked:
  1. loading:   no missing, unexpected or mismatched tensors (a missing one would be silently random);
  2. config:    the class and every shape field, the RMSNorm epsilon and RoPE theta as transformers reads them,
                agree with the checkpoint's header;
  3. weights:   every parameter transformers holds equals the checkpoint's BF16 value it was exported from (the
                LM head included: the checkpoint's lm_head, or wte when tied), exactly;
  4. reference: transformers' logits on R rows of T held-out tokens (--tokens, an llm.c shard: 256 int32 header,
                then uint16 tokens; row r = tokens [rT, rT + T], the rows and targets the trainer's validation
                takes) against an independent float64 forward of docs/MODELS.md from the checkpoint's own tensors
                (not the export's): relative L2 error < 1e-4, and the mean loss of the rows within 1e-4;
  5. val loss:  with --eval-log RUN/eval.jsonl (or --val-loss X): transformers' mean loss of those rows within 1%
                of the trainer's val_loss, which must be of the same rows (--seq-len T, --batch-size B and
                --val-batches R / B: the first R rows) in BF16 (the validation runs in the checkpoint's recipe);
  with DUMP_DIR (logits.bin: int32 rows, seq, V; int32 tokens[rows][seq]; BF16 logits[rows][seq][V], the first
  rows of the first batch of the first held-out task, as train_gpt_fp4.cu's held_out_dump_logits writes them):
  6. logits:    transformers (FP32) on the dumped tokens against the trainer's BF16 logits: relative L2 error
                < 2e-2 (BF16 activations), with the max |diff|, the argmax agreement and the float64 reference's
                own distance to the trainer's (so a failure says whose it is);
  7. row loss:  each dumped row's mean next-token loss from the trainer's logits and from transformers', within
                0.02 + 0.5%.
One line per check (PASS or FAIL, with its numbers); the last line is "check_export: N passed, N failed"; the exit
status is 1 when any failed.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import export_hf as ex   # noqa: E402  (the checkpoint reader and the export's tensor mapping)

SHARD_MAGIC, SHARD_HEADER_INTS = 20240520, 256
counts = {"passed": 0, "failed": 0}


def report(ok, what, detail):
    print(f"{'PASS' if ok else 'FAIL'} {what}: {detail}", flush=True)
    counts["passed" if ok else "failed"] += 1


def finish():
    print(f"check_export: {counts['passed']} passed, {counts['failed']} failed", flush=True)
    sys.exit(1 if counts["failed"] else 0)


def bf16_to_f64(bits):
    return (np.ascontiguousarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ---------------------------------------------------------------------------------------------------------------
# The float64 reference: docs/MODELS.md from the checkpoint's tensors, written here without transformers.

def rope_table(T, HS, theta):
    """cos, sin (T, HS/2): angle t * theta^(-2i/HS) in double, rounded to float (the trainer's rope_table_fill)."""
    i = np.arange(HS // 2, dtype=np.float64)
    ang = np.arange(T, dtype=np.float64)[:, None] * np.power(np.float64(theta), -2.0 * i / HS)[None, :]
    return np.cos(ang).astype(np.float32).astype(np.float64), np.sin(ang).astype(np.float32).astype(np.float64)


def reference_params(params, device):
    """The checkpoint's tensors as float64 torch tensors on the device."""
    import torch
    return {k: torch.from_numpy(bf16_to_f64(v)).to(device) for k, v in params.items()}


def reference_logits(m, p, x, device):
    """(B, T, V) float64 logits of token rows x (B, T) by the trainer's network as the spec defines it, from the
    checkpoint's tensors p (reference_params)."""
    import torch
    B, T = x.shape
    L, NH, C, V = m["L"], m["NH"], m["C"], m["V"]
    HS = C // NH
    ids = torch.as_tensor(x, dtype=torch.long, device=device)
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()

    def attention(q, k, v):   # (B, heads, T, HS) each
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        return (att @ v).transpose(1, 2).reshape(B, T, C)

    if m["arch"] == ex.ARCH_GPT2:
        def layernorm(h, w, b):
            mu = h.mean(-1, keepdim=True)
            var = ((h - mu) ** 2).mean(-1, keepdim=True)
            return (h - mu) / torch.sqrt(var + 1e-5) * w + b

        h = p["wte"][ids] + p["wpe"][:T][None]
        for l in range(L):
            qkv = layernorm(h, p["ln1w"][l], p["ln1b"][l]) @ p["qkvw"][l].T + p["qkvb"][l]
            q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=-1))
            h = h + attention(q, k, v) @ p["attprojw"][l].T + p["attprojb"][l]
            f = layernorm(h, p["ln2w"][l], p["ln2b"][l]) @ p["fcw"][l].T + p["fcb"][l]
            f = 0.5 * f * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (f + 0.044715 * f ** 3)))
            h = h + f @ p["fcprojw"][l].T + p["fcprojb"][l]
        h = layernorm(h, p["lnfw"], p["lnfb"])
        return h @ p["wte"][:V].T

    KVH, H, eps = m["KVH"], m["H"], m["eps"]
    cos, sin = (torch.from_numpy(a).to(device) for a in rope_table(T, HS, m["theta"]))

    def rmsnorm(h, w):
        return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * w

    def rope(t):   # rotate halves: element i pairs with i + HS/2
        a, b = t[..., :HS // 2], t[..., HS // 2:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    h = p["wte"][ids]
    for l in range(L):
        qkv = rmsnorm(h, p["ln1w"][l]) @ p["qkvw"][l].T    # all q heads, then all k heads, then all v heads
        q, k, v = qkv.split([NH * HS, KVH * HS, KVH * HS], dim=-1)
        q = rope(q.view(B, T, NH, HS).transpose(1, 2))
        k = rope(k.view(B, T, KVH, HS).transpose(1, 2))
        v = v.view(B, T, KVH, HS).transpose(1, 2)
        k, v = k.repeat_interleave(NH // KVH, dim=1), v.repeat_interleave(NH // KVH, dim=1)   # head h: kv h // (NH/KVH)
        h = h + attention(q, k, v) @ p["attprojw"][l].T
        gu = rmsnorm(h, p["ln2w"][l]) @ p["fcw"][l].T     # gate rows [0, H), up rows [H, 2H)
        g, u = gu[..., :H], gu[..., H:]
        h = h + (g / (1.0 + torch.exp(-g)) * u) @ p["fcprojw"][l].T
    h = rmsnorm(h, p["lnfw"])
    return h @ p["wte" if m["tied"] else "lm_head"][:V].T


# ---------------------------------------------------------------------------------------------------------------

def token_loss(logits, targets):
    """(rows, n) float64: -log softmax(logits)[target] per position (logits float64 (rows, n, V))."""
    mx = logits.max(-1, keepdims=True)
    lse = (mx + np.log(np.exp(logits - mx).sum(-1, keepdims=True)))[..., 0]
    return lse - np.take_along_axis(logits, targets[..., None], -1)[..., 0]


def next_token_loss(logits, toks):
    """(rows, seq - 1): the loss of each position's next token within the rows toks (rows, seq)."""
    return token_loss(logits[:, :-1], toks[:, 1:])


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def read_rows(path, rows, T, V):
    """(rows, T + 1) int64 from an llm.c shard: row r = tokens [rT, rT + T] (the trainer's validation rows and their
    targets); None with a note when the file is missing; tokens past a (test) model's vocabulary taken modulo V."""
    if not path or not os.path.exists(path):
        print(f"note: no token file {path!r}; the held-out rows are random tokens (seed 0)")
        return np.random.default_rng(0).integers(0, V, size=(rows, T + 1))
    with open(path, "rb") as f:
        head = np.frombuffer(f.read(4 * SHARD_HEADER_INTS), dtype="<i4")
        if len(head) != SHARD_HEADER_INTS or head[0] != SHARD_MAGIC:
            ex.die(f"'{path}' is not an llm.c token shard (magic {head[0] if len(head) else None}, want {SHARD_MAGIC})")
        n = int(head[2])
        need = rows * T + 1
        if n < need:
            ex.die(f"'{path}' holds {n} tokens; {rows} rows of {T} need {need}")
        toks = np.frombuffer(f.read(2 * need), dtype="<u2").astype(np.int64)
    if toks.max() >= V:
        print(f"note: {path} holds token ids up to {toks.max()}, past this model's vocabulary of {V}: taken modulo {V}")
        toks = toks % V
    return np.stack([toks[r * T:r * T + T + 1] for r in range(rows)])


def read_dump(dump):
    path = os.path.join(dump, "logits.bin")
    if not os.path.exists(path):
        ex.die(f"no {path}: run train_gpt_fp4 --eval-only --init-from CKPT --eval-precision bf16 --eval-dump {dump}")
    with open(path, "rb") as f:
        rows, seq, V = (int(v) for v in np.frombuffer(f.read(12), dtype="<i4"))
        toks = np.frombuffer(f.read(4 * rows * seq), dtype="<i4").reshape(rows, seq).astype(np.int64)
        bits = np.frombuffer(f.read(2 * rows * seq * V), dtype="<u2")
    if bits.size != rows * seq * V:
        ex.die(f"{path} is truncated: {rows} rows x {seq} positions x {V} logits announced")
    return toks, bf16_to_f64(bits.reshape(rows, seq, V))


def val_loss_of(args):
    if args.val_loss is not None:
        return args.val_loss, "--val-loss"
    if not args.eval_log:
        return None, None
    found = None
    with open(args.eval_log) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("val_loss") is not None:
                found = float(r["val_loss"])
    if found is None:
        ex.die(f"{args.eval_log}: no line with a val_loss (run --eval-only with -j VAL)")
    return found, args.eval_log


def load_export(path, device):
    import torch
    from transformers import AutoModelForCausalLM
    kw = {"attn_implementation": "eager", "output_loading_info": True}
    major, minor = (int(v) for v in transformers_version().split(".")[:2])
    kw["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = torch.float32   # (torch_dtype before 4.56)
    model, info = AutoModelForCausalLM.from_pretrained(path, **kw)
    return model.float().to(device).eval(), info


def check_loading(m, info):
    missing = [k for k in info.get("missing_keys", []) if not (k == "lm_head.weight" and (m["arch"] == ex.ARCH_GPT2 or
                                                                                         m["tied"]))]
    bad = {"missing": missing, "unexpected": list(info.get("unexpected_keys", [])),
           "mismatched": [str(k) for k in info.get("mismatched_keys", [])], "errors": list(info.get("error_msgs", []))}
    report(not any(bad.values()), "transformers loads every tensor of the export",
           "; ".join(f"{k}: {v}" for k, v in bad.items() if v) or "no missing, unexpected or mismatched tensors")


def check_config(m, model):
    c = model.config
    if m["arch"] == ex.ARCH_GPT2:
        want = {"class": "GPT2LMHeadModel", "n_layer": m["L"], "n_head": m["NH"], "n_embd": m["C"],
                "vocab_size": m["V"], "n_positions": m["maxT"], "activation_function": "gelu_new",
                "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    else:
        want = {"class": "LlamaForCausalLM", "num_hidden_layers": m["L"], "num_attention_heads": m["NH"],
                "num_key_value_heads": m["KVH"], "hidden_size": m["C"], "head_dim": m["HS"],
                "intermediate_size": m["H"], "vocab_size": m["V"], "max_position_embeddings": m["maxT"],
                "hidden_act": "silu", "tie_word_embeddings": bool(m["tied"]), "attention_bias": False,
                "mlp_bias": False, "rms_norm_eps": m["eps"], "rope_theta": m["theta"], "rope_type": "default"}
    # transformers 5 reads RoPE from rope_parameters, 4 from rope_theta and rope_scaling
    v5 = int(transformers_version().split(".")[0]) >= 5
    rope = (getattr(c, "rope_parameters", None) if v5 else getattr(c, "rope_scaling", None)) or {}
    got = {"class": type(model).__name__, "rope_theta": rope.get("rope_theta") if v5 else getattr(c, "rope_theta", None),
           "rope_type": rope.get("rope_type", rope.get("type", "default"))}
    bad = []
    for k, v in want.items():
        g = got[k] if k in got else getattr(c, k, None)
        same = (g is not None and abs(float(g) - v) <= 1e-6 * abs(v)) if isinstance(v, float) else g == v
        if not same:
            bad.append(f"{k} {g!r}, want {v!r}")
    if m["arch"] == ex.ARCH_LLAMA:   # the frequencies its rotary embedding holds: theta^(-2i/HS), no scaling
        rot = model.model.rotary_emb
        inv = rot.inv_freq.detach().double().cpu().numpy()
        want_inv = np.power(np.float64(m["theta"]), -2.0 * np.arange(m["HS"] // 2) / m["HS"])
        scale = float(getattr(rot, "attention_scaling", 1.0))
        if inv.shape != want_inv.shape or np.abs(inv / want_inv - 1).max() > 1e-6 or scale != 1.0:
            bad.append(f"rotary_emb: inv_freq {inv[:3]}... (want {want_inv[:3]}...), attention_scaling {scale}")
    report(not bad, "config as transformers reads it agrees with the checkpoint header",
           "; ".join(bad) if bad else ", ".join(f"{k} {want[k]}" for k in want if k != "class") + f" ({want['class']})")


def transformers_version():
    import transformers
    return transformers.__version__


def check_weights(m, h, params, model):
    """Every parameter transformers holds against the checkpoint value it came from (export_hf's mapping, which
    dev/test/test_export.c checks against the checkpoint layout value for value)."""
    want = ex.llama_tensors(m, params, "float32") if m["arch"] == ex.ARCH_LLAMA else ex.hf_tensors(h, params, "float32")
    head = params["lm_head"] if m["arch"] == ex.ARCH_LLAMA and not m["tied"] else params["wte"]
    want["lm_head.weight"] = ex.bf16_to(head[:m["V"]], "float32")
    have = dict(model.named_parameters(remove_duplicate=False))
    have["lm_head.weight"] = model.get_output_embeddings().weight
    bad, n = [], 0
    for name, t in have.items():
        if name not in want:
            bad.append(f"{name}: not in the checkpoint")
            continue
        got = t.detach().float().cpu().numpy()
        if got.shape != want[name].shape:
            bad.append(f"{name}: shape {list(got.shape)}, want {list(want[name].shape)}")
        elif not np.array_equal(got, want[name]):
            bad.append(f"{name}: {int((got != want[name]).sum())} values differ")
        n += got.size
    bad += [f"{k}: not in the model" for k in want if k not in have]
    report(not bad, "transformers' parameters equal the checkpoint's values",
           "; ".join(bad[:6]) + (f" (+{len(bad) - 6} more)" if len(bad) > 6 else "") if bad else
           f"{len(have)} tensors, {n} values, bit for bit (LM head: {'wte' if head is params['wte'] else 'lm_head'})")


def hf_logits(model, toks, V, device):
    """transformers' logits of the rows toks, as float64 torch tensors on the device."""
    import torch
    with torch.no_grad():
        return model(torch.as_tensor(toks, dtype=torch.long, device=device)).logits[..., :V].double()


def compare_rows(model, m, p, x, y, device, chunk=8):
    """transformers against the reference on rows x (targets y), `chunk` rows at a time (a float64 (rows, T, V)
    block of a 50257-token vocabulary is 400 MB a row at T = 1024): -> (relative L2 error, max |diff|, mean loss of
    transformers, of the reference)."""
    import torch

    def loss_sum(lg, tg):
        return float((torch.logsumexp(lg, -1) - lg.gather(-1, tg[..., None])[..., 0]).sum())

    sq_diff = sq_ref = max_diff = loss_hf = loss_ref = 0.0
    for i in range(0, len(x), chunk):
        tg = torch.as_tensor(y[i:i + chunk], dtype=torch.long, device=device)
        with torch.no_grad():
            hf = hf_logits(model, x[i:i + chunk], m["V"], device)
            ref = reference_logits(m, p, x[i:i + chunk], device)
        sq_diff += float(((hf - ref) ** 2).sum())
        sq_ref += float((ref ** 2).sum())
        max_diff = max(max_diff, float((hf - ref).abs().max()))
        loss_hf += loss_sum(hf, tg)
        loss_ref += loss_sum(ref, tg)
    n = y.size
    return math.sqrt(sq_diff / max(sq_ref, 1e-300)), max_diff, loss_hf / n, loss_ref / n


def check_one(ckpt, export_dir, dump_dir, val, args, device):
    """Checks 1-7 of one export (5 with the trainer's val loss `val`: (value, where it came from) or None)."""
    import torch
    import transformers
    h, _, params = ex.read_checkpoint(ckpt)
    m = ex.model_of_header(h, ckpt)
    model, info = load_export(export_dir, device)
    kind = "GPT-2" if m["arch"] == ex.ARCH_GPT2 else (f"Llama ({m['KVH']} key/value heads, "
                                                      f"{'tied' if m['tied'] else 'untied'} head)")
    print(f"{type(model).__name__} from {export_dir} on {device} (transformers {transformers.__version__}, torch "
          f"{torch.__version__}): {kind}, {m['L']} layers, {m['C']} channels, vocabulary {m['V']}", flush=True)
    check_loading(m, info)
    check_config(m, model)
    check_weights(m, h, params, model)

    V, T = m["V"], min(args.seq_len, m["maxT"])
    rows = read_rows(args.tokens, args.rows, T, V)
    x, y = rows[:, :T], rows[:, 1:]
    p = reference_params(params, device)
    err, max_diff, loss_hf, loss_ref = compare_rows(model, m, p, x, y, device)
    report(err < 1e-4 and abs(loss_hf - loss_ref) < 1e-4,
           f"transformers FP32 vs the float64 reference forward on {args.rows} rows x {T} tokens",
           f"logits relative L2 error {err:.2e} (limit 1e-4), max |diff| {max_diff:.2e}; mean loss "
           f"{loss_hf:.6f} vs {loss_ref:.6f} (limit 1e-4 apart)")
    if val is not None:
        val, src = val
        d = abs(loss_hf - val)
        report(d <= 0.01 * abs(val), f"the trainer's val loss of the same {args.rows} rows x {T} tokens ({src})",
               f"train_gpt_fp4 {val:.6f}, transformers {loss_hf:.6f}, |diff| {d:.5f} (limit 1%)")

    if dump_dir:
        toks, ours = read_dump(dump_dir)
        if ours.shape[-1] != V:
            ex.die(f"{dump_dir}/logits.bin has {ours.shape[-1]} logits a position; the checkpoint's vocabulary is {V}")
        with torch.no_grad():
            theirs = hf_logits(model, toks, V, device).cpu().numpy()
            ref = reference_logits(m, p, toks, device).cpu().numpy()
        err, err_ref = rel_l2(ours, theirs), rel_l2(ours, ref)
        agree = float((ours.argmax(-1) == theirs.argmax(-1)).mean())
        report(err < 2e-2, f"logits of {toks.shape[0]} dumped rows x {toks.shape[1]} positions, transformers FP32 vs "
               f"train_gpt_fp4 BF16", f"relative L2 error {err:.4f} (limit 0.02; the float64 reference's: "
               f"{err_ref:.4f}), max |diff| {np.abs(ours - theirs).max():.4f} (max |logit| {np.abs(theirs).max():.2f}), "
               f"argmax agrees at {100 * agree:.2f}% of positions")
        lo, lt = next_token_loss(ours, toks).mean(1), next_token_loss(theirs, toks).mean(1)
        d = np.abs(lo - lt)
        ok = bool(np.all(d <= 0.02 + 0.005 * np.abs(lt)))
        report(ok, "mean next-token loss of each dumped row, train_gpt_fp4's logits vs transformers'",
               ", ".join(f"{a:.4f}/{b:.4f}" for a, b in zip(lo, lt)) + f"; max |diff| {d.max():.4f} (limit 0.02 + 0.5%)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("checkpoint", help="the train_gpt_fp4 checkpoint the export was made from")
    ap.add_argument("export_dir", help="scripts/export_hf.py's output directory")
    ap.add_argument("dump_dir", nargs="?", default=None, help="train_gpt_fp4 --eval-dump directory (checks 6-7)")
    ap.add_argument("--tokens", default=os.path.join(REPO, "data", "tinyshakespeare", "tiny_shakespeare_val.bin"),
                    help="held-out tokens, an llm.c shard")
    ap.add_argument("--rows", type=int, default=4, help="held-out rows R")
    ap.add_argument("--seq-len", type=int, default=256, help="their length T (at most the model's positions)")
    ap.add_argument("--eval-log", default=None, help="eval.jsonl of the --eval-only run: its val_loss (check 5)")
    ap.add_argument("--val-loss", type=float, default=None, help="the trainer's val loss of the same rows (check 5)")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("CKPT", "EXPORT_DIR"),
                    help="one more checkpoint and its export, checked in the same process without a dump (checks 1-4; "
                    "dev/test/test_export.c imports torch once for all its exports)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    args = ap.parse_args()

    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):   # float32 references: no TF32 in transformers' matmuls
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    val, src = val_loss_of(args)
    check_one(args.checkpoint, args.export_dir, args.dump_dir, None if val is None else (val, src), args, device)
    for ckpt, export_dir in args.pair:
        check_one(ckpt, export_dir, None, None, args, device)
    finish()


if __name__ == "__main__":
    main()
