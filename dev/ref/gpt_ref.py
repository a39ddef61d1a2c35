#!/usr/bin/env python3
"""PyTorch reference for the GPT-2 training program: writes the dump that test_gpt_fp4 compares to.

The model is GPT-2 (pre-LayerNorm blocks, learned position embedding, tied output head, tanh GELU)
with the parameter layout of the C/CUDA program: one flat float32 block holding, in this order,
  wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C) attprojw (L,C,C)
  attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C) fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C)
  lnfw (C) lnfb (C)
Rows V..Vp-1 of wte are zero padding: never an input, never a target, and their logits are cut off.

The script initializes from a seed, runs forward/backward once (logits, loss, grads), then
`nsteps` AdamW steps on the same batch, and writes everything to one little-endian file:

  int32   header[256]   [0]=20261129 magic, [1]=1 version, [2]=L, [3]=NH, [4]=C, [5]=V, [6]=Vp,
                        [7]=maxT, [8]=B, [9]=T, [10]=nsteps, [11]=num_parameters, [12]=seed,
                        [13]=compute dtype (32 or 64, informational); rest 0
  float32 hyper[16]     [0]=lr, [1]=beta1, [2]=beta2, [3]=eps, [4]=weight_decay, [5]=grad_clip; rest 0
  float32 params[num_parameters]        initial
  int32   x[B*T], int32 y[B*T]
  float32 logits[B*T*V]                 of the initial params, padded columns dropped
  float32 loss                          of the initial params
  float32 grads[num_parameters]         of the initial params, before clipping
  float32 step_losses[nsteps]           loss before update t (step_losses[0] == loss)
  float32 grad_norms[nsteps]            global gradient norm before clipping, at each step
  float32 params_after[num_parameters]  after nsteps updates

Default run (seed 1337, lr 1e-3, grad_clip 2.0): loss 6.952 -> 4.793 over 10 steps; the gradient
norm exceeds 2.0 on steps 3-6 only (2.03, 2.65, 2.72, 2.16; smallest margin 1.5%), so both the
clipped and the unclipped branch are exercised. The file is ~7.5 MB (three parameter blocks of
536,064 floats plus 256,000 logits); --channels 64 --vocab 500 --padded-vocab 512 gives ~2.2 MB.
Check a dump without torch: python3 dev/ref/read_dump.py PATH

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
"""
import argparse
import math
import os
import sys

# Must be set before CUDA initializes for deterministic cuBLAS.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np
import torch

MAGIC = 20261129
VERSION = 1
HEADER_INTS = 256
HYPER_FLOATS = 16

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


def init_params(cfg, gen):
    """Float32 CPU tensors holding BF16-representable values, drawn in layout order from `gen`."""
    L, C, V, Vp, maxT = cfg["L"], cfg["C"], cfg["V"], cfg["Vp"], cfg["maxT"]
    std = 0.02
    proj_std = 0.02 / math.sqrt(2 * L)  # residual projections, as in GPT-2
    perturb = 0.02  # LayerNorm and bias perturbation so their gradients are not trivial

    def normal(shape, s):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * s

    p = {}
    for name, shape, _ in param_specs(L, C, Vp, maxT):
        if name in ("attprojw", "fcprojw"):
            t = normal(shape, proj_std)
        elif name in ("wte", "wpe", "qkvw", "fcw"):
            t = normal(shape, std)
        elif name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + normal(shape, perturb)
        else:  # LayerNorm biases and linear biases
            t = normal(shape, perturb)
        # BF16-representable values: the program under test holds BF16 parameters, so the comparison
        # then measures its arithmetic, not the rounding of its inputs
        p[name] = t.to(torch.bfloat16).to(torch.float32)
    p["wte"][V:] = 0.0
    return p


def layernorm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as torch LayerNorm
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, x, cfg):
    """Returns logits (B,T,V) with the padded vocabulary columns removed."""
    L, NH, C, V = cfg["L"], cfg["NH"], cfg["C"], cfg["V"]
    B, T = x.shape
    HS = C // NH
    pos = torch.arange(T, device=x.device)
    h = p["wte"][x] + p["wpe"][pos]  # (B,T,C)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    for l in range(L):
        a = layernorm(h, p["ln1w"][l], p["ln1b"][l])
        qkv = a @ p["qkvw"][l].T + p["qkvb"][l]  # (B,T,3C): q | k | v
        q, k, v = qkv.split(C, dim=-1)
        # heads are contiguous chunks of HS channels within q, k and v
        q = q.view(B, T, NH, HS).transpose(1, 2)  # (B,NH,T,HS)
        k = k.view(B, T, NH, HS).transpose(1, 2)
        v = v.view(B, T, NH, HS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        h = h + (y @ p["attprojw"][l].T + p["attprojb"][l])
        a = layernorm(h, p["ln2w"][l], p["ln2b"][l])
        f = gelu_tanh(a @ p["fcw"][l].T + p["fcb"][l])
        h = h + (f @ p["fcprojw"][l].T + p["fcprojb"][l])
    h = layernorm(h, p["lnfw"], p["lnfb"])
    logits = h @ p["wte"].T  # (B,T,Vp), tied head
    return logits[..., :V]


def loss_fn(logits, y):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="mean")


