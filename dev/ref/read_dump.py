#!/usr/bin/env python3
"""Reads a gpt_ref.py dump (GPT-2 or Llama) with numpy only, prints what it holds, and checks it independently.

The checks do not use torch: a plain numpy float64 forward pass (written separately from the
torch reference) recomputes logits and loss from the stored initial parameters, and central
finite differences of that numpy loss are compared with a few stored gradients per tensor.
For an FP4 recipe dump (header word [15] > 0) the numpy forward quantizes the GEMM operands of the
quantized blocks with dev/fp4_ref.py's quantize itself (not gpt_ref.py's vectorized copy), using the
recipe, seed_q and block range stored in the header; finite differences do not apply there (the
quantized loss is piecewise constant), so the gradients are only checked against grad_norms[0].
Llama dumps (header word [19] = 1; [20] KVH, [21] MLP hidden H, [22] tied, [23] RoPE theta and [24] RMSNorm
eps as float32 bits) get the same checks with a numpy Llama forward (RMSNorm, RoPE rotate-halves from a
float32-rounded cos/sin table, GQA, SwiGLU, untied lm_head unless tied; docs/MODELS.md).
Exit status is nonzero when a check fails.

  python3 dev/ref/read_dump.py [dev/ref/gpt_ref.bin] [--no-check]
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fp4_ref as F  # noqa: E402  (dev/fp4_ref.py)

MAGIC = 20261129
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
LLAMA_NAMES = ["wte", "ln1w", "qkvw", "attprojw", "ln2w", "fcw", "fcprojw", "lnfw", "lm_head"]
ARCHS = {0: "gpt2", 1: "llama"}


def shapes(L, C, Vp, maxT):
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C),
            "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
            "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,)}


def layout(d):
    """(names in storage order, shapes) of the dump's architecture."""
    if d["arch"] == "gpt2":
        return NAMES, shapes(d["L"], d["C"], d["Vp"], d["maxT"])
    L, C, Vp, NH, KVH, H = d["L"], d["C"], d["Vp"], d["NH"], d["KVH"], d["H"]
    HS = C // NH
    shp = {"wte": (Vp, C), "ln1w": (L, C), "qkvw": (L, (NH + 2 * KVH) * HS, C), "attprojw": (L, C, C),
           "ln2w": (L, C), "fcw": (L, 2 * H, C), "fcprojw": (L, C, H), "lnfw": (C,), "lm_head": (Vp, C)}
    names = [n for n in LLAMA_NAMES if not (d["tied"] and n == "lm_head")]
    return names, {n: shp[n] for n in names}


