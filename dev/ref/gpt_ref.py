#!/usr/bin/env python3
"""PyTorch reference for the GPT-2 / Llama training program: writes the dumps that test_gpt_fp4 compares to.

The model is GPT-2 (pre-LayerNorm blocks, learned position embedding, tied output head, tanh GELU)
with the parameter layout of the C/CUDA program: one flat float32 block holding, in this order,
  wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C) attprojw (L,C,C)
  attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C) fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C)
  lnfw (C) lnfb (C)
Rows V..Vp-1 of wte are zero padding: never an input, never a target, and their logits are cut off.
--arch llama: docs/MODELS.md's Llama family instead (see "Llama" below).

The script initializes from a seed, runs forward/backward once (logits, loss, grads), then
`nsteps` AdamW steps on the same batch, and writes everything to one little-endian file:

  int32   header[256]   [0]=20261129 magic, [1]=1 version, [2]=L, [3]=NH, [4]=C, [5]=V, [6]=Vp,
                        [7]=maxT, [8]=B, [9]=T, [10]=nsteps, [11]=num_parameters, [12]=seed,
                        [13]=compute dtype (32 or 64, informational),
                        [14]=quantization seed seed_q (SR keys; what the C test passes to gpt_set_recipe),
                        [15]=recipe index in llmc/fp4/recipe.h RECIPE_PRESETS (0 bf16, 1 nvfp4,
                             2 nvfp4-naive, 3 mxfp4, 4 mxfp4-2d, 5 ufp4, 6 nvfp4-4o6, 7 quartet2,
                             8 quartet2-4o6),
                        [16]=bf16_first, [17]=bf16_last (resolved block counts kept in BF16),
                        [18]=number of transformer blocks that run quantized GEMMs (0 for bf16),
                        [19]=arch (0 gpt2, 1 llama); Llama dumps only (GPT-2 dumps keep 0 in [19..24]):
                             [20]=KVH, [21]=H (MLP hidden), [22]=tied (0/1), [23]=RoPE theta as float32 bits,
                             [24]=RMSNorm eps as float32 bits,
                        [32..63]  recipe name, ASCII, NUL padded (128 bytes),
                        [64+8s..71+8s] slot s spec string (32 bytes, NUL padded), s = 0..5 in the order
                             fprop.x fprop.w dgrad.dy dgrad.w wgrad.dy wgrad.x; rest 0
  float32 hyper[16]     [0]=lr, [1]=beta1, [2]=beta2, [3]=eps, [4]=weight_decay, [5]=grad_clip; rest 0
  float32 params[num_parameters]        initial
  int32   x[B*T], int32 y[B*T]
  float32 logits[B*T*V]                 of the initial params, padded columns dropped
  float32 loss                          of the initial params
  float32 grads[num_parameters]         of the initial params, before clipping
  float32 step_losses[nsteps]           loss before update t (step_losses[0] == loss)
  float32 grad_norms[nsteps]            global gradient norm before clipping, at each step
  float32 params_after[num_parameters]  after nsteps updates

Default run (L 2, C 64, V 500, Vp 512, B 4, T 64, seed 1337, lr 1e-3, grad_clip 1.0): loss 6.2267 -> 5.3048
before the 10th update; the gradient norm exceeds 1.0 on step 4 only (1.088), so both the clipped and the
unclipped branch are exercised. The file is ~2.2 MB (three parameter blocks of 136,960 floats plus 128,000
logits). Check a dump without torch: python3 dev/ref/read_dump.py PATH

Numerics: computed in float64 by default (--dtype float32 to match an fp32 program instead). The
initial parameters and tokens are drawn in float32 on the CPU from a seeded generator, so they are
the same whatever --device or --dtype is chosen. TF32 is off and deterministic algorithms are on.

AdamW is written out by hand (no torch.optim) so the semantics are explicit:
  norm = sqrt(sum over all grads of g^2); if grad_clip > 0 and norm > grad_clip: g *= grad_clip/norm
  for each tensor: if it is a matrix (wte wpe qkvw attprojw fcw fcprojw) p *= 1 - lr*wd
  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m/(1-b1^t);  vhat = v/(1-b2^t)
  p -= lr * mhat / (sqrt(vhat) + eps)          t = 1..nsteps, constant lr
Caveat for comparisons: where a gradient is tiny, mhat/sqrt(vhat) is about sign(g), so an element
whose gradient is at rounding-noise level can move by up to ~lr per step in either direction.
Compare params_after with a tolerance of a few lr on such elements, or weight errors by |g|.

FP4 recipes (--recipe NAME, llmc/fp4/recipe.h presets; --recipe all writes every dump, see below).
Each transformer linear (layer l, kind k: qkv 0, attproj 1, fc 2, fcproj 3) of a block that is FP4
under the recipe (fp4_any and bf16_first <= l < L - bf16_last, the per-62 rule of recipe.h) runs
the three GEMMs of train_gpt_fp4.cu linear_forward / linear_backward on quantized operands:
  fprop: out = Q(X, fprop.x, axis 1) @ Q(W, fprop.w, axis 1)^T + b
  dgrad: dX  = Q(dY, dgrad.dy, axis 1) @ Q(W, dgrad.w, axis 0)
  wgrad: dW  = Q(dY, wgrad.dy, axis 0)^T @ Q(X, wgrad.x, axis 0)        db = column sums of dY
where Q(A, slot, axis) = fake * scale_dec of dev/fp4_ref.py's quantizer (fake = code * block scale,
BF16; in the rotated space when the slot has a Hadamard; the product of the two operands' scale_dec is
the GEMM's alpha in the C program) applied to A rounded to BF16 (float64 -> float32 -> BF16 RNE,
as the C program holds BF16 activations, gradients and weights). Axis 1 = blocks along the
contiguous (column) dimension of the row-major view, axis 0 = along rows. The GEMMs themselves,
the bias, db (from the unrounded dY) and everything outside the linears are float64 autograd.
A BF16 slot is not quantized and passes its tensor through in the reference precision (no BF16
rounding), so the bf16 recipe and BF16 slots are exactly the plain reference. SR keys:
  key = rng_key(seed_q, step, ((micro * L + l) * 4 + k) * 6 + slot), micro = 0,
  step = 0-based optimizer step (0 for logits/loss/grads and the first update, then 1..nsteps-1),
  SR bits: sr_bits16(key, r, c, cols) of view element (r, c) of the (rotated) row-major view, as dev/fp4_ref.py.
The quantizer used here (quantize_fast) is a block-vectorized copy of fp4_ref.quantize and is
checked bit for bit against it by --self-test (golden cases, every recipe slot) and, on every
quantizer call of a run, by --check-quant. Finite-difference checks do not apply to quantized models
(the quantized loss is piecewise constant in the operands); read_dump.py instead recomputes the
quantized forward in numpy with fp4_ref.quantize itself.

Regenerate every committed dump (bf16 -> gpt_ref.bin, nvfp4 mxfp4-2d ufp4 -> gpt_ref_<recipe>.bin; it also
trains nvfp4-naive and mxfp4 and prints every recipe's loss gap to bf16; about a minute on a CPU):
  python3 dev/ref/gpt_ref.py --recipe all
nvfp4-naive and mxfp4 dumps are not committed (size); write one with --recipe nvfp4-naive (or mxfp4).
quartet2 (MS-EDEN's 128-point rotations need 128 | C) has its own model (~4 MB):
  python3 dev/ref/gpt_ref.py --recipe quartet2 --channels 128 --vocab 250 --padded-vocab 256
    -> dev/ref/gpt_ref_quartet2.bin  (src=fprop slots: the forward's dequantized copy, re-made with its key;
       MS-EDEN signs keyed on the linear's dgrad.dy key, as train_gpt_fp4.cu)
Check the FP4 machinery: python3 dev/ref/gpt_ref.py --self-test   (read_dump.py checks any dump)
FP4 attention (--attention-fp4 SPEC [--attention-fp4-ds SPEC], docs/FULLSTACK_FP4.md section 1; QAttention below):
Q, K, V quantized per layer with straight-through gradients, dS quantized in the backward; specs in header words
[112..127]; the BF16 linears of the default model:
  python3 dev/ref/gpt_ref.py --attention-fp4 nvfp4-2d --out dev/ref/gpt_ref_attn4.bin
  python3 dev/ref/gpt_ref.py --arch llama --attention-fp4 nvfp4 --out dev/ref/llama_ref_attn4.bin

Llama (--arch llama, docs/MODELS.md; llmc/model/llama.h). Flags: --kv-heads KVH (default NH/2 here, so the
test model exercises GQA; the trainer's default is NH), --mlp-hidden H (default 2C here), --rope-theta
(10000), --norm-eps (1e-5), --tie-embeddings (off); theta and eps are rounded to float32 as the C program
holds them. Defaults --vocab 250 --padded-vocab 256 for llama. Parameters, in this order:
  wte (Vp,C) ln1w (L,C) qkvw (L,(NH+2KVH)HS,C) attprojw (L,C,C) ln2w (L,C) fcw (L,2H,C) fcprojw (L,C,H)
  lnfw (C) lm_head (Vp,C)           (lm_head absent with --tie-embeddings; HS = C/NH)
Init as GPT-2's above: matrices N(0, 0.02), attprojw/fcprojw N(0, 0.02/sqrt(2L)), norm weights 1 + N(0, 0.02),
all BF16-representable, drawn in storage order, padding rows of wte and lm_head zero. Weight decay on wte
qkvw attprojw fcw fcprojw lm_head, not on the norms. Block l on the residual x (float64 like the rest):
  qkv = rmsnorm(x; ln1w) @ qkvw^T                     q heads | k heads | v heads, the linear's output pre-RoPE
  q, k = rope(q), rope(k)                             rotate halves: (x_i, x_{i+HS/2}) at position t turn by
                                                      t * theta^(-2i/HS); cos/sin computed in double, rounded to
                                                      float32 (rope_table_fill), used as those float32 values
  a = causal softmax(q k^T / sqrt(HS)) v              GQA: query head h reads kv head h // (NH / KVH)
  x = x + a @ attprojw^T
  gu = rmsnorm(x; ln2w) @ fcw^T;  g, u = gu[:, :H], gu[:, H:];  x = x + (silu(g) * u) @ fcprojw^T
logits = rmsnorm(x; lnfw) @ lm_head^T (wte^T when tied); rmsnorm(x; w) = x / sqrt(mean(x^2) + eps) * w. No
biases, no position embedding. The FP4 recipes apply to the four linears exactly as for GPT-2 (kinds qkv 0,
attproj 1, fc = gate/up 2, fcproj = down 3; same SR keys, same BF16 first/last block rule), with no bias and
so no db. recipe_fits checks every reduction/blocking dimension: C, (NH+2KVH)HS, 2H, H and N = B*T.
The committed Llama dumps (~1.5 MB; quartet2 ~4.6 MB):
  python3 dev/ref/gpt_ref.py --arch llama --recipe all
    -> dev/ref/llama_ref.bin (bf16), llama_ref_nvfp4.bin, llama_ref_mxfp4-2d.bin   (L 2, C 64, NH 2, KVH 1,
       H 128, V 250, Vp 256; B, T, maxT, steps, seeds and hyperparameters as the GPT-2 default)
  python3 dev/ref/gpt_ref.py --arch llama --recipe quartet2 --channels 128 --heads 4
    -> dev/ref/llama_ref_quartet2.bin   (C 128, NH 4, KVH 2, H 256: MS-EDEN's 128 divides every dimension)
Check: python3 dev/ref/gpt_ref.py --arch llama --self-test (items 4-5 on the Llama model, and, when transformers
is installed, logits against LlamaForCausalLM holding the same weights: qkvw split into q/k/v_proj as is, fcw
rows [0, H) gate_proj and [H, 2H) up_proj, attprojw o_proj, fcprojw down_proj; agree to ~1e-7).
"""
import argparse
import math
import os
import sys

