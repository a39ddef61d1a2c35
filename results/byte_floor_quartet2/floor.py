#!/usr/bin/env python3
"""Byte floors of quartet2, quartet2-4o6 and nvfp4-4o6 (issue #49 item 2): arithmetic on measured runs, no device.
Prints the tables of README.md. Inputs are the measured figures cited there; W (weights) where not measured is an
estimate, marked as such."""
BW = 3.02e12          # H100 copy bandwidth, bytes/s (results/README.md section 3)
BT = {"d12": 65536, "d24": 32768}
C = {"d12": 768, "d24": 1024}
L = {"d12": 12, "d24": 24}
# blocks quantized: quartet2(-4o6) every block; nvfp4(-4o6) round(2L/62) first and round(8L/62) last kept BF16
QBLK = {("q2", "d12"): 12, ("q2", "d24"): 24, ("n46", "d12"): 10, ("n46", "d24"): 20}

def counts(r, d):
    n = QBLK[(r, d)]
    x = n * BT[d] * 7 * C[d]      # X columns per block: C (qkv) + C (attproj) + C (fc) + 4C (fcproj)
    dy = n * BT[d] * 9 * C[d]     # dY columns: 3C + C + 4C + C
    w = n * 12 * C[d] * C[d]      # W: 3C^2 + C^2 + 4C^2 + 4C^2
    return x, dy, w

def ms(elems, bytes_per):
    return elems * bytes_per / BW * 1e3

print("element counts per step")
for r in ("q2", "n46"):
    for d in ("d12", "d24"):
        x, dy, w = counts(r, d)
        print(f"  {r:4s} {d}: X {x/1e9:.3f}e9  dY {dy/1e9:.3f}e9  W {w/1e6:.1f}e6   ms per byte/elem: X {ms(x,1):.3f} dY {ms(dy,1):.3f}")

# ---- quartet2: today's passes per source (route: dev/test/test_quant_route.c MAIN_CASES, emulated path)
# X fwd: patch amax (r2) + row2 (r2 w2)                                   = 6
# X bwd: fprop.x(again) row2 (r2 w2) + eden-store amax (r2 w2) + eden-rotated apply (r2 w2) = 12
# dY: two calls, each eden-store amax (r2 w2) + eden-rotated apply (r2 w2) = 16
rows_q2 = [
    ("today's passes", 6, 12, 16),
    ("+ X's wgrad copy from X itself (no scratch re-make)", 6, 8, 16),
    ("+ one amax read for both dY copies (both rotations stored)", 6, 8, 14),
    ("+ no stored rotation (apply rotates again)", 6, 6, 10),
    ("+ every amax from the producer / ahead, dY's copies from one read", 4, 4, 6),
]
# measured, H100 d12 (issue #49's figures): step 186.6, quant 71.5, dY 37.4, X.bwd 22.3
q2 = {"d12": dict(bf16=120.6, step=186.6, quant=71.5, W=2.0), "d24": dict(bf16=165.0, step=1.54 * 165.0, W=4.0)}
x12, dy12, _ = counts("q2", "d12")
x24, dy24, _ = counts("q2", "d24")
# d24 quantization not measured on an H100: d12's per-element cost scaled by the element count
q2["d24"]["quant"] = 71.5 * (x24 + dy24) / (x12 + dy12)
for d in ("d12", "d24"):
    q2[d]["rest"] = q2[d]["step"] - q2[d]["quant"]
print("\nquartet2, H100:", {d: {k: round(v, 1) for k, v in q2[d].items()} for d in q2})
print(f"  budget at 1.30x: d12 {1.30*120.6 - q2['d12']['rest']:.1f} ms, d24 {1.30*165.0 - q2['d24']['rest']:.1f} ms")
for d in ("d12", "d24"):
    x, dy, _ = counts("q2", d)
    print(f"  {d}: form | X fwd+bwd, dY bytes | X ms dY ms | +W | ratio at 100% | at 88% | at 76%")
    for name, xf, xb, dyb in rows_q2:
        a = ms(x, xf + xb) + ms(dy, dyb)
        W = q2[d]["W"]
        r = lambda eff: (q2[d]["rest"] + a / eff + W) / q2[d]["bf16"]
        print(f"    {name:68s} {xf}+{xb}, {dyb:2d} | {ms(x, xf+xb):5.1f} {ms(dy, dyb):5.1f} | {a+W:5.1f} | {r(1):.3f} | {r(.88):.3f} | {r(.76):.3f}")

# per source at d12 against today's bytes
print("\nquartet2 d12 per source, today's bytes at 3.02 TB/s vs measured (H100)")
for name, b, e, meas in (("dY", 16, dy12, 37.4), ("X.bwd", 12, x12, 22.3), ("X.fwd + W (W est. 2.0)", 6, x12, 71.5 - 37.4 - 22.3)):
    f = ms(e, b) + (0.51 if "W" in name else 0)   # W's bytes: 84.9e6 x 18 B at 3.02 TB/s = 0.51 ms
    print(f"  {name:24s} {b:2d} B  floor {f:5.1f} ms  measured {meas:5.1f} ms  -> {100*f/meas:.0f}% of copy bandwidth")