def forward_backward(p, x, y, cfg):
    for t in p.values():
        t.grad = None
    logits = forward(p, x, cfg)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default="dev/ref/gpt_ref.bin", help="dump file to write")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                    help="compute precision (params are stored as float32 either way)")
    ap.add_argument("--layers", type=int, default=2, help="L")
    ap.add_argument("--heads", type=int, default=2, help="NH")
    ap.add_argument("--channels", type=int, default=64, help="C")
    ap.add_argument("--vocab", type=int, default=500, help="V, real vocabulary size")
    ap.add_argument("--padded-vocab", type=int, default=512, help="Vp >= V, rows of wte")
    ap.add_argument("--max-seq-len", type=int, default=64, help="maxT, rows of wpe")
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

    cfg = dict(L=args.layers, NH=args.heads, C=args.channels, V=args.vocab, Vp=args.padded_vocab,
               maxT=args.max_seq_len, B=args.batch, T=args.seq_len, nsteps=args.steps)
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

    setup_determinism(args.device)
    dev = torch.device(args.device)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32

    # Everything random is drawn on the CPU in float32 from one generator, in a fixed order.
    gen = torch.Generator().manual_seed(args.seed)
    p0 = init_params(cfg, gen)
    B, T, V = cfg["B"], cfg["T"], cfg["V"]
    tok = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    x, y = tok[:, :T], tok[:, 1:]  # y[b,t] = x[b,t+1]; the last target is one more random token

    specs = param_specs(cfg["L"], cfg["C"], cfg["Vp"], cfg["maxT"])
    names = [n for n, _, _ in specs]
    decayed = {n: d for n, _, d in specs}
    num_parameters = sum(int(np.prod(s)) for _, s, _ in specs)
    init_flat = flatten(p0, names)
    assert init_flat.size == num_parameters

    p = {k: t.to(dev, dtype).requires_grad_(True) for k, t in p0.items()}
    xd, yd = x.to(dev), y.to(dev)
    m = {k: torch.zeros_like(t) for k, t in p.items()}
    v = {k: torch.zeros_like(t) for k, t in p.items()}

    step_losses, grad_norms, clipped = [], [], []
    logits0 = loss0 = grads0 = None
    for t in range(1, cfg["nsteps"] + 1):
        logits, loss, g = forward_backward(p, xd, yd, cfg)
        if t == 1:
            logits0, loss0, grads0 = logits, loss.item(), g
        norm, was_clipped = adamw_step(p, g, m, v, t, hp, decayed)
        step_losses.append(loss.item())
        grad_norms.append(norm)
        clipped.append(was_clipped)

    grads_flat = flatten(grads0, names)
    after_flat = flatten(p, names)
    assert not grads_flat[cfg["V"] * cfg["C"]:cfg["Vp"] * cfg["C"]].any(), "padded wte rows got gradient"

    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:14] = [MAGIC, VERSION, cfg["L"], cfg["NH"], cfg["C"], cfg["V"], cfg["Vp"], cfg["maxT"],
                   B, T, cfg["nsteps"], num_parameters, args.seed, 64 if dtype == torch.float64 else 32]
    hyper = np.zeros(HYPER_FLOATS, dtype="<f4")
    hyper[:6] = [hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["weight_decay"], hp["grad_clip"]]

    out_dir = os.path.dirname(args.out)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "wb") as f:
        for arr in (header, hyper, init_flat,
                    x.numpy().astype("<i4").ravel(), y.numpy().astype("<i4").ravel(),
                    logits0.cpu().double().numpy().astype("<f4").ravel(),
                    np.array([loss0], dtype="<f4"), grads_flat,
                    np.array(step_losses, dtype="<f4"), np.array(grad_norms, dtype="<f4"),
                    after_flat):
            f.write(arr.tobytes())
    size = os.path.getsize(args.out)

    print(f"gpt_ref: L={cfg['L']} NH={cfg['NH']} C={cfg['C']} V={V} Vp={cfg['Vp']} maxT={cfg['maxT']} "
          f"B={B} T={T} steps={cfg['nsteps']} seed={args.seed} device={args.device} dtype={args.dtype} "
          f"torch={torch.__version__}")
    print(f"hyper: lr={hp['lr']} b1={hp['beta1']} b2={hp['beta2']} eps={hp['eps']} "
          f"wd={hp['weight_decay']} grad_clip={hp['grad_clip']}")
    print(f"num_parameters={num_parameters}  wrote {args.out} ({size} bytes)")
    print(f"initial loss {loss0:.6f} (ln V = {math.log(V):.6f})")
    for t, (l, n, c) in enumerate(zip(step_losses, grad_norms, clipped), 1):
        print(f"step {t:2d}  loss {l:.6f}  grad_norm {n:.6f}{'  clipped' if c else ''}")
    print(f"clipping triggered on {sum(clipped)} of {cfg['nsteps']} steps")


if __name__ == "__main__":
    main()