# Must be set before CUDA initializes for deterministic cuBLAS.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fp4_ref as F  # noqa: E402  (dev/fp4_ref.py: the numpy FP4 quantizer reference)

MAGIC = 20261129
VERSION = 1
HEADER_INTS = 256
HYPER_FLOATS = 16
ARCH_IDS = {"gpt2": 0, "llama": 1}  # header word [19]

# (name, shape as a function of the config, is_matrix i.e. weight-decayed)
def param_specs(L, C, Vp, maxT):
    return [
        ("wte", (Vp, C), True),
        ("wpe", (maxT, C), True),
        ("ln1w", (L, C), False),
        ("ln1b", (L, C), False),
        ("qkvw", (L, 3 * C, C), True),
        ("qkvb", (L, 3 * C), False),
        ("attprojw", (L, C, C), True),
        ("attprojb", (L, C), False),
        ("ln2w", (L, C), False),
        ("ln2b", (L, C), False),
        ("fcw", (L, 4 * C, C), True),
        ("fcb", (L, 4 * C), False),
        ("fcprojw", (L, C, 4 * C), True),
        ("fcprojb", (L, C), False),
        ("lnfw", (C,), False),
        ("lnfb", (C,), False),
    ]


def llama_param_specs(L, C, Vp, NH, KVH, H, tied):
    """docs/MODELS.md's Llama layout (llmc/model/llama.h): no biases, no positions, lm_head unless tied."""
    HS = C // NH
    specs = [
        ("wte", (Vp, C), True),
        ("ln1w", (L, C), False),
        ("qkvw", (L, (NH + 2 * KVH) * HS, C), True),
        ("attprojw", (L, C, C), True),
        ("ln2w", (L, C), False),
        ("fcw", (L, 2 * H, C), True),
        ("fcprojw", (L, C, H), True),
        ("lnfw", (C,), False),
    ]
    if not tied:
        specs.append(("lm_head", (Vp, C), True))
    return specs


def model_specs(cfg):
    """The parameter table of cfg's architecture, in storage order."""
    if cfg.get("arch", "gpt2") == "llama":
        return llama_param_specs(cfg["L"], cfg["C"], cfg["Vp"], cfg["NH"], cfg["KVH"], cfg["H"], cfg["tied"])
    return param_specs(cfg["L"], cfg["C"], cfg["Vp"], cfg["maxT"])


def init_params(cfg, gen):
    """Float32 CPU tensors holding BF16-representable values, drawn in layout order from `gen`."""
    L, V = cfg["L"], cfg["V"]
    std = 0.02
    proj_std = 0.02 / math.sqrt(2 * L)  # residual projections, as in GPT-2
    perturb = 0.02  # LayerNorm/RMSNorm and bias perturbation so their gradients are not trivial

    def normal(shape, s):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * s

    p = {}
    for name, shape, _ in model_specs(cfg):
        if name in ("attprojw", "fcprojw"):
            t = normal(shape, proj_std)
        elif name in ("wte", "wpe", "qkvw", "fcw", "lm_head"):
            t = normal(shape, std)
        elif name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + normal(shape, perturb)
        else:  # LayerNorm biases and linear biases
            t = normal(shape, perturb)
        # BF16-representable values: the program under test holds BF16 parameters, so the comparison
        # then measures its arithmetic, not the rounding of its inputs
        p[name] = t.to(torch.bfloat16).to(torch.float32)
    p["wte"][V:] = 0.0
    if "lm_head" in p:
        p["lm_head"][V:] = 0.0
    return p


