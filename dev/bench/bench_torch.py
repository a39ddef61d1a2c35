"""PyTorch baseline for dev/bench/bench_train.sh and dev/bench/bench_llama.sh: a GPT-2 (default: 124M, d12) or a
Llama (--arch llama, docs/MODELS.md) of the trainer's shape, B=64, T=1024, bf16 autocast, fused SDPA,
torch.compile, fused AdamW, on one GPU. Prints ms/step and tokens/s (median after warm-up) so the C/CUDA
trainer's figure can be put next to it in the same run.
usage: python3 dev/bench/bench_torch.py [--steps 30] [--batch 64] [--seq-len 1024] [--no-compile]
           [--arch gpt2|llama] [--model NAME] [--n-layer L --n-embd C --n-head NH]
           [--kv-heads KVH --mlp-hidden H --rope-theta THETA --norm-eps EPS --tie-embeddings default|on|off]
           [--device cuda|cpu] [--log FILE.jsonl] [--gqa sdpa|repeat] [--check-transformers]

The model flags mirror train_gpt_fp4's (llmc/model/gpt_config.h): --model picks a preset (d6 ... d48,
llama-tiny, llama-30m, llama-50m, llama-100m, llama-200m; default d12, or llama-30m with --arch llama), the
shape flags change it as the trainer's do (0: the preset's; a new --n-head without --kv-heads means no GQA; a
new --n-embd without --mlp-hidden means H = 8C/3 rounded up to a multiple of 256). One name is this script's
own: llama-d12, GPT-2 d12's shape as a Llama (L 12, C 768, NH 12, KVH 12, H 2048 = 8C/3 exactly, so its
85M non-embedding parameters equal d12's; 162M in all with its untied head), which the trainer builds as
`--arch llama --n-layer 12 --n-embd 768 --n-head 12` (add --kv-heads 4 to both for GQA).

The Llama: nn.Linear without bias; torch.nn.RMSNorm (FP32 statistics, eps from --norm-eps); RoPE rotate-halves
on q and k (the cos/sin table in double rounded to float, as rope_table_fill); F.scaled_dot_product_attention,
causal, with enable_gqa=True when KVH < NH (--gqa repeat: repeat_interleave of k and v instead); SwiGLU through
one fused gate/up Linear (C -> 2H: [0, H) the gate, [H, 2H) up), silu(g) * u; an untied lm_head unless
--tie-embeddings on; vocabulary padded to 50304; init N(0, 0.02), the residual projections N(0, 0.02/sqrt(2L)),
norm weights 1. The GPT-2 model is as before (PyTorch's default init).
--check-transformers: on the CPU in float32, loads this Llama's weights (norm weights perturbed, so they count)
into transformers' LlamaForCausalLM and compares the logits (max |diff| / max |logit| < 1e-4), then exits.
--log FILE: one {"type": "train", "step", "ms", "loss", "tok_per_s"} line per step, as the trainer's log.jsonl.
--device cpu (a check that it runs, not a benchmark) defaults to B=4, T=64."""
import argparse, json, math, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L=12, C=768, NH=12, Vp=50304, maxT=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


# ---------------------------------------------------------------------------------------------------------------
# Llama (docs/MODELS.md)

SDPA_GQA = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 5)   # enable_gqa (else: repeat_interleave)


