#!/usr/bin/env python3
"""muon_ref.py: golden values of Muon's update for dev/test/test_muon.c (llmc/base/muon_ref.h's twin check).

  python3 dev/ref/muon_ref.py                 # writes dev/golden/muon_golden.bin
  python3 dev/ref/muon_ref.py --verify        # recomputes and compares with the committed file

The reference is Keller Jordan's Muon as published (the muon_update / zeropower_via_newtonschulz5 pair of his
`muon` package), restated here in a few lines of PyTorch on the CPU: BF16 Newton-Schulz, 5 steps, coefficients
(3.4445, -4.7750, 2.0315), Nesterov momentum by two lerps, the scale sqrt(max(1, rows / cols)) (or Moonlight's
0.2 sqrt(max(rows, cols))), then decoupled weight decay and the step. Needs torch and numpy.

File format (little endian): magic b"MUONGLD1", int32 count, then per case int32 rows, cols, nesterov, scale_rule,
ns_steps, float32 lr, beta, weight_decay, then float32 arrays of rows*cols each: W, G, M (inputs), M', update, W'.
"""
import argparse, os, struct, sys
try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"error: muon_ref.py needs numpy and torch ({e.name} is missing): pip install -r requirements.txt", file=sys.stderr)
    sys.exit(1)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "dev", "golden", "muon_golden.bin")

def newton_schulz(G, steps):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X

def muon_update(grad, momentum, beta, steps, nesterov, scale_rule):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    update = newton_schulz(update, steps).float()
    r, c = grad.size(-2), grad.size(-1)
    update = update * (max(1, r / c) ** 0.5 if scale_rule == 0 else 0.2 * max(r, c) ** 0.5)
    return update

CASES = [  # rows, cols, nesterov, scale_rule, steps, lr, beta, wd
    (16, 32, 1, 0, 5, 0.02, 0.95, 0.1),
    (48, 24, 1, 0, 5, 0.02, 0.95, 0.0),
    (32, 32, 0, 1, 5, 1e-3, 0.9, 0.1),
    (8, 64, 1, 1, 5, 1e-3, 0.95, 0.1),
]

def build():
    gen = torch.Generator().manual_seed(1234)
    out = bytearray(b"MUONGLD1") + struct.pack("<i", len(CASES))
    for rows, cols, nest, rule, steps, lr, beta, wd in CASES:
        W = torch.randn(rows, cols, generator=gen) * 0.02
        G = torch.randn(rows, cols, generator=gen) * 1e-2
        M = torch.randn(rows, cols, generator=gen) * 5e-3
        W0, G0, M0 = W.clone(), G.clone(), M.clone()
        upd = muon_update(G.clone(), M, beta, steps, bool(nest), rule)
        W = W * (1 - lr * wd) - lr * upd
        out += struct.pack("<iiiiifff", rows, cols, nest, rule, steps, lr, beta, wd)
        for t in (W0, G0, M0, M, upd, W):
            out += t.numpy().astype("<f4").tobytes()
    return bytes(out)

def main():
    ap = argparse.ArgumentParser(description="golden values of Muon's update for test_muon")
    ap.add_argument("--verify", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args()
    data = build()
    if args.verify:
        try:
            old = open(OUT, "rb").read()
        except OSError as e:
            print(f"error: cannot read {OUT}: {e.strerror}", file=sys.stderr)
            sys.exit(1)
        same = old == data
        print(f"muon_ref --verify: {'the same bytes' if same else 'DIFFERENT'} ({len(data)} bytes)")
        sys.exit(0 if same else 1)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    open(OUT, "wb").write(data)
    print(f"wrote {OUT}: {len(CASES)} cases, {len(data)} bytes")

if __name__ == "__main__":
    main()