def layernorm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as torch LayerNorm
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope_table(maxT, HS, theta):
    """cos, sin (maxT, HS/2) float32: angle t * theta^(-2i/HS) and its cos/sin in double, rounded to float
    (the C program's rope_table_fill). The float64 reference uses these float32 values as they are."""
    i = np.arange(HS // 2, dtype=np.float64)
    inv_freq = np.power(np.float64(theta), -2.0 * i / HS)
    ang = np.arange(maxT, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def apply_rope(t, cos, sin):
    """Rotate halves (transformers LlamaForCausalLM, GPT-NeoX): within each head, element i < HS/2 pairs
    with i + HS/2. t: (B, heads, T, HS); cos, sin: (T, HS/2) in t's dtype."""
    half = t.shape[-1] // 2
    x1, x2 = t[..., :half], t[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


# ---------------------------------------------------------------------------------------------------
# FP4 recipes: llmc/fp4/recipe.h RECIPE_PRESETS, in its order (the index is header word [15]).

SLOT_NAMES = ["fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x"]
NUM_LINEARS, NUM_SLOTS = 4, 6
# (name, slot spec strings, bf16_first_per62, bf16_last_per62)
RECIPE_PRESETS = [
    ("bf16", ["bf16", "bf16", "bf16", "bf16", "bf16", "bf16"], 0, 0),
    ("nvfp4", ["nvfp4", "nvfp4-2d", "nvfp4,sr", "nvfp4-2d", "nvfp4,sr,h16,fixed", "nvfp4,h16,fixed"], 2, 8),
    ("nvfp4-naive", ["nvfp4", "nvfp4", "nvfp4", "nvfp4", "nvfp4", "nvfp4"], 0, 0),
    ("mxfp4", ["mxfp4", "mxfp4", "mxfp4", "mxfp4", "mxfp4", "mxfp4"], 0, 0),
    ("mxfp4-2d", ["mxfp4-ceil", "mxfp4-2d", "mxfp4-2d,sr", "mxfp4-2d", "mxfp4-2d,sr", "mxfp4-ceil,sr"], 0, 0),
    ("ufp4", ["int4,h16,seed=1", "int4,h16,seed=1", "int4,sr,h16,seed=1", "int4,h16,seed=1", "int4,sr,h16,seed=1",
              "int4,h16,seed=1"], 0, 0),
    ("nvfp4-4o6", ["nvfp4,4o6", "nvfp4-2d,4o6", "nvfp4,4o6,sr", "nvfp4-2d,4o6", "nvfp4,4o6,sr,h16,fixed",
                   "nvfp4,4o6,h16,fixed"], 2, 8),
    ("quartet2", ["nvfp4", "nvfp4", "nvfp4,eden", "nvfp4,eden,src=fprop", "nvfp4,eden", "nvfp4,eden,src=fprop"], 0, 0),
    ("quartet2-4o6", ["nvfp4,4o6", "nvfp4,4o6", "nvfp4,eden", "nvfp4,eden,src=fprop", "nvfp4,eden",
                      "nvfp4,eden,src=fprop"], 0, 0),
]
RECIPE_NAMES = [r[0] for r in RECIPE_PRESETS]
# The dumps kept in the repository (~2.2 MB each; all six would exceed the ~10 MB budget). --recipe all
# still trains every preset (for the loss-gap table) but writes only these; --recipe NAME writes any one.
DUMPED_RECIPES = ["bf16", "nvfp4", "mxfp4-2d", "ufp4"]
# quartet2's MS-EDEN rotates 128 elements along every backward reduction dimension (OC and N), which the
# default model's 64 channels do not fill: its dump is written on its own, on a model with 128 channels
# (dev/ref/gpt_ref_quartet2.bin, see QUARTET2_DUMP_ARGS); --recipe all trains only the presets that fit.
QUARTET2_DUMP_ARGS = "--recipe quartet2 --channels 128 --vocab 250 --padded-vocab 256"
# The Llama dumps (dev/ref/llama_ref*.bin): --arch llama --recipe all writes these three on the default Llama
# test model (L 2, C 64, NH 2, KVH 1, H 128, V 250, Vp 256); quartet2 on its own 128-channel model.
LLAMA_DUMPED_RECIPES = ["bf16", "nvfp4", "mxfp4-2d"]
LLAMA_QUARTET2_DUMP_ARGS = "--arch llama --recipe quartet2 --channels 128 --heads 4"


def linear_dims(cfg):
    """Every dimension a linear's GEMMs reduce over or block along: the input and output widths of the
    four linears of a block, and the token count N = B*T (wgrad's reduction)."""
    C, N = cfg["C"], cfg["B"] * cfg["T"]
    if cfg.get("arch", "gpt2") == "llama":
        HS = C // cfg["NH"]
        return (C, (cfg["NH"] + 2 * cfg["KVH"]) * HS, 2 * cfg["H"], cfg["H"], N)
    return (C, 3 * C, 4 * C, N)


def recipe_fits(rec, dims):
    """Whether every quantized slot's block and Hadamard lengths divide this model's dimensions (linear_dims)."""
    for s in rec["specs"]:
        if s is not None and any(n % max(s["l"], s["hadamard"]) for n in dims):
            return False
    return True


def parse_slot(text):
    """None for a BF16 slot (not quantized), else fp4_ref's parsed spec dict (plus its text)."""
    if text == "bf16" or text.split(",")[0] == "bf16" or "bf16" in text.split(","):
        return None
    sp = F.parse_spec(text)
    sp["text"] = text
    sp["mask"] = None if sp["signs"] == "step" else F.sign_mask(sp)   # step signs: drawn per call (quantize)
    return sp


def make_recipe(name, L, slots=None, bf16_first=-1, bf16_last=-1):
    """Resolves a preset as gpt_set_recipe does (recipe_resolve_layers, recipe_check, fp4_any)."""
    idx = RECIPE_NAMES.index(name) if name in RECIPE_NAMES else -1
    texts = list(slots) if slots is not None else list(RECIPE_PRESETS[idx][1])
    f62, l62 = (RECIPE_PRESETS[idx][2], RECIPE_PRESETS[idx][3]) if idx >= 0 else (0, 0)
    first = bf16_first if bf16_first >= 0 else int(math.floor(f62 * L / 62.0 + 0.5))
    last = bf16_last if bf16_last >= 0 else int(math.floor(l62 * L / 62.0 + 0.5))
    assert first + last <= L
    specs = [parse_slot(t) for t in texts]
    for g in range(3):  # recipe_check: both operands of a GEMM use the same Hadamard
        a, b = specs[2 * g], specs[2 * g + 1]
        ha, hb = (a["hadamard"] if a else 0), (b["hadamard"] if b else 0)
        assert ha == hb and (not ha or (a["signs"], a["seed"]) == (b["signs"], b["seed"])), \
            f"recipe {name}: operands of GEMM {g} use different Hadamards"
    fp4_any = any(s is not None for s in specs) and first + last < L
    layers = [fp4_any and first <= l < L - last for l in range(L)]
    return dict(name=name, index=idx, texts=texts, specs=specs, bf16_first=first, bf16_last=last,
                fp4_any=fp4_any, layers=layers)


def quantize_fast(sp, x, axis, key):
    """fp4_ref.quantize, vectorized over blocks (same arithmetic, checked bit for bit against it).
    x: float32 (rows, cols), BF16-representable. Returns (fake BF16 bits in the view layout, scale_dec)."""
    grid, W, Lb, n = sp["grid"], sp["w"], sp["l"], sp["hadamard"]
    maxval = np.float32(F.GRIDS[grid][-1])
    FMAX = np.float32(3.4028235e38)
    rows, cols = x.shape
    T = np.ascontiguousarray(x if axis == 1 else x.T, dtype=np.float32)   # operand M x K, K = reduction
    M, K = T.shape
    assert K % Lb == 0 and M % W == 0 and (n == 0 or K % n == 0), (sp["text"], rows, cols, axis)
    if n:
        T = F.round_bf16(F.hadamard_f32(T.reshape(M, K // n, n), n, sp["mask"]).reshape(M, K))
    amax = F.amax_nan(T)
    if sp["scale"] == "e4m3":
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            s_enc = np.fmin(np.float32(maxval * np.float32(448)) / amax, FMAX)
        if amax == 0 or s_enc == 0:
            s_enc = np.float32(1)
        s_enc = np.float32(s_enc)
        s_dec_t = np.float32(np.float32(1) / s_enc)
    else:
        s_enc = s_dec_t = np.float32(1)
    Mb, Kb = M // W, K // Lb
    Tb = T.reshape(Mb, W, Kb, Lb).transpose(0, 2, 1, 3)                   # (Mb, Kb, W, L)
    bamax = np.abs(Tb).max(axis=(2, 3)).astype(np.float32)                # NaN propagates, as amax_nan
    nan_block = np.zeros((Mb, Kb), dtype=bool)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if sp["scale"] == "e4m3":
            mult = np.float32(s_enc * np.float32(np.float32(1) / maxval))
            sdec, _ = F.e4m3_rne_satfinite(np.fmin((bamax * mult).astype(np.float32), FMAX))
            sdec = sdec.astype(np.float32)
            inv = np.fmin(np.float32(1) / (sdec * s_dec_t).astype(np.float32), FMAX).astype(np.float32)
        else:
            nan_block = ~np.isfinite(bamax)
            b64 = np.where(nan_block, 1.0, bamax.astype(np.float64))
            _, ex = np.frexp(b64)
            _, exm = np.frexp(np.float64(maxval))
            e = (ex.astype(np.int64) - 1) - (int(exm) - 1)
            if sp["scale"] == "e8m0ceil":
                e = e + (np.ldexp(np.float64(maxval), e) < b64)
            e = np.where(b64 == 0, -127, np.clip(e, -127, 127))
            sdec = np.ldexp(np.float32(1), e).astype(np.float32)
            inv = np.ldexp(np.float32(1), -e).astype(np.float32)
            sdec = np.where(nan_block, np.float32(np.nan), sdec).astype(np.float32)
            inv = np.where(nan_block, np.float32(0), inv).astype(np.float32)
        v = (Tb * inv[:, :, None, None]).astype(np.float32)
    if sp["rounding"] == "sr":
        ii = np.broadcast_to(np.arange(M, dtype=np.uint64)[:, None], (M, K))
        kk = np.broadcast_to(np.arange(K, dtype=np.uint64)[None, :], (M, K))
        vr, vc = (ii, kk) if axis == 1 else (kk, ii)   # the view's (row, col) of each operand element
        blk = lambda a: a.reshape(Mb, W, Kb, Lb).transpose(0, 2, 1, 3)
        c = F.grid_sr(grid, v, F.sr_bits16(key, blk(vr), blk(vc), cols))
    else:
        c = F.grid_rne(grid, v)
    with np.errstate(over="ignore", invalid="ignore"):
        fk = F.bf16_rne_bits(F.code_value(grid, c) * sdec[:, :, None, None])
    fk = np.where(nan_block[:, :, None, None], np.uint16(0x7FC0), fk).astype(np.uint16)
    fake = fk.transpose(0, 2, 1, 3).reshape(M, K)
    if axis == 0:
        fake = fake.T
    return np.ascontiguousarray(fake), np.float32(s_dec_t)


def to_bf16_f32(t):
    """A float64 torch tensor as the BF16 tensor the C program holds: float64 -> float32 -> BF16 RNE."""
    return F.round_bf16(t.detach().cpu().numpy().astype(np.float32))


class QuantState:
    """What the quantized linears need besides their tensors: the recipe, seed_q, the step and micro."""

    def __init__(self, recipe, seed_q, L, check=False):
        self.recipe, self.seed_q, self.L, self.check = recipe, seed_q, L, check
        self.step, self.micro = 0, 0
        self.calls = self.checked = 0

    def tensor_id(self, l, kind, slot):
        return ((self.micro * self.L + l) * NUM_LINEARS + kind) * NUM_SLOTS + slot

    def quantize(self, x, l, kind, slot, axis):
        """The slot's copy of x (float32, BF16-representable): (fake BF16 bits in x's layout, scale_dec)."""
        sp = self.recipe["specs"][slot]
        key = int(F.rng_key(self.seed_q, self.step, self.tensor_id(l, kind, slot)))
        if sp["scale"] == "4o6" or sp["rounding"] == "eden":   # fp4_ref.quantize itself (the dumps are small)
            # MS-EDEN's per-call signs: drawn from the linear's dgrad.dy key of this step and micro-batch,
            # shared by its four backward operands (llmc/fp4/formats.h quant_step_sign_mask)
            sign_key = int(F.rng_key(self.seed_q, self.step, self.tensor_id(l, kind, 2))) if sp["signs"] == "step" else None
            r = F.quantize(sp["text"], F.bf16_rne_bits(x), x.shape[0], x.shape[1], axis, key, sign_key)
            return r["fake"], np.float32(r["scale_dec"])
        return quantize_fast(sp, x, axis, key)

    def source(self, t2d, l, kind, slot):
        """The BF16 source of a slot as float32: the tensor itself, or for a src=fprop slot (MS-EDEN's W and X,
        docs/NUMERICS_NEXT.md 2.4) the forward's copy of it dequantized, BF16(FP32(fake) * scale_dec), when the
        forward quantized it (the same spec and key give the same copy)."""
        x = to_bf16_f32(t2d)
        sp = self.recipe["specs"][slot]
        fslot = {3: 1, 5: 0}.get(slot)   # dgrad.w <- fprop.w, wgrad.x <- fprop.x
        if sp is None or sp.get("src", "bf16") != "fprop" or self.recipe["specs"][fslot] is None:
            return x
        fake, sdec = self.quantize(x, l, kind, fslot, 1)
        return F.round_bf16((F.bf16_to_f32(fake) * np.float32(sdec)).astype(np.float32))

    def operand(self, t2d, l, kind, slot, axis):
        """Q(t2d, slot, axis) as float64: the dequantized operand the GEMM multiplies."""
        sp = self.recipe["specs"][slot]
        if sp is None:
            return t2d  # BF16 slot: passes through (reference precision)
        x = self.source(t2d, l, kind, slot)
        key = int(F.rng_key(self.seed_q, self.step, self.tensor_id(l, kind, slot)))
        fake, sdec = self.quantize(x, l, kind, slot, axis)
        self.calls += 1
        if self.check and sp["scale"] != "4o6" and sp["rounding"] != "eden":   # (those are fp4_ref.quantize's)
            r = F.quantize(sp["text"], F.bf16_rne_bits(x), x.shape[0], x.shape[1], axis, key)
            assert np.array_equal(r["fake"], fake) and r["scale_dec"].tobytes() == sdec.tobytes(), \
                f"quantize_fast != fp4_ref.quantize: {sp['text']} l={l} kind={kind} slot={slot}"
            self.checked += 1
        q = F.bf16_to_f32(fake).astype(np.float64) * np.float64(sdec)  # exact: 8 x 24 significant bits
        return torch.from_numpy(q).to(t2d.device, t2d.dtype)   # (--dtype float32: rounded to float32)


class QLinear(torch.autograd.Function):
    """out = Q(X) Q(W)^T + b with the backward of train_gpt_fp4.cu linear_backward (three quantized GEMMs)."""

    @staticmethod
    def forward(ctx, a, w, b, st, l, kind):
        ctx.st, ctx.l, ctx.kind = st, l, kind
        ctx.save_for_backward(a, w)
        K = a.shape[-1]
        a2 = a.reshape(-1, K)
        xq = st.operand(a2, l, kind, 0, 1)
        wq = st.operand(w, l, kind, 1, 1)
        out = (xq @ wq.T).view(*a.shape[:-1], w.shape[0])
        return out if b is None else out + b

    @staticmethod
    def backward(ctx, g):
        a, w = ctx.saved_tensors
        st, l, kind = ctx.st, ctx.l, ctx.kind
        K, OC = a.shape[-1], w.shape[0]
        a2, g2 = a.reshape(-1, K), g.reshape(-1, OC)
        dy_d = st.operand(g2, l, kind, 2, 1)
        w_d = st.operand(w, l, kind, 3, 0)
        dy_w = st.operand(g2, l, kind, 4, 0)
        x_w = st.operand(a2, l, kind, 5, 0)
        da = (dy_d @ w_d).view(a.shape)
        dw = dy_w.t() @ x_w           # the form autograd uses for a @ w.T, so BF16 slots match it exactly
        db = g.sum(tuple(range(g.dim() - 1))) if ctx.needs_input_grad[2] else None   # no bias (Llama): None
        return da, dw, db, None, None, None


def make_linear(st):
    """The `lin` hook for forward(): quantized GEMMs in the recipe's FP4 blocks, plain elsewhere."""
    if st is None:
        return plain_linear

    def lin(a, w, b, l, kind):
        if not st.recipe["layers"][l]:
            return plain_linear(a, w, b, l, kind)
        return QLinear.apply(a, w, b, st, l, kind)
    return lin


def plain_linear(a, w, b, l, kind):
    return a @ w.T if b is None else a @ w.T + b


def plain_attention(q, k, v, l):
    """Causal softmax attention: q (B,NH,T,HS), k and v (B,KVH,T,HS); query head hq reads key/value head
    hq // (NH / KVH). Returns (B,T,NH*HS)."""
    B, NH, T, HS = q.shape
    if k.shape[1] != NH:
        k = k.repeat_interleave(NH // k.shape[1], dim=1)
        v = v.repeat_interleave(NH // v.shape[1], dim=1)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
    att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).reshape(B, T, NH * HS)


# --attention-fp4 (llmc/fp4/attention_fp4.h, docs/FULLSTACK_FP4.md section 1): Q, K, V quantized once per layer and
# step, the forward and the backward both multiply those copies (straight-through: the gradients with respect to the
# dequantized copies pass to the BF16 q, k, v), P.V, dO.V^T and P^T.dO unquantized, dS = P (dP - D) rounded to BF16
# and quantized by the dS spec (one copy for a square 2D tile; else along keys for dQ and along queries for dK).
ATTN_FP4_KEY_BASE = 0xA7700000   # the trainer's attn_fp4_key_of: rng_key(seed_q, step, base + micro * L + layer)
ATTN_FP4_PART_ID = 0xA770        # attn_fp4_key: rng_key(layer key, 0, 0xA770 + part), part 0 Q, 1 K, 2 V, 3 dS


class AttnFp4State:
    def __init__(self, qkv_text, ds_text, seed_q, L):
        self.qkv_text = qkv_text
        self.ds_text = ds_text if ds_text is not None else (
            qkv_text if qkv_text == "bf16" or qkv_text.startswith("mxfp8") else qkv_text + ",sr")
        self.qkv, self.ds = parse_slot(self.qkv_text), parse_slot(self.ds_text)
        for sp, t in ((self.qkv, self.qkv_text), (self.ds, self.ds_text)):
            assert sp is None or (sp["hadamard"] == 0 and sp["rounding"] != "eden"), f"attention spec {t}: not supported"
        self.seed_q, self.L = seed_q, L
        self.step, self.micro = 0, 0

    def key(self, l, part):
        layer_key = int(F.rng_key(self.seed_q, self.step, ATTN_FP4_KEY_BASE + self.micro * self.L + l))
        return int(F.rng_key(layer_key, 0, ATTN_FP4_PART_ID + part))


def attn_dequant(sp, x2, axis, key, like):
    """The spec's copy of the (rows, cols) float64 tensor x2 (rounded to BF16 first, as the program holds it),
    dequantized exactly, as a tensor like `like`."""
    fake, sdec = quantize_fast(sp, to_bf16_f32(x2), axis, key)
    d = F.bf16_to_f32(fake).astype(np.float64) * np.float64(sdec)
    return torch.from_numpy(d).to(like.device, like.dtype)


class QAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ast, l):
        B, NH, T, HS = q.shape
        KVH = k.shape[1]
        g = NH // KVH

        def quant(t, nh, part, axis):   # (B,nh,T,HS) -> its copy, as the qkv slice (B*T, nh*HS) is quantized
            if ast.qkv is None:
                return t
            x2 = t.transpose(1, 2).reshape(B * T, nh * HS)
            return attn_dequant(ast.qkv, x2, axis, ast.key(l, part), t).view(B, T, nh, HS).transpose(1, 2)
        qd, kd, vd = quant(q, NH, 0, 1), quant(k, KVH, 1, 1), quant(v, KVH, 2, 0)   # Q, K along d; V along tokens
        kr, vr = kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        P = ((qd @ kr.transpose(-2, -1)) * (1.0 / math.sqrt(HS))).masked_fill(~causal, float("-inf")).softmax(dim=-1)
        o = P @ vr
        ctx.save_for_backward(qd, kr, vr, P, o)
        ctx.ast, ctx.l, ctx.g = ast, l, g
        return o.transpose(1, 2).reshape(B, T, NH * HS)

    @staticmethod
    def backward(ctx, gy):
        qd, kr, vr, P, o = ctx.saved_tensors
        ast, l, g = ctx.ast, ctx.l, ctx.g
        B, NH, T, HS = qd.shape
        scale = 1.0 / math.sqrt(HS)
        dO = gy.reshape(B, T, NH, HS).transpose(1, 2)
        dP = dO @ vr.transpose(-2, -1)
        dS = P * (dP - (dO * o).sum(-1, keepdim=True))
        if ast.ds is not None:
            x2, key = dS.reshape(B * NH * T, T), ast.key(l, 3)
            dSr = attn_dequant(ast.ds, x2, 1, key, dS).view(B, NH, T, T)
            dSc = dSr if ast.ds["w"] == ast.ds["l"] else attn_dequant(ast.ds, x2, 0, key, dS).view(B, NH, T, T)
        else:
            dSr = dSc = dS
        dq = scale * (dSr @ kr)
        dk = (scale * (dSc.transpose(-2, -1) @ qd)).view(B, NH // g, g, T, HS).sum(2)
        dv = (P.transpose(-2, -1) @ dO).view(B, NH // g, g, T, HS).sum(2)
        return dq, dk, dv, None, None


def make_attention(ast):
    if ast is None:
        return plain_attention
    return lambda q, k, v, l: QAttention.apply(q, k, v, ast, l)


def forward(p, x, cfg, lin=plain_linear, attn=plain_attention):
    """Returns logits (B,T,V) with the padded vocabulary columns removed."""
    if cfg.get("arch", "gpt2") == "llama":
        return forward_llama(p, x, cfg, lin, attn)
    L, NH, C, V = cfg["L"], cfg["NH"], cfg["C"], cfg["V"]
    B, T = x.shape
    HS = C // NH
    pos = torch.arange(T, device=x.device)
    h = p["wte"][x] + p["wpe"][pos]  # (B,T,C)
    for l in range(L):
        a = layernorm(h, p["ln1w"][l], p["ln1b"][l])
        qkv = lin(a, p["qkvw"][l], p["qkvb"][l], l, 0)  # (B,T,3C): q | k | v
        q, k, v = qkv.split(C, dim=-1)
        # heads are contiguous chunks of HS channels within q, k and v
        q = q.view(B, T, NH, HS).transpose(1, 2)  # (B,NH,T,HS)
        k = k.view(B, T, NH, HS).transpose(1, 2)
        v = v.view(B, T, NH, HS).transpose(1, 2)
        y = attn(q, k, v, l)
        h = h + lin(y, p["attprojw"][l], p["attprojb"][l], l, 1)
        a = layernorm(h, p["ln2w"][l], p["ln2b"][l])
        f = gelu_tanh(lin(a, p["fcw"][l], p["fcb"][l], l, 2))
        h = h + lin(f, p["fcprojw"][l], p["fcprojb"][l], l, 3)
    h = layernorm(h, p["lnfw"], p["lnfb"])
    logits = h @ p["wte"].T  # (B,T,Vp), tied head
    return logits[..., :V]


def forward_llama(p, x, cfg, lin=plain_linear, attn=plain_attention):
    """docs/MODELS.md's Llama block: RMSNorm, qkv linear (pre-RoPE output), RoPE on q and k, causal GQA,
    attproj, RMSNorm, fc (gate rows then up rows), SwiGLU, fcproj; no biases, no positions."""
    L, NH, KVH, C, V, H = cfg["L"], cfg["NH"], cfg["KVH"], cfg["C"], cfg["V"], cfg["H"]
    eps = cfg["eps"]
    B, T = x.shape
    HS = C // NH
    dt = p["wte"].dtype
    cos, sin = (torch.from_numpy(a[:T]).to(x.device, dt) for a in rope_table(cfg["maxT"], HS, cfg["theta"]))
    h = p["wte"][x]  # (B,T,C)
    for l in range(L):
        a = rmsnorm(h, p["ln1w"][l], eps)
        qkv = lin(a, p["qkvw"][l], None, l, 0)  # (B,T,(NH+2KVH)HS): q heads | k heads | v heads
        q, k, v = qkv.split([NH * HS, KVH * HS, KVH * HS], dim=-1)
        q = apply_rope(q.view(B, T, NH, HS).transpose(1, 2), cos, sin)  # (B,NH,T,HS)
        k = apply_rope(k.view(B, T, KVH, HS).transpose(1, 2), cos, sin)  # (B,KVH,T,HS)
        v = v.view(B, T, KVH, HS).transpose(1, 2)
        y = attn(q, k, v, l)   # GQA: query head hq reads key/value head hq // (NH / KVH)
        h = h + lin(y, p["attprojw"][l], None, l, 1)
        a = rmsnorm(h, p["ln2w"][l], eps)
        gu = lin(a, p["fcw"][l], None, l, 2)  # (B,T,2H): gate g | up u
        g, u = gu[..., :H], gu[..., H:]
        f = g / (1.0 + torch.exp(-g)) * u  # silu(g) * u
        h = h + lin(f, p["fcprojw"][l], None, l, 3)
    h = rmsnorm(h, p["lnfw"], eps)
    logits = h @ (p["wte"] if cfg["tied"] else p["lm_head"]).T  # (B,T,Vp)
    return logits[..., :V]


def loss_fn(logits, y):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="mean")


def forward_backward(p, x, y, cfg, lin=plain_linear, attn=plain_attention):
    for t in p.values():
        t.grad = None
    logits = forward(p, x, cfg, lin, attn)
    loss = loss_fn(logits, y)
    loss.backward()
    return logits.detach(), loss.detach(), {k: t.grad.detach().clone() for k, t in p.items()}


def adamw_step(p, g, m, v, t, hp, decayed):
    """One hand-written AdamW step with global-norm clipping. Returns the norm before clipping."""
    norm = torch.sqrt(sum((gi.double() ** 2).sum() for gi in g.values())).item()
    scale = 1.0
    if hp["grad_clip"] > 0 and norm > hp["grad_clip"]:
        scale = hp["grad_clip"] / norm
    lr, b1, b2, eps, wd = hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["weight_decay"]
    with torch.no_grad():
        for k in p:
            gk = g[k] * scale
            if decayed[k]:
                p[k].mul_(1.0 - lr * wd)
            m[k].mul_(b1).add_((1.0 - b1) * gk)
            v[k].mul_(b2).add_((1.0 - b2) * gk * gk)
            mhat = m[k] / (1.0 - b1 ** t)
            vhat = v[k] / (1.0 - b2 ** t)
            p[k].sub_(lr * mhat / (torch.sqrt(vhat) + eps))
    return norm, scale < 1.0


def flatten(tensors, names):
    return np.concatenate([tensors[n].detach().cpu().double().numpy().astype("<f4").ravel() for n in names])


def setup_determinism(device):
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")


def train(cfg, hp, p0, x, y, dev, dtype, decayed, st=None, ast=None):
    """Forward/backward at the initial params, then nsteps AdamW steps; st: QuantState or None (plain); ast:
    AttnFp4State (--attention-fp4) or None."""
    lin = make_linear(st)
    attn = make_attention(ast)
    # a copy (with --dtype float32 on the CPU, .to() would return p0's own tensors and the steps would move p0)
    p = {k: t.to(dev, dtype, copy=True).requires_grad_(True) for k, t in p0.items()}
    xd, yd = x.to(dev), y.to(dev)
    m = {k: torch.zeros_like(t) for k, t in p.items()}
    v = {k: torch.zeros_like(t) for k, t in p.items()}
    step_losses, grad_norms, clipped = [], [], []
    logits0 = loss0 = grads0 = None
    for t in range(1, cfg["nsteps"] + 1):
        if st is not None:
            st.step = t - 1  # the C program's 0-based optimizer step, the SR keys' `step`
        if ast is not None:
            ast.step = t - 1
        logits, loss, g = forward_backward(p, xd, yd, cfg, lin, attn)
        if t == 1:
            logits0, loss0, grads0 = logits, loss.item(), g
        norm, was_clipped = adamw_step(p, g, m, v, t, hp, decayed)
        step_losses.append(loss.item())
        grad_norms.append(norm)
        clipped.append(was_clipped)
    # the loss after the last update (printed only, not in the dump), at step nsteps
    if st is not None:
        st.step = cfg["nsteps"]
    if ast is not None:
        ast.step = cfg["nsteps"]
    with torch.no_grad():
        final_loss = loss_fn(forward(p, xd, cfg, lin, attn), yd).item()
    return dict(p=p, logits0=logits0, loss0=loss0, grads0=grads0, step_losses=step_losses,
                grad_norms=grad_norms, clipped=clipped, final_loss=final_loss)


def ascii_words(text, nwords):
    b = text.encode("ascii")
    assert len(b) < 4 * nwords, text
    return np.frombuffer(b.ljust(4 * nwords, b"\0"), dtype="<i4")


def f32_bits(v):
    return int(np.array([v], dtype="<f4").view("<i4")[0])


def make_header(cfg, num_parameters, seed, dtype, recipe, seed_q, ast=None):
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:14] = [MAGIC, VERSION, cfg["L"], cfg["NH"], cfg["C"], cfg["V"], cfg["Vp"], cfg["maxT"],
                   cfg["B"], cfg["T"], cfg["nsteps"], num_parameters, seed, 64 if dtype == torch.float64 else 32]
    header[14:19] = [seed_q, recipe["index"], recipe["bf16_first"], recipe["bf16_last"], sum(recipe["layers"])]
    if cfg.get("arch", "gpt2") == "llama":  # GPT-2 dumps keep 0 in [19..24] (arch 0 = gpt2)
        header[19:25] = [ARCH_IDS["llama"], cfg["KVH"], cfg["H"], int(cfg["tied"]), f32_bits(cfg["theta"]),
                         f32_bits(cfg["eps"])]
    header[32:64] = ascii_words(recipe["name"], 32)
    for s in range(NUM_SLOTS):
        header[64 + 8 * s:72 + 8 * s] = ascii_words(recipe["texts"][s], 8)
    if ast is not None:   # --attention-fp4: its Q/K/V and dS specs (zeros: off)
        header[112:120] = ascii_words(ast.qkv_text, 8)
        header[120:128] = ascii_words(ast.ds_text, 8)
    return header


def write_dump(path, header, hp, init_flat, x, y, res, names):
    hyper = np.zeros(HYPER_FLOATS, dtype="<f4")
    hyper[:6] = [hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["weight_decay"], hp["grad_clip"]]
    out_dir = os.path.dirname(path)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    with open(path, "wb") as f:
        for arr in (header, hyper, init_flat,
                    x.numpy().astype("<i4").ravel(), y.numpy().astype("<i4").ravel(),
                    res["logits0"].cpu().double().numpy().astype("<f4").ravel(),
                    np.array([res["loss0"]], dtype="<f4"), flatten(res["grads0"], names),
                    np.array(res["step_losses"], dtype="<f4"), np.array(res["grad_norms"], dtype="<f4"),
                    flatten(res["p"], names)):
            f.write(arr.tobytes())
    return os.path.getsize(path)


def default_out(recipe_name, arch="gpt2"):
    here = os.path.join("dev", "ref")
    stem = "llama_ref" if arch == "llama" else "gpt_ref"
    return os.path.join(here, f"{stem}.bin" if recipe_name == "bf16" else f"{stem}_{recipe_name}.bin")


# ---------------------------------------------------------------------------------------------------
# --self-test: the checks that make the FP4 reference trustworthy (no GPU, a minute or two)


def self_test(cfg, hp, p0, x, y, dev, dtype, decayed, seed_q):
    ok = True

    def report(name, good, msg):
        nonlocal ok
        ok &= bool(good)
        print(f"  {'ok  ' if good else 'FAIL'} {name}: {msg}")

    print("self test:")
    # 1. The presets agree with llmc/fp4/recipe.h (parsed from its text).
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    rh = next((f for f in (os.path.join(root, "llmc", "fp4", "recipe.h"), os.path.join(root, "llmc", "recipe.h"))
               if os.path.exists(f)), None)
    if rh is None:
        report("presets", False, "llmc/fp4/recipe.h not found: RECIPE_PRESETS not checked")
    else:
        import re
        txt = open(rh).read()
        body = txt[txt.index("RECIPE_PRESETS[] = {"):]
        body = body[:body.index("};")]
        found = re.findall(r'\{"([\w-]+)",\s*\{([^}]*)\},\s*(\d+),\s*(\d+)', body)
        parsed = [(n, re.findall(r'"([^"]*)"', s), int(a), int(b)) for n, s, a, b in found]
        report("presets", parsed == [(n, list(s), a, b) for n, s, a, b in RECIPE_PRESETS],
               f"{len(parsed)} presets of llmc/fp4/recipe.h == RECIPE_PRESETS here")
    # 2. quantize_fast == fp4_ref.quantize: the golden cases and every recipe slot spec, both axes.
    rng = np.random.default_rng(20261129)
    n_cases = 0
    bad = []
    cases = [(s, r, c, a, k) for _, s, r, c, a, k in F.CASES]
    for _, texts, _, _ in RECIPE_PRESETS:
        for t in texts:
            if t != "bf16":
                cases += [(t, 64, 96, a, k) for a in (0, 1) for k in ("normal", "heavy", "outlier", "zeros")]
    n_direct = 0
    for spec, rows, cols, axis, kind in cases:
        if kind == "outlier" and (rows if axis == 0 else cols) % 16:
            continue
        sp0 = F.parse_spec(spec)
        if sp0["scale"] == "4o6" or sp0["rounding"] == "eden":   # QuantState.quantize runs fp4_ref.quantize itself
            n_direct += 1
            continue
        xb = F.make_data(kind, rows, cols, rng, axis)
        key = int(F.rng_key(0x5EED, rows, cols + axis))
        r = F.quantize(spec, xb, rows, cols, axis, key)
        sp = parse_slot(spec)
        fake, sdec = quantize_fast(sp, F.bf16_to_f32(xb).reshape(rows, cols), axis, key)
        n_cases += 1
        if not (np.array_equal(r["fake"], fake) and r["scale_dec"].tobytes() == sdec.tobytes()):
            bad.append(f"{spec}/{kind}/axis{axis}")
    report("quantize_fast", not bad, f"bit-identical to fp4_ref.quantize on {n_cases} cases ({n_direct} 4o6/eden "
           "cases skipped: those slots call fp4_ref.quantize itself)" + (f"; differs on {bad[:5]}" if bad else ""))
    # 3. A no-SR, no-Hadamard quantized linear against a direct numpy computation (small example).
    for rname in ("nvfp4-naive", "mxfp4"):
        rec = make_recipe(rname, 1)
        st = QuantState(rec, seed_q, 1)
        g = torch.Generator().manual_seed(7)
        N, K, OC = 32, 64, 96
        a = (torch.randn(N, K, generator=g) * 0.7).double().requires_grad_(True)
        w = (torch.randn(OC, K, generator=g) * 0.05).to(torch.bfloat16).double().requires_grad_(True)
        b = (torch.randn(OC, generator=g) * 0.1).double().requires_grad_(True)
        dy = torch.randn(N, OC, generator=g).double()
        out = QLinear.apply(a, w, b, st, 0, 2)
        out.backward(dy)

        def nq(arr, slot, axis):  # direct: fp4_ref.quantize on BF16 bits, dequantize, float64
            xb = F.bf16_rne_bits(arr.astype(np.float32))
            spec = rec["texts"][slot]
            r = F.quantize(spec, xb, arr.shape[0], arr.shape[1], axis, 0)
            return F.bf16_to_f32(r["fake"]).astype(np.float64) * np.float64(r["scale_dec"])
        an, wn, bn, dyn = a.detach().numpy(), w.detach().numpy(), b.detach().numpy(), dy.numpy()
        ref_out = nq(an, 0, 1) @ nq(wn, 1, 1).T + bn
        ref_da = nq(dyn, 2, 1) @ nq(wn, 3, 0)
        ref_dw = nq(dyn, 4, 0).T @ nq(an, 5, 0)
        ref_db = dyn.sum(0)
        errs = [np.abs(t - r).max() / np.abs(r).max() for t, r in
                ((out.detach().numpy(), ref_out), (a.grad.numpy(), ref_da), (w.grad.numpy(), ref_dw),
                 (b.grad.numpy(), ref_db))]
        # and the quantization did something: the unquantized product is measurably different
        diff = np.abs(an @ wn.T + bn - ref_out).max() / np.abs(ref_out).max()
        report(f"qlinear {rname}", max(errs) < 1e-13 and diff > 1e-3,
               f"out/dX/dW/db vs numpy max rel err {max(errs):.1e}; quantization moves out by {diff:.3f}")
    # 4. The quantized path with every slot BF16, forced on every block, == the plain reference exactly.
    plain = train(cfg, hp, p0, x, y, dev, dtype, decayed)
    rec = make_recipe("bf16", cfg["L"])
    rec["layers"] = [True] * cfg["L"]  # force QLinear everywhere (the C program would skip it: fp4_any = 0)
    st = QuantState(rec, seed_q, cfg["L"])
    forced = train(cfg, hp, p0, x, y, dev, dtype, decayed, st)
    same = (torch.equal(plain["logits0"], forced["logits0"]) and plain["step_losses"] == forced["step_losses"]
            and plain["grad_norms"] == forced["grad_norms"]
            and all(torch.equal(plain["grads0"][k], forced["grads0"][k]) for k in plain["grads0"])
            and all(torch.equal(plain["p"][k], forced["p"][k]) for k in plain["p"]))
    report("all-bf16 slots", same, "QLinear with BF16 slots on every block reproduces the bf16 run bit for bit "
           "(logits, grads, losses, norms, params_after)")
    # 5. Different SR seeds give different (but close) results; the same seed is deterministic.
    rec = make_recipe("nvfp4", cfg["L"])
    cfg1 = dict(cfg, nsteps=1)
    r1 = train(cfg1, hp, p0, x, y, dev, dtype, decayed, QuantState(rec, seed_q, cfg["L"], check=True))
    r2 = train(cfg1, hp, p0, x, y, dev, dtype, decayed, QuantState(rec, seed_q, cfg["L"]))
    r3 = train(cfg1, hp, p0, x, y, dev, dtype, decayed, QuantState(rec, seed_q + 1, cfg["L"]))
    det = all(torch.equal(r1["grads0"][k], r2["grads0"][k]) for k in r1["grads0"])
    gd = max((r1["grads0"][k] - r3["grads0"][k]).norm().item() / max(r1["grads0"][k].norm().item(), 1e-30)
             for k in ("qkvw", "fcw"))
    report("SR seeds", det and 0 < gd < 0.5, f"same seed bit-identical; seed+1 changes qkvw/fcw grads by {gd:.3f} "
           "(relative L2); nvfp4 step 0 also checked quantize_fast == fp4_ref.quantize on every call")
    # 6. --attention-fp4: with dS unquantized, QAttention's backward is autograd's gradient of plain attention taken at
    # the dequantized Q/K/V copies (straight-through, every backward product reads the forward's copies), MHA and GQA;
    # with dS quantized under SR it changes the gradients by FP4 noise and is repeatable.
    gen_a = torch.Generator().manual_seed(7)
    worst, dsq = 0.0, []
    for NH_a, KVH_a in ((2, 2), (4, 2)):
        Ba, Ta, HSa = 2, 32, 32
        qa = torch.randn(Ba, NH_a, Ta, HSa, generator=gen_a, dtype=torch.float64).requires_grad_(True)
        ka = torch.randn(Ba, KVH_a, Ta, HSa, generator=gen_a, dtype=torch.float64).requires_grad_(True)
        va = torch.randn(Ba, KVH_a, Ta, HSa, generator=gen_a, dtype=torch.float64).requires_grad_(True)
        gy = torch.randn(Ba, Ta, NH_a * HSa, generator=gen_a, dtype=torch.float64)
        ast = AttnFp4State("nvfp4-2d", "bf16", seed_q, 2)
        got = torch.autograd.grad(QAttention.apply(qa, ka, va, ast, 1), (qa, ka, va), gy)

        def deq(t, nh, part, axis):
            x2 = t.detach().transpose(1, 2).reshape(Ba * Ta, nh * HSa)
            c = attn_dequant(ast.qkv, x2, axis, ast.key(1, part), t).view(Ba, Ta, nh, HSa).transpose(1, 2)
            return c.clone().requires_grad_(True)
        cq, ck, cv = deq(qa, NH_a, 0, 1), deq(ka, KVH_a, 1, 1), deq(va, KVH_a, 2, 0)
        want = torch.autograd.grad(plain_attention(cq, ck, cv, 1), (cq, ck, cv), gy)
        worst = max(worst, max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(got, want)))
        ast4 = AttnFp4State("nvfp4-2d", None, seed_q, 2)
        g4 = [torch.autograd.grad(QAttention.apply(qa, ka, va, ast4, 1), (qa, ka, va), gy) for _ in range(2)]
        dsq.append((all(torch.equal(a, b) for a, b in zip(*g4)),
                    (g4[0][0] - got[0]).norm().item() / got[0].norm().item()))
    report("attention fp4", worst < 1e-12 and all(r and 0 < e < 0.5 for r, e in dsq),
           f"straight-through backward = autograd at the copies (max rel diff {worst:.1e}); FP4 dS (SR): repeatable, "
           f"dq moved by {', '.join(f'{e:.3f}' for _, e in dsq)} (relative L2)")
    # 7. Llama: the float64 reference against transformers' LlamaForCausalLM (when installed) with the same
    # weights, at the initial and at the trained parameters: proves the RoPE convention (rotate halves, no
    # permutation), GQA head mapping, the gate/up order of fcw, RMSNorm eps and theta of the HF export.
    if cfg.get("arch", "gpt2") == "llama":
        try:
            r = compare_transformers(cfg, [p0, {k: t.detach().cpu().float() for k, t in plain["p"].items()}], x)
        except ImportError as e:
            print(f"  skip transformers: not importable ({e})")
        else:
            good = all(e < 1e-4 for _, e in r)
            report("transformers", good, "LlamaForCausalLM logits vs this reference, max |diff| / max |logit|: "
                   + ", ".join(f"{n} {e:.1e}" for n, e in r))
    print("self test:", "OK" if ok else "FAILED")
    return ok


def hf_llama(cfg, p, dtype):
    """transformers' LlamaForCausalLM holding the parameters p (our layout): qkvw split into q/k/v_proj,
    fcw into gate_proj (rows [0, H)) and up_proj (rows [H, 2H)), as they are (no RoPE permutation)."""
    import transformers
    L, NH, KVH, C, H, Vp = cfg["L"], cfg["NH"], cfg["KVH"], cfg["C"], cfg["H"], cfg["Vp"]
    HS = C // NH
    kw = dict(vocab_size=Vp, hidden_size=C, intermediate_size=H, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=KVH, head_dim=HS, max_position_embeddings=cfg["maxT"], rms_norm_eps=cfg["eps"],
              hidden_act="silu", attention_bias=False, mlp_bias=False, tie_word_embeddings=cfg["tied"],
              rope_theta=cfg["theta"], rope_scaling=None)
    hc = transformers.LlamaConfig(**kw)
    if getattr(hc, "rope_parameters", None) is not None:  # transformers >= 5 keeps theta there
        hc.rope_parameters = {"rope_type": "default", "rope_theta": cfg["theta"]}
    hc._attn_implementation = "eager"
    m = transformers.LlamaForCausalLM(hc).to(dtype).eval()
    sd = {"model.embed_tokens.weight": p["wte"], "model.norm.weight": p["lnfw"]}
    if not cfg["tied"]:
        sd["lm_head.weight"] = p["lm_head"]
    q1, k1 = NH * HS, (NH + KVH) * HS
    for l in range(L):
        pre = f"model.layers.{l}."
        sd.update({pre + "input_layernorm.weight": p["ln1w"][l],
                   pre + "post_attention_layernorm.weight": p["ln2w"][l],
                   pre + "self_attn.q_proj.weight": p["qkvw"][l][:q1],
                   pre + "self_attn.k_proj.weight": p["qkvw"][l][q1:k1],
                   pre + "self_attn.v_proj.weight": p["qkvw"][l][k1:],
                   pre + "self_attn.o_proj.weight": p["attprojw"][l],
                   pre + "mlp.gate_proj.weight": p["fcw"][l][:H],
                   pre + "mlp.up_proj.weight": p["fcw"][l][H:],
                   pre + "mlp.down_proj.weight": p["fcprojw"][l]})
    missing, unexpected = m.load_state_dict({k: v.to(dtype) for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not (cfg["tied"] and k == "lm_head.weight") and "rotary_emb" not in k]
    assert not missing and not unexpected, (missing, unexpected)
    return m


def compare_transformers(cfg, param_sets, x):
    """[(label, max |logits_hf - logits_ref| / max |logits_ref|)] in float64 and float32 per parameter set."""
    import transformers  # noqa: F401  (ImportError: the caller skips)
    out = []
    for i, p in enumerate(param_sets):
        for dtype in (torch.float64, torch.float32):
            pd = {k: t.to(dtype) for k, t in p.items()}
            with torch.no_grad():
                ref = forward(pd, x, cfg)
                hf = hf_llama(cfg, pd, dtype)(input_ids=x).logits[..., :cfg["V"]]
            err = ((hf.double() - ref.double()).abs().max() / ref.double().abs().max()).item()
            out.append((f"{'init' if i == 0 else 'trained'}/{str(dtype).split('.')[-1]}", err))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default=None, help="dump file to write (single recipe); default dev/ref/gpt_ref.bin "
                    "for bf16, dev/ref/gpt_ref_<recipe>.bin otherwise")
    ap.add_argument("--recipe", default="bf16", choices=RECIPE_NAMES + ["all"],
                    help="precision recipe of the linear layers (llmc/fp4/recipe.h); all: every preset, dumps of "
                    + " ".join(DUMPED_RECIPES) + " (llama: " + " ".join(LLAMA_DUMPED_RECIPES)
                    + ") to the default paths")
    ap.add_argument("--attention-fp4", default="off",
                    help="Q/K/V spec of FP4 attention (off; e.g. nvfp4-2d), header words [112..119]; write with --out")
    ap.add_argument("--attention-fp4-ds", default=None, help="its dS spec (default: the Q/K/V spec with sr)")
    ap.add_argument("--quant-seed", type=int, default=1337, help="seed_q of the SR keys (header word [14])")
    ap.add_argument("--check-quant", action="store_true",
                    help="check quantize_fast against fp4_ref.quantize on every quantizer call (slow)")
    ap.add_argument("--self-test", action="store_true", help="run the FP4 reference's self checks and exit")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                    help="compute precision (params are stored as float32 either way)")
    ap.add_argument("--arch", choices=list(ARCH_IDS), default="gpt2",
                    help="model family (docs/MODELS.md); llama dumps go to dev/ref/llama_ref*.bin")
    ap.add_argument("--layers", type=int, default=2, help="L")
    ap.add_argument("--heads", type=int, default=2, help="NH")
    ap.add_argument("--channels", type=int, default=64, help="C")
    ap.add_argument("--vocab", type=int, default=None, help="V, real vocabulary size (default 500; llama 250)")
    ap.add_argument("--padded-vocab", type=int, default=None,
                    help="Vp >= V, rows of wte (and lm_head) (default 512; llama 256)")
    ap.add_argument("--max-seq-len", type=int, default=64, help="maxT, rows of wpe (llama: of the RoPE table)")
    ap.add_argument("--kv-heads", type=int, default=None,
                    help="llama: KVH, key/value heads (default NH/2, NH when NH is odd, so the test model uses GQA)")
    ap.add_argument("--mlp-hidden", type=int, default=None, help="llama: H, the SwiGLU width (default 2C)")
    ap.add_argument("--rope-theta", type=float, default=10000.0, help="llama: RoPE base (held as float32)")
    ap.add_argument("--norm-eps", type=float, default=1e-5, help="llama: RMSNorm eps (held as float32)")
    ap.add_argument("--tie-embeddings", action="store_true", help="llama: logits from wte (no lm_head)")
    ap.add_argument("--batch", type=int, default=4, help="B")
    ap.add_argument("--seq-len", type=int, default=64, help="T <= maxT")
    ap.add_argument("--steps", type=int, default=10, help="AdamW steps on the same batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0,
                    help="0 disables clipping; the default clips step 4 of the default run only (norm 1.09), so both branches are tested")
    args = ap.parse_args()

    llama = args.arch == "llama"
    if args.vocab is None:
        args.vocab = 250 if llama else 500
    if args.padded_vocab is None:
        args.padded_vocab = 256 if llama else 512
    cfg = dict(L=args.layers, NH=args.heads, C=args.channels, V=args.vocab, Vp=args.padded_vocab,
               maxT=args.max_seq_len, B=args.batch, T=args.seq_len, nsteps=args.steps)
    if llama:
        NH = cfg["NH"]
        KVH = args.kv_heads if args.kv_heads is not None else (NH // 2 if NH % 2 == 0 else NH)
        H = args.mlp_hidden if args.mlp_hidden is not None else 2 * cfg["C"]
        # theta and eps as the float32 values the C program holds (header words [23], [24])
        cfg.update(arch="llama", KVH=KVH, H=H, tied=bool(args.tie_embeddings),
                   theta=float(np.float32(args.rope_theta)), eps=float(np.float32(args.norm_eps)))
        if KVH < 1 or NH % KVH:
            sys.exit(f"--kv-heads ({KVH}) must divide --heads ({NH})")
        if H < 1:
            sys.exit("--mlp-hidden must be >= 1")
        if (cfg["C"] // NH) % 2:
            sys.exit(f"head size C/NH ({cfg['C'] // NH}) must be even (RoPE rotates pairs)")
    elif (args.kv_heads is not None or args.mlp_hidden is not None or args.tie_embeddings
          or args.rope_theta != 10000.0 or args.norm_eps != 1e-5):
        sys.exit("--kv-heads --mlp-hidden --rope-theta --norm-eps --tie-embeddings are for --arch llama")
    hp = dict(lr=args.lr, beta1=args.beta1, beta2=args.beta2, eps=args.eps,
              weight_decay=args.weight_decay, grad_clip=args.grad_clip)
    if cfg["C"] % cfg["NH"]:
        sys.exit(f"--channels ({cfg['C']}) must be a multiple of --heads ({cfg['NH']})")
    if cfg["Vp"] < cfg["V"]:
        sys.exit(f"--padded-vocab ({cfg['Vp']}) must be >= --vocab ({cfg['V']})")
    if cfg["T"] > cfg["maxT"]:
        sys.exit(f"--seq-len ({cfg['T']}) must be <= --max-seq-len ({cfg['maxT']})")
    if cfg["nsteps"] < 1:
        sys.exit("--steps must be >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda asked for but torch sees no GPU; use --device cpu")
    if args.recipe == "all" and args.out:
        sys.exit("--out names one file; --recipe all writes the default paths")
    if args.attention_fp4 != "off" and (args.recipe == "all" or not args.out):
        sys.exit("--attention-fp4: one --recipe and an --out path (e.g. dev/ref/gpt_ref_attn4.bin)")

    setup_determinism(args.device)
    dev = torch.device(args.device)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32

    # Everything random is drawn on the CPU in float32 from one generator, in a fixed order.
    gen = torch.Generator().manual_seed(args.seed)
    p0 = init_params(cfg, gen)
    B, T, V = cfg["B"], cfg["T"], cfg["V"]
    tok = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    x, y = tok[:, :T], tok[:, 1:]  # y[b,t] = x[b,t+1]; the last target is one more random token

    specs = model_specs(cfg)
    names = [n for n, _, _ in specs]
    decayed = {n: d for n, _, d in specs}
    num_parameters = sum(int(np.prod(s)) for _, s, _ in specs)
    init_flat = flatten(p0, names)
    assert init_flat.size == num_parameters

    if args.self_test:
        sys.exit(0 if self_test(cfg, hp, p0, x, y, dev, dtype, decayed, args.quant_seed) else 1)

    print(f"gpt_ref: arch={args.arch} L={cfg['L']} NH={cfg['NH']} C={cfg['C']} V={V} Vp={cfg['Vp']} "
          f"maxT={cfg['maxT']} B={B} T={T} steps={cfg['nsteps']} seed={args.seed} device={args.device} "
          f"dtype={args.dtype} torch={torch.__version__}")
    if llama:
        print(f"llama: KVH={cfg['KVH']} HS={cfg['C'] // cfg['NH']} H={cfg['H']} tied={int(cfg['tied'])} "
              f"rope_theta={cfg['theta']} norm_eps={cfg['eps']!r} num_parameters={num_parameters}")
    print(f"hyper: lr={hp['lr']} b1={hp['beta1']} b2={hp['beta2']} eps={hp['eps']} "
          f"wd={hp['weight_decay']} grad_clip={hp['grad_clip']}")
    names_to_run = RECIPE_NAMES if args.recipe == "all" else [args.recipe]
    if args.recipe != "bf16" and "bf16" not in names_to_run:
        names_to_run = ["bf16"] + names_to_run  # the baseline of the loss gaps (its dump is not written)
    results = {}
    dumped = LLAMA_DUMPED_RECIPES if llama else DUMPED_RECIPES
    q2_args = LLAMA_QUARTET2_DUMP_ARGS if llama else QUARTET2_DUMP_ARGS
    for rname in names_to_run:
        rec = make_recipe(rname, cfg["L"])
        if not recipe_fits(rec, linear_dims(cfg)):
            assert args.recipe == "all", \
                f"recipe {rname} does not fit the dimensions {linear_dims(cfg)} (e.g. {q2_args})"
            print(f"\nrecipe {rname}: skipped, its blocks or Hadamard do not fit the dimensions {linear_dims(cfg)} "
                  f"({q2_args})")
            continue
        st = QuantState(rec, args.quant_seed, cfg["L"], check=args.check_quant) if rec["fp4_any"] else None
        ast = None
        if args.attention_fp4 != "off" and rname == args.recipe:
            ast = AttnFp4State(args.attention_fp4, args.attention_fp4_ds, args.quant_seed, cfg["L"])
            print(f"\nattention fp4: q/k/v {ast.qkv_text}, ds {ast.ds_text}")
        res = train(cfg, hp, p0, x, y, dev, dtype, decayed, st, ast)
        results[rname] = res
        grads_flat = flatten(res["grads0"], names)
        assert not grads_flat[cfg["V"] * cfg["C"]:cfg["Vp"] * cfg["C"]].any(), "padded wte rows got gradient"
        if "lm_head" in res["grads0"]:
            assert not res["grads0"]["lm_head"][cfg["V"]:].any(), "padded lm_head rows got gradient"
        print(f"\nrecipe {rname} (index {rec['index']}): " + "; ".join(f"{s}={t}" for s, t in zip(SLOT_NAMES, rec["texts"]))
              + f"; bf16 blocks first {rec['bf16_first']} last {rec['bf16_last']}; quantized blocks "
              f"{[l for l in range(cfg['L']) if rec['layers'][l]]}; seed_q {args.quant_seed}")
        if st is not None:
            print(f"  {st.calls} quantizer calls" + (f", {st.checked} checked against fp4_ref.quantize" if st.checked else ""))
        if (args.recipe == "all" and rname in dumped) or rname == args.recipe:
            out = args.out or default_out(rname, args.arch)
            header = make_header(cfg, num_parameters, args.seed, dtype, rec, args.quant_seed, ast)
            size = write_dump(out, header, hp, init_flat, x, y, res, names)
            print(f"  num_parameters={num_parameters}  wrote {out} ({size} bytes)")
        print(f"  initial loss {res['loss0']:.6f} (ln V = {math.log(V):.6f})")
        for t, (l, n, c) in enumerate(zip(res["step_losses"], res["grad_norms"], res["clipped"]), 1):
            print(f"  step {t:2d}  loss {l:.6f}  grad_norm {n:.6f}{'  clipped' if c else ''}")
        print(f"  clipping triggered on {sum(res['clipped'])} of {cfg['nsteps']} steps; "
              f"loss after the last update {res['final_loss']:.6f}")
    if len(results) > 1:
        b = results["bf16"]
        print(f"\nloss gap to bf16 (relative): step 0 = before any update, step {cfg['nsteps'] - 1} = before the "
              f"last update, final = after {cfg['nsteps']} updates")
        print(f"  {'recipe':12s} {'step 0':>22s} {'step %d' % (cfg['nsteps'] - 1):>22s} {'final':>22s}")
        for rname, r in results.items():
            cols = []
            for a, ref in ((r["loss0"], b["loss0"]), (r["step_losses"][-1], b["step_losses"][-1]),
                           (r["final_loss"], b["final_loss"])):
                cols.append(f"{a:.5f} ({100 * (a - ref) / ref:+.2f}%)")
            print(f"  {rname:12s} " + " ".join(f"{c:>22s}" for c in cols))


if __name__ == "__main__":
    main()
