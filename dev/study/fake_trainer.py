#!/usr/bin/env python3
"""A stand-in for train_gpt_fp4 in dev/study/test_study.sh (no GPU): the flags study.sh passes, the log
lines (config, val, train, checkpoint, resume, done) with train_gpt_fp4's semantics (val at step % every
== 0 and before the last step, checkpoint files every --ckpt-every steps and at the end, --resume latest
drops the log lines after the checkpoint), and a final validation loss that is a known function of the
recipe and seed:
  3.0 + 0.02 * seed (shared by every recipe: the seed's init and data order)
      + {"nvfp4": 0.1, "nvfp4-naive": 0.011}.get(recipe, 0) + 0.001 * ((seed % 3) - 1) for nvfp4-naive.
env: FAKE_STOP_AT=N hang (until killed) after logging step N; FAKE_FAIL=RECIPE exit 1 for that recipe;
FAKE_SLEEP seconds per step; FAKE_ARGS=FILE appends each invocation's arguments there.
"""
import json
import os
import re
import sys
import time


def final_loss(recipe, seed):
    v = 3.0 + 0.02 * seed
    v += {"nvfp4": 0.1, "nvfp4-naive": 0.011}.get(recipe, 0.0)
    if recipe == "nvfp4-naive":
        v += 0.001 * ((seed % 3) - 1)
    return v


def main():
    argv = sys.argv[1:]
    if os.environ.get("FAKE_ARGS"):
        with open(os.environ["FAKE_ARGS"], "a") as f:
            f.write(" ".join(argv) + "\n")
    opt = {}
    i = 0
    while i < len(argv):
        k = argv[i]
        if k.startswith("-") and i + 1 < len(argv):
            opt[k] = argv[i + 1]
            i += 2
        else:
            sys.exit(f"fake_trainer: stray argument {k}")
    steps, every = int(opt["--steps"]), int(opt["--val-every"])
    ckpt_every, seed, recipe, out = int(opt["--ckpt-every"]), int(opt["--seed"]), opt["--recipe"], opt["-o"]
    tb = int(opt["--total-batch"])
    if os.environ.get("FAKE_FAIL") == recipe:
        print("fake_trainer: failing as asked")
        sys.exit(1)
    os.makedirs(out, exist_ok=True)
    log_path = os.path.join(out, "log.jsonl")
    start = 0
    if opt.get("--resume") == "latest":
        ck = sorted(int(m.group(1)) for f in os.listdir(out) for m in [re.fullmatch(r"ckpt_(\d{8})\.bin", f)] if m)
        if not ck:
            sys.exit("fake_trainer: --resume latest: no checkpoint")
        start = ck[-1]
        kept, dropped, seen = [], 0, False
        for line in open(log_path):
            if seen:
                dropped += 1
                continue
            kept.append(line)
            r = json.loads(line)
            if r.get("type") == "checkpoint" and r["step"] == start:
                seen = True
        with open(log_path, "w") as f:
            f.writelines(kept)
            f.write(json.dumps({"type": "resume", "step": start, "checkpoint": f"ckpt_{start:08d}.bin",
                                "dropped_lines": dropped}) + "\n")
        log = open(log_path, "a")
    else:
        log = open(log_path, "w")

    def w(d):
        log.write(json.dumps(d, separators=(",", ":")) + "\n")
        log.flush()

    # FAKE_RESUME_MODEL: the model name a resumed run logs (trainers before 2026-12-02 logged "checkpoint")
    model = os.environ.get("FAKE_RESUME_MODEL", opt["--model"]) if start > 0 else opt["--model"]
    w({"type": "config", "model": model, "batch_size": int(opt["-b"]), "seq_len": int(opt["-t"]),
       "steps": steps, "lr": float(opt["--lr"]), "warmup": int(opt["--warmup"]),
       "final_lr_frac": float(opt["--final-lr-frac"]), "seed": seed, "recipe": recipe, "resumed_at": start})
    fin = final_loss(recipe, seed)
    stop_at = int(os.environ.get("FAKE_STOP_AT", "-1"))
    for step in range(start, steps):
        last = step == steps - 1
        if step % every == 0 or last:
            w({"type": "val", "step": step, "tokens": step * tb, "val_loss": round(fin + 2.0 * (1 - step / (steps - 1)), 6)})
        w({"type": "train", "step": step + 1, "tokens": (step + 1) * tb, "loss": fin + 0.05 + 2.0 * (1 - step / steps)})
        if (ckpt_every > 0 and (step + 1) % ckpt_every == 0) or last:
            open(os.path.join(out, f"ckpt_{step + 1:08d}.bin"), "w").close()
            w({"type": "checkpoint", "step": step + 1, "path": os.path.join(out, f"ckpt_{step + 1:08d}.bin")})
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
        if step + 1 == stop_at:
            time.sleep(600)
    w({"type": "event", "step": steps, "event": "done"})


if __name__ == "__main__":
    main()