def rope_cos_sin(maxT, HS, theta):
    """(maxT, HS/2) float32 cos and sin of t * theta^(-2i/HS), computed in double (rope_table_fill)."""
    inv_freq = torch.pow(torch.tensor(float(theta), dtype=torch.float64),
                         -2.0 * torch.arange(HS // 2, dtype=torch.float64) / HS)
    ang = torch.arange(maxT, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(t, cos, sin):
    """Rotate halves: t (B, T, heads, HS), cos/sin (T, 1, HS/2); element i < HS/2 pairs with i + HS/2."""
    half = t.shape[-1] // 2
    x1, x2 = t[..., :half], t[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, KVH, H, eps, gqa="sdpa"):
        super().__init__()
        self.NH, self.KVH, self.HS, self.H, self.gqa = NH, KVH, C // NH, H, gqa
        self.ln1, self.ln2 = nn.RMSNorm(C, eps=eps), nn.RMSNorm(C, eps=eps)
        self.qkv = nn.Linear(C, (NH + 2 * KVH) * self.HS, bias=False)   # all q heads, all k heads, all v heads
        self.proj = nn.Linear(C, C, bias=False)
        self.fc = nn.Linear(C, 2 * H, bias=False)                        # [0, H) gate, [H, 2H) up
        self.fcproj = nn.Linear(H, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        NH, KVH, HS = self.NH, self.KVH, self.HS
        q, k, v = self.qkv(self.ln1(x)).split([NH * HS, KVH * HS, KVH * HS], dim=2)
        q = rope(q.view(B, T, NH, HS), cos, sin).transpose(1, 2)
        k = rope(k.view(B, T, KVH, HS), cos, sin).transpose(1, 2)
        v = v.view(B, T, KVH, HS).transpose(1, 2)
        if KVH == NH:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.gqa == "sdpa" and SDPA_GQA:   # query head h reads key/value head h // (NH / KVH)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k, v = k.repeat_interleave(NH // KVH, dim=1), v.repeat_interleave(NH // KVH, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.fc(self.ln2(x)).split(self.H, dim=2)
        return x + self.fcproj(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, cfg, gqa="sdpa"):
        super().__init__()
        L, C, Vp = cfg["L"], cfg["C"], cfg["Vp"]
        self.wte = nn.Embedding(Vp, C)
        self.blocks = nn.ModuleList(LlamaBlock(C, cfg["NH"], cfg["KVH"], cfg["H"], cfg["eps"], gqa) for _ in range(L))
        self.lnf = nn.RMSNorm(C, eps=cfg["eps"])
        self.lm_head = None if cfg["tied"] else nn.Linear(C, Vp, bias=False)
        cos, sin = rope_cos_sin(cfg["maxT"], C // cfg["NH"], cfg["theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():   # docs/MODELS.md's initialisation
            if p.dim() == 1:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * L) if name.endswith((".proj.weight", ".fcproj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def logits(self, idx):
        T = idx.shape[1]
        cos, sin = self.cos[:T, None, :], self.sin[:T, None, :]
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x, cos, sin)
        x = self.lnf(x)
        return self.lm_head(x) if self.lm_head is not None else x @ self.wte.weight.T

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


# ---------------------------------------------------------------------------------------------------------------
# The trainer's model presets and shape flags (llmc/model/gpt_config.h), as dicts.

V, VP, MAXT = 50257, 50304, 1024
PRESETS = {  # name: (arch, L, NH, C, KVH or None = NH)
    "d6": ("gpt2", 6, 6, 384, None), "d12": ("gpt2", 12, 12, 768, None), "d24": ("gpt2", 24, 16, 1024, None),
    "d36": ("gpt2", 36, 20, 1280, None), "d48": ("gpt2", 48, 25, 1600, None),
    "llama-tiny": ("llama", 2, 4, 128, 2), "llama-30m": ("llama", 6, 5, 640, None),
    "llama-50m": ("llama", 7, 6, 768, None), "llama-100m": ("llama", 8, 8, 1024, None),
    "llama-200m": ("llama", 10, 10, 1280, None),
    "llama-d12": ("llama", 12, 12, 768, None),   # this script's own: d12's shape as a Llama (not a trainer preset)
}


def llama_default_hidden(C):
    return -(-(8 * C // 3) // 256) * 256   # 2/3 of 4C rounded up to a multiple of 256


def preset(name):
    arch, L, NH, C, KVH = PRESETS[name]
    c = dict(arch=arch, L=L, NH=NH, C=C, KVH=KVH or NH, H=4 * C, tied=True, theta=0.0, eps=1e-5, V=V, Vp=VP, maxT=MAXT)
    if arch == "llama":
        c.update(H=llama_default_hidden(C), tied=False, theta=10000.0)
    return c


def model_config(a):
    """--model's preset (or the family's default), then the shape flags: config_apply_shape's rules."""
    name = a.model or ("llama-30m" if a.arch == "llama" else "d12")
    c = preset(name)
    if a.arch not in ("auto", c["arch"]):
        sys.exit(f"--arch {a.arch} conflicts with --model {name}, a {c['arch']} model: leave one out")
    tie = {"on": 1, "off": 0}.get(a.tie_embeddings, -1)
    if c["arch"] == "gpt2" and (a.kv_heads > 0 or a.mlp_hidden > 0 or a.rope_theta > 0 or a.norm_eps > 0 or tie == 0):
        sys.exit("--kv-heads, --mlp-hidden, --rope-theta, --norm-eps and --tie-embeddings off are Llama's options: "
                 "pick a llama model or --arch llama")
    C0 = c["C"]
    if a.n_layer > 0: c["L"] = a.n_layer
    if a.n_embd > 0: c["C"] = a.n_embd
    if a.n_head > 0: c["NH"] = a.n_head
    if c["arch"] == "gpt2":
        c["KVH"], c["H"] = c["NH"], 4 * c["C"]
    else:
        if a.n_head > 0 and a.kv_heads <= 0: c["KVH"] = c["NH"]
        if a.kv_heads > 0: c["KVH"] = a.kv_heads
        if a.mlp_hidden > 0: c["H"] = a.mlp_hidden
        elif c["C"] != C0: c["H"] = llama_default_hidden(c["C"])
        if a.rope_theta > 0: c["theta"] = a.rope_theta
        if a.norm_eps > 0: c["eps"] = a.norm_eps
        if tie >= 0: c["tied"] = bool(tie)
    if c["C"] % c["NH"] or c["NH"] % c["KVH"]:
        sys.exit(f"channels {c['C']} must be a multiple of heads {c['NH']}, and heads of kv heads {c['KVH']}")
    if c["arch"] == "llama" and (c["C"] // c["NH"]) % 2:
        sys.exit(f"RoPE needs an even head size (channels {c['C']} / heads {c['NH']})")
    return c


def describe(c):
    if c["arch"] == "gpt2":
        return f"gpt2: L {c['L']}, C {c['C']}, NH {c['NH']}, Vp {c['Vp']}"
    return (f"llama: L {c['L']}, C {c['C']}, NH {c['NH']}, KVH {c['KVH']}, HS {c['C'] // c['NH']}, H {c['H']}, "
            f"theta {c['theta']:g}, eps {c['eps']:g}, Vp {c['Vp']}, {'tied' if c['tied'] else 'untied'} head")


def build(c, gqa="sdpa"):
    if c["arch"] == "gpt2":
        return GPT(c["L"], c["C"], c["NH"], c["Vp"], c["maxT"])
    return Llama(c, gqa)


# ---------------------------------------------------------------------------------------------------------------
# --check-transformers: this Llama against transformers' LlamaForCausalLM holding the same weights.

def hf_llama(c, model):
    import transformers
    L, NH, KVH, C, H = c["L"], c["NH"], c["KVH"], c["C"], c["H"]
    HS = C // NH
    hc = transformers.LlamaConfig(vocab_size=c["Vp"], hidden_size=C, intermediate_size=H, num_hidden_layers=L,
                                  num_attention_heads=NH, num_key_value_heads=KVH, head_dim=HS,
                                  max_position_embeddings=c["maxT"], rms_norm_eps=c["eps"], hidden_act="silu",
                                  attention_bias=False, mlp_bias=False, tie_word_embeddings=c["tied"],
                                  rope_theta=c["theta"], rope_scaling=None)
    if getattr(hc, "rope_parameters", None) is not None:   # transformers >= 5 keeps theta there
        hc.rope_parameters = {"rope_type": "default", "rope_theta": c["theta"]}
    hc._attn_implementation = "eager"
    m = transformers.LlamaForCausalLM(hc).float().eval()
    sd = {"model.embed_tokens.weight": model.wte.weight, "model.norm.weight": model.lnf.weight}
    if not c["tied"]:
        sd["lm_head.weight"] = model.lm_head.weight
    q1, k1 = NH * HS, (NH + KVH) * HS
    for l, b in enumerate(model.blocks):
        pre = f"model.layers.{l}."
        w = b.qkv.weight
        sd.update({pre + "input_layernorm.weight": b.ln1.weight, pre + "post_attention_layernorm.weight": b.ln2.weight,
                   pre + "self_attn.q_proj.weight": w[:q1], pre + "self_attn.k_proj.weight": w[q1:k1],
                   pre + "self_attn.v_proj.weight": w[k1:], pre + "self_attn.o_proj.weight": b.proj.weight,
                   pre + "mlp.gate_proj.weight": b.fc.weight[:H], pre + "mlp.up_proj.weight": b.fc.weight[H:],
                   pre + "mlp.down_proj.weight": b.fcproj.weight})
    missing, unexpected = m.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not (c["tied"] and k == "lm_head.weight") and "rotary_emb" not in k]
    assert not missing and not unexpected, (missing, unexpected)
    return m


def check_transformers(c, a):
    if c["arch"] != "llama":
        sys.exit("--check-transformers: a Llama only (--arch llama or a llama model)")
    torch.manual_seed(0)
    model = Llama(c, a.gqa).float().eval()
    with torch.no_grad():   # norm weights of 1 would hide a misplaced one
        for b in list(model.blocks) + [model]:
            for n in ("ln1", "ln2", "lnf"):
                if hasattr(b, n):
                    getattr(b, n).weight.mul_(1 + 0.2 * torch.randn_like(getattr(b, n).weight))
    hf = hf_llama(c, model)
    T = min(a.seq_len or 128, c["maxT"])
    x = torch.randint(0, c["V"], (2, T))
    with torch.no_grad():
        ours, theirs = model.logits(x).double(), hf(input_ids=x).logits.double()
    err = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    ok = err < 1e-4
    print(f"check_transformers: {describe(c)}; B 2, T {T}, float32 on the CPU: max |logits - LlamaForCausalLM's| / "
          f"max |logit| = {err:.2e} ({'OK' if ok else 'FAILED'}, < 1e-4)")
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=None, help="sequences per step (default 64; 4 on the CPU)")
    ap.add_argument("--seq-len", type=int, default=None, help="sequence length (default 1024; 64 on the CPU)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a check that it runs)")
    ap.add_argument("--arch", choices=["auto", "gpt2", "llama"], default="auto")
    ap.add_argument("--model", choices=list(PRESETS), default="")
    ap.add_argument("--n-layer", type=int, default=0)
    ap.add_argument("--n-embd", type=int, default=0)
    ap.add_argument("--n-head", type=int, default=0)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--mlp-hidden", type=int, default=0)
    ap.add_argument("--rope-theta", type=float, default=0.0)
    ap.add_argument("--norm-eps", type=float, default=0.0)
    ap.add_argument("--tie-embeddings", choices=["default", "on", "off"], default="default")
    ap.add_argument("--gqa", choices=["sdpa", "repeat"], default="sdpa",
                    help="KVH < NH: SDPA's enable_gqa, or repeat_interleave k and v to NH heads first")
    ap.add_argument("--log", default="", help="write a log.jsonl-like line per step here")
    ap.add_argument("--check-transformers", action="store_true")
    a = ap.parse_args()
    c = model_config(a)
    if a.check_transformers:
        sys.exit(check_transformers(c, a))
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    B = a.batch or (64 if cuda else 4)
    T = a.seq_len or (1024 if cuda else 64)
    if T > c["maxT"]:
        sys.exit(f"--seq-len {T} is more than the model's {c['maxT']} positions")
    torch.manual_seed(0)
    model = build(c, a.gqa).to(dev)
    if c["arch"] == "llama":
        n = sum(p.numel() for p in model.parameters())
        print(f"pytorch {describe(c)}; {n / 1e6:.1f}M parameters; B {B}, T {T}, {a.device}")
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True if cuda else None)
    step_fn = model if a.no_compile else torch.compile(model)
    x = torch.randint(0, c["V"], (B, T), device=dev)
    y = torch.randint(0, c["V"], (B, T), device=dev)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times, losses = [], []
    for i in range(a.steps):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.detach())
    losses = [l.item() for l in losses]
    if a.log:
        with open(a.log, "w") as f:
            for i, (ms, l) in enumerate(zip(times, losses)):
                f.write(json.dumps({"type": "train", "step": i + 1, "loss": round(l, 6), "ms": round(ms, 3),
                                    "tok_per_s": round(B * T / ms * 1e3, 1)}) + "\n")
    warm = times[5:] if len(times) > 10 else times[1:] or times   # bench_train.sh's warm-up rule
    ms = statistics.median(warm)
    peak = f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if cuda else "n/a"
    print(f"pytorch {'compiled' if not a.no_compile else 'eager'}: {ms:.1f} ms/step, "
          f"{B * T / ms * 1e3:,.0f} tokens/s, peak {peak}")
    if c["arch"] == "llama":
        print(f"loss: step 1 {losses[0]:.4f}, step {len(losses)} {losses[-1]:.4f} "
              f"(ln {c['V']} = {math.log(c['V']):.4f}, ln {c['Vp']} = {math.log(c['Vp']):.4f})")


if __name__ == "__main__":
    main()