# ---- nvfp4-4o6: same routes and bytes as nvfp4 (X 10, dY 10); non-quant part taken as nvfp4's (H100 run [A])
n46 = {"d12": dict(bf16=120.6, rest=149.1 - 32.6, Xn=7.96 + 5.53, dYn=17.75, Wn=0.86 + 0.48),
       "d24": dict(bf16=165.0, rest=203.2 - 44.8, Xn=10.94 + 7.48, dYn=23.55, Wn=1.80 + 1.02)}
# 4o6's 16x16 weight copies on qg_4o6_kernel: 2162.5 us apply per 201.3e6 elements (H200, call3) against nvfp4-2d's
# ~230 us: the extra per copy, two copies (fprop.w, dgrad.w); an estimate (H200 per-element time, not H100-measured)
for d in ("d12", "d24"):
    _, _, w = counts("n46", d)
    n46[d]["W46"] = n46[d]["Wn"] + 2 * (2162.5 - 230) * 1e-3 * w / 201.3e6
print("\nnvfp4-4o6, H100 (non-quant part = nvfp4's):")
for d in ("d12", "d24"):
    x, dy, w = counts("n46", d)
    p = n46[d]
    budget = 1.25 * p["bf16"] - p["rest"]
    print(f"  {d}: budget at 1.25x {budget:.1f} ms; W est {p['W46']:.2f} ms (nvfp4 measured {p['Wn']:.2f})")
    for name, xb, dyb in (("today's passes", 10, 10), ("+ amax from every producer", 8, 8), ("+ both copies one read, X's from fwd", 6, 6)):
        a = ms(x, xb) + ms(dy, dyb)
        print(f"    {name:40s} {xb},{dyb}: {a:5.1f} +W {a+p['W46']:5.1f} -> {(p['rest']+a+p['W46'])/p['bf16']:.3f} (W at nvfp4's: {(p['rest']+a+p['Wn'])/p['bf16']:.3f})")
    at_nv = p["Xn"] + p["dYn"]
    print(f"    X and dY at nvfp4's measured speed {at_nv:.1f} ms: with 4o6 W {(p['rest']+at_nv+p['W46'])/p['bf16']:.3f}, with nvfp4's W {(p['rest']+at_nv+p['Wn'])/p['bf16']:.3f}")
    print(f"    X,dY efficiency needed at today's bytes: {100*(ms(x,10)+ms(dy,10))/(budget-p['W46']):.0f}% (4o6 W) / "
          f"{100*(ms(x,10)+ms(dy,10))/(budget-p['Wn']):.0f}% (nvfp4 W)")
print(f"  d12 inferred quant today: 1.33x -> {1.33*120.6 - n46['d12']['rest']:.1f} ms, 1.36x -> {1.36*120.6 - n46['d12']['rest']:.1f} ms")
print(f"  quartet2-4o6 d12 inferred quant: 1.55x -> {1.55*120.6 - q2['d12']['rest']:.1f} ms")

# ---- H200 per-pass (results/group_kernels/call3_bench_quant_fast.txt, 65536 x 3072 = 201.3e6 elements, copy 4266 GB/s)
E = 65536 * 3072
print("\nH200 per-pass, % of 4266 GB/s at the bytes each moves")
for name, us, b in (("nvfp4 row (fprop X), amax+apply", 314.2, 6), ("4o6 row (fprop X)", 351.7, 6),
                    ("nvfp4 row SR", 401.2, 6), ("4o6 row SR (dgrad dY)", 557.9, 6),
                    ("nvfp4 col H16 SR", 381.1, 6), ("4o6 col H16 SR (wgrad dY)", 548.3, 6),
                    ("nvfp4 col H16 (wgrad X)", 329.9, 6), ("4o6 col H16 (wgrad X)", 423.1, 6),
                    ("DUAL nvfp4 dY", 683.4, 10),
                    ("eden row (dgrad dY), store form", 564.0, 8), ("eden col (wgrad dY)", 611.5, 8),
                    ("eden col src=fprop (X)", 649.1, 8), ("eden amax alone (no store), row", 174.3, 2),
                    ("eden apply alone (rotates), row", 428.8, 4), ("4o6 16x16 col (dgrad W)", 2257.9, 6)):
    print(f"  {name:36s} {us:7.1f} us  {b:2d} B  {100*E*b/(us*1e-6)/4266e9:5.1f}%   H100 floor {E*b/BW*1e6:6.1f} us")
# H200 per-step attribution of nvfp4-4o6's extra over nvfp4 (apply-alone columns), d12
ux, udy = counts("n46", "d12")[0] / E, counts("n46", "d12")[1] / E
w = counts("n46", "d12")[2]
parts = {"X fwd row": (251.7 - 216.7) * ux, "X bwd col H16": (319.3 - 227.3) * ux, "dY row SR": (460.4 - 300.3) * udy,
         "dY col H16 SR": (445.6 - 277.4) * udy, "W 16x16 (2 copies)": 2 * (2162.5 - 230) * w / E}
print("\nnvfp4-4o6 extra over nvfp4 per d12 step from the H200 per-pass table, ms:",
      {k: round(v / 1e3, 2) for k, v in parts.items()}, "sum", round(sum(parts.values()) / 1e3, 2), "(measured 46.1 - 29.9 = 16.2)")