def read(path):
    buf = open(path, "rb").read()
    off = 0

    def take(dtype, n):
        nonlocal off
        a = np.frombuffer(buf, dtype=dtype, count=n, offset=off)
        off += a.nbytes
        return a

    h = take("<i4", 256)
    if h[0] != MAGIC:
        sys.exit(f"{path}: bad magic {h[0]} (expected {MAGIC}); not a gpt_ref dump")
    if h[1] != 1:
        sys.exit(f"{path}: version {h[1]}, this reader knows version 1")
    L, NH, C, V, Vp, maxT, B, T, nsteps, N, seed = (int(v) for v in h[2:13])
    hyper = take("<f4", 16)
    d = dict(L=L, NH=NH, C=C, V=V, Vp=Vp, maxT=maxT, B=B, T=T, nsteps=nsteps, N=N, seed=seed,
             dtype_bits=int(h[13]), header=h, hyper=hyper)

    def text(a, b):
        return h[a:b].astype("<i4").tobytes().split(b"\0")[0].decode("ascii")
    # FP4 recipe words (dumps written before they existed have zeros there: bf16)
    d["seed_q"], d["recipe_index"] = int(h[14]), int(h[15])
    d["bf16_first"], d["bf16_last"], d["fp4_blocks"] = int(h[16]), int(h[17]), int(h[18])
    d["recipe"] = text(32, 64) or "bf16"
    # model family words (0 in GPT-2 dumps: arch gpt2)
    if int(h[19]) not in ARCHS:
        sys.exit(f"{path}: unknown arch {h[19]} in header word [19]")
    d["arch"] = ARCHS[int(h[19])]
    if d["arch"] == "llama":
        d["KVH"], d["H"], d["tied"] = int(h[20]), int(h[21]), bool(h[22])
        d["theta"] = float(h[23:24].view("<f4")[0])
        d["eps"] = float(h[24:25].view("<f4")[0])
        if d["KVH"] < 1 or NH % d["KVH"] or C % NH or (C // NH) % 2 or d["H"] < 1:
            sys.exit(f"{path}: inconsistent Llama shape NH={NH} KVH={d['KVH']} C={C} H={d['H']}")
    d["slots"] = [text(64 + 8 * s, 72 + 8 * s) or "bf16" for s in range(6)]
    # --attention-fp4 words (zeros: off): the Q/K/V spec [112..119] and the dS spec [120..127]
    d["attn_qkv"], d["attn_ds"] = text(112, 120) or None, text(120, 128) or None
    d["params"] = take("<f4", N)
    d["x"] = take("<i4", B * T).reshape(B, T)
    d["y"] = take("<i4", B * T).reshape(B, T)
    d["logits"] = take("<f4", B * T * V).reshape(B, T, V)
    d["loss"] = float(take("<f4", 1)[0])
    d["grads"] = take("<f4", N)
    d["step_losses"] = take("<f4", nsteps)
    d["grad_norms"] = take("<f4", nsteps)
    d["params_after"] = take("<f4", N)
    if off != len(buf):
        sys.exit(f"{path}: {len(buf) - off} bytes left over after the last field; layout mismatch")
    d["size"] = len(buf)
    return d


def split(flat, shp):
    out, off = {}, 0
    for n in shp:
        k = int(np.prod(shp[n]))
        out[n] = flat[off:off + k].reshape(shp[n])
        off += k
    assert off == flat.size, f"parameter block holds {flat.size} floats, layout needs {off}"
    return out


# ---- independent numpy forward (float64) ----
def np_layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def np_linear(a, w, b, l, kind):
    return a @ w.T if b is None else a @ w.T + b


def np_qlinear(d):
    """The FP4 forward GEMM of gpt_ref.py / train_gpt_fp4.cu linear_forward, with fp4_ref.quantize."""
    L = d["L"]
    quantized = [s != "bf16" for s in d["slots"]]
    fp4_any = any(quantized) and d["bf16_first"] + d["bf16_last"] < L

    def q(arr, l, kind, slot):
        if not quantized[slot]:
            return arr
        tid = ((0 * L + l) * 4 + kind) * 6 + slot
        key = int(F.rng_key(d["seed_q"], 0, tid))
        r = F.quantize(d["slots"][slot], F.bf16_rne_bits(arr.astype(np.float32)), arr.shape[0], arr.shape[1], 1, key)
        return F.bf16_to_f32(r["fake"]).astype(np.float64) * np.float64(r["scale_dec"])

    def lin(a, w, b, l, kind):
        if not (fp4_any and d["bf16_first"] <= l < L - d["bf16_last"]):
            return np_linear(a, w, b, l, kind)
        a2 = a.reshape(-1, a.shape[-1])
        out = (q(a2, l, kind, 0) @ q(w, l, kind, 1).T).reshape(a.shape[:-1] + (w.shape[0],))
        return out if b is None else out + b
    return lin


def np_attn_copy(d, qkv, l, NH, KVH, HS):
    """--attention-fp4: the dequantized copy of qkv ((B, T, (NH + 2 KVH) HS), after RoPE), as the program makes it
    (llmc/fp4/attention_fp4.h): Q, K and V slices quantized by fp4_ref.quantize, Q and K along d, V along tokens,
    keys rng_key(rng_key(seed_q, 0, 0xA7700000 + layer), 0, 0xA770 + part)."""
    if d["attn_qkv"] is None or d["attn_qkv"] == "bf16":
        return qkv
    B, T, W = qkv.shape
    x = qkv.reshape(B * T, W)
    out = np.empty_like(x)
    layer_key = int(F.rng_key(d["seed_q"], 0, 0xA7700000 + l))
    for part, (c0, nh, axis) in enumerate(((0, NH, 1), (NH * HS, KVH, 1), ((NH + KVH) * HS, KVH, 0))):
        sl = np.ascontiguousarray(x[:, c0:c0 + nh * HS])
        key = int(F.rng_key(layer_key, 0, 0xA770 + part))
        r = F.quantize(d["attn_qkv"], F.bf16_rne_bits(sl.astype(np.float32)), sl.shape[0], sl.shape[1], axis, key)
        out[:, c0:c0 + nh * HS] = F.bf16_to_f32(r["fake"]).astype(np.float64) * np.float64(r["scale_dec"])
    return out.reshape(B, T, W)


def np_forward(p, x, d, lin=np_linear):
    if d["arch"] == "llama":
        return np_forward_llama(p, x, d, lin)
    L, NH, C, V = d["L"], d["NH"], d["C"], d["V"]
    B, T = x.shape
    HS = C // NH
    h = p["wte"][x] + p["wpe"][:T][None]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for l in range(L):
        a = np_layernorm(h, p["ln1w"][l], p["ln1b"][l])
        qkv = np_attn_copy(d, lin(a, p["qkvw"][l], p["qkvb"][l], l, 0), l, NH, NH, HS)
        out = np.empty((B, T, C))
        for hd in range(NH):
            sl = slice(hd * HS, (hd + 1) * HS)
            q = qkv[:, :, sl]
            k = qkv[:, :, C:][:, :, sl]
            v = qkv[:, :, 2 * C:][:, :, sl]
            s = np.einsum("btd,bsd->bts", q, k) / math.sqrt(HS)
            s[:, mask] = -np.inf
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, :, sl] = np.einsum("bts,bsd->btd", s, v)
        h = h + lin(out, p["attprojw"][l], p["attprojb"][l], l, 1)
        a = np_layernorm(h, p["ln2w"][l], p["ln2b"][l])
        u = lin(a, p["fcw"][l], p["fcb"][l], l, 2)
        u = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
        h = h + lin(u, p["fcprojw"][l], p["fcprojb"][l], l, 3)
    h = np_layernorm(h, p["lnfw"], p["lnfb"])
    return (h @ p["wte"].T)[:, :, :V]


def np_rmsnorm(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def np_forward_llama(p, x, d, lin=np_linear):
    """docs/MODELS.md's Llama, written with explicit per-head loops (independent of gpt_ref.py's torch code)."""
    L, NH, KVH, C, V, H, eps = d["L"], d["NH"], d["KVH"], d["C"], d["V"], d["H"], d["eps"]
    B, T = x.shape
    HS, half = C // NH, C // NH // 2
    # RoPE table: angle t * theta^(-2i/HS) in double, cos and sin rounded to float32 (rope_table_fill)
    ang = np.outer(np.arange(T, dtype=np.float64), float(d["theta"]) ** (-2.0 * np.arange(half) / HS))
    cos = np.cos(ang).astype(np.float32).astype(np.float64)
    sin = np.sin(ang).astype(np.float32).astype(np.float64)

    def rope(t):  # (B,T,HS), one head: element i < HS/2 pairs with i + HS/2
        a, b = t[..., :half], t[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    h = p["wte"][x]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for l in range(L):
        qkv = lin(np_rmsnorm(h, p["ln1w"][l], eps), p["qkvw"][l], None, l, 0)
        for hd in range(NH + KVH):   # RoPE on the q and k heads, in place (as the program's rope_forward)
            qkv[:, :, hd * HS:(hd + 1) * HS] = rope(qkv[:, :, hd * HS:(hd + 1) * HS])
        qkv = np_attn_copy(d, qkv, l, NH, KVH, HS)
        out = np.empty((B, T, C))
        for hd in range(NH):
            kv = hd // (NH // KVH)
            q = qkv[:, :, hd * HS:(hd + 1) * HS]
            k = qkv[:, :, (NH + kv) * HS:(NH + kv + 1) * HS]
            v = qkv[:, :, (NH + KVH + kv) * HS:(NH + KVH + kv + 1) * HS]
            s = np.einsum("btd,bsd->bts", q, k) / math.sqrt(HS)
            s[:, mask] = -np.inf
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, :, hd * HS:(hd + 1) * HS] = np.einsum("bts,bsd->btd", s, v)
        h = h + lin(out, p["attprojw"][l], None, l, 1)
        gu = lin(np_rmsnorm(h, p["ln2w"][l], eps), p["fcw"][l], None, l, 2)
        g, u = gu[..., :H], gu[..., H:]
        h = h + lin(g / (1 + np.exp(-g)) * u, p["fcprojw"][l], None, l, 3)
    h = np_rmsnorm(h, p["lnfw"], eps)
    return (h @ (p["wte"] if d["tied"] else p["lm_head"]).T)[:, :, :V]


def np_loss(logits, y):
    z = logits - logits.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    picked = np.take_along_axis(z, y[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def check(d, rng):
    ok = True

    def report(name, good, msg):
        nonlocal ok
        ok &= bool(good)
        print(f"  {'ok  ' if good else 'FAIL'} {name}: {msg}")

    names, shp = layout(d)
    flat = d["params"].astype(np.float64)
    p = split(flat, shp)
    x, y = d["x"].astype(np.int64), d["y"].astype(np.int64)
    print("checks (numpy float64, independent of torch):")
    report("tokens", x.min() >= 0 and x.max() < d["V"] and y.min() >= 0 and y.max() < d["V"],
           f"x in [{x.min()},{x.max()}], y in [{y.min()},{y.max()}]")
    report("targets", np.array_equal(y[:, :-1], x[:, 1:]), "y[b,t] == x[b,t+1] for t < T-1")
    pad = slice(d["V"] * d["C"], d["Vp"] * d["C"])
    pads = [pad]
    if "lm_head" in names:  # the last tensor of the Llama layout
        n_head = d["Vp"] * d["C"]
        pads.append(slice(d["N"] - n_head + d["V"] * d["C"], d["N"]))
    report("padding", all(not d[k][s].any() for s in pads for k in ("params", "grads", "params_after")),
           "padded wte" + (" and lm_head" if len(pads) > 1 else "") + " rows are zero in params, grads, params_after")
    fp4 = d["recipe_index"] > 0 or any(s != "bf16" for s in d["slots"])
    logits = np_forward(p, x, d, np_qlinear(d) if fp4 else np_linear)
    fp4 = fp4 or d["attn_qkv"] is not None   # (FP4 attention: the loss is piecewise constant too)
    err = np.abs(logits - d["logits"]).max()
    report("logits", err < 1e-4, f"max |numpy - dump| = {err:.3e}"
           + (f" (recipe {d['recipe']}: operands quantized with fp4_ref.quantize)" if fp4 else ""))
    loss = np_loss(logits, y)
    report("loss", abs(loss - d["loss"]) < 1e-5, f"numpy {loss:.7f} dump {d['loss']:.7f}")
    report("step_losses[0]", d["step_losses"][0] == np.float32(d["loss"]), "equals loss")
    gn = float(np.sqrt((d["grads"].astype(np.float64) ** 2).sum()))
    report("grad_norms[0]", abs(gn - d["grad_norms"][0]) < 1e-5 * max(1.0, gn),
           f"norm(grads) {gn:.7f} dump {d['grad_norms'][0]:.7f}")
    if fp4:
        print(f"  (finite differences skipped: recipe {d['recipe']} quantizes the GEMMs, the loss is piecewise "
              "constant in the operands)")
        return ok

    # Central differences at a few entries per tensor, picked among the largest gradients so the
    # difference quotient is well above float64 noise; plus one random entry.
    offsets, off = {}, 0
    for n in names:
        offsets[n] = off
        off += int(np.prod(shp[n]))
    h = 1e-5
    worst = 0.0
    for n in names:
        k = int(np.prod(shp[n]))
        g = d["grads"][offsets[n]:offsets[n] + k]
        idx = list(np.argsort(-np.abs(g))[:2]) + [int(rng.integers(k))]
        for i in idx:
            j = offsets[n] + i
            saved = flat[j]
            flat[j] = saved + h
            lp = np_loss(np_forward(split(flat, shp), x, d), y)
            flat[j] = saved - h
            lm = np_loss(np_forward(split(flat, shp), x, d), y)
            flat[j] = saved
            fd = (lp - lm) / (2 * h)
            rel = abs(fd - g[i]) / max(abs(fd), abs(float(g[i])), 1e-6)
            if abs(fd) > 1e-6:
                worst = max(worst, rel)
            if rel > 1e-2 and abs(fd - g[i]) > 1e-6:
                report(f"grad {n}[{i}]", False, f"finite difference {fd:.6e} dump {g[i]:.6e}")
    report("grads", True if worst < 1e-2 else False,
           f"finite differences at {3 * len(names)} entries, worst relative error {worst:.2e}")
    return ok


def main():
    ap = argparse.ArgumentParser(description="Read and check a gpt_ref.py dump")
    ap.add_argument("path", nargs="?", default="dev/ref/gpt_ref.bin")
    ap.add_argument("--no-check", action="store_true", help="only print the contents")
    args = ap.parse_args()
    d = read(args.path)
    hy = d["hyper"]
    print(f"{args.path}: {d['size']} bytes, version {d['header'][1]}, computed in float{d['dtype_bits']}")
    print(f"  L={d['L']} NH={d['NH']} C={d['C']} V={d['V']} Vp={d['Vp']} maxT={d['maxT']} "
          f"B={d['B']} T={d['T']} nsteps={d['nsteps']} num_parameters={d['N']} seed={d['seed']}")
    if d["arch"] == "llama":
        print(f"  arch llama: KVH={d['KVH']} HS={d['C'] // d['NH']} H={d['H']} tied={int(d['tied'])} "
              f"rope_theta={d['theta']:g} norm_eps={d['eps']:g}")
    print(f"  lr={hy[0]:g} beta1={hy[1]:g} beta2={hy[2]:g} eps={hy[3]:g} wd={hy[4]:g} grad_clip={hy[5]:g}")
    if d["attn_qkv"] is not None:
        print(f"  attention fp4: q/k/v {d['attn_qkv']}, ds {d['attn_ds']}")
    print(f"  recipe {d['recipe']} (index {d['recipe_index']}), seed_q {d['seed_q']}, bf16 blocks first "
          f"{d['bf16_first']} last {d['bf16_last']}, quantized blocks {d['fp4_blocks']}; slots "
          + "; ".join(f"{n}={s}" for n, s in zip(["fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy",
                                                   "wgrad.x"], d["slots"])))
    names, shp = layout(d)
    p = split(d["params"], shp)
    g = split(d["grads"], shp)
    pa = split(d["params_after"], shp)
    print(f"  {'tensor':9s} {'shape':>15s} {'param std':>10s} {'param mean':>10s} {'|grad| max':>10s} "
          f"{'grad rms':>10s} {'|delta| max':>11s}")
    for n in names:
        print(f"  {n:9s} {str(p[n].shape):>15s} {p[n].std():10.4g} {p[n].mean():10.4g} "
              f"{np.abs(g[n]).max():10.4g} {np.sqrt((g[n].astype(np.float64) ** 2).mean()):10.4g} "
              f"{np.abs(pa[n] - p[n]).max():11.4g}")
    print(f"  x[0,:8]={d['x'][0, :8].tolist()} y[0,:8]={d['y'][0, :8].tolist()}")
    print(f"  logits {d['logits'].shape} [0,0,:4]={d['logits'][0, 0, :4].tolist()}")
    print(f"  loss {d['loss']:.6f}")
    print(f"  step_losses {np.array2string(d['step_losses'], precision=5)}")
    print(f"  grad_norms  {np.array2string(d['grad_norms'], precision=5)}")
    if args.no_check:
        return
    if not check(d, np.random.default_rng(0)):
        sys.exit("read_dump: some checks FAILED")
    print("read_dump: all checks passed")


if __name__ == "__main__":
    main()
