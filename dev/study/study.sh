#!/usr/bin/env bash
# study.sh: the multi-seed recipe study (issue #14 item 6): every recipe in RECIPES trained with every
# seed in SEEDS on enwiki (data/enwiki/, see dev/study/enwiki_part.sh), d6 by default, each run one epoch
# of the training shards, validation on the whole validation split. Resumable: run it again (and again)
# until it says the grid is complete; it stops cleanly before DEADLINE seconds, so each call of the
# device tool (10 minutes at most) does what fits and the next one goes on.
#
# usage: bash dev/study/study.sh            (settings from the environment, defaults in brackets)
#   RECIPES   recipes, trainer presets ["bf16 nvfp4 nvfp4-naive"], or names of VARIANTS
#   VARIANTS  named variants of a preset, one a line: NAME RECIPE [TRAINER FLAGS...], e.g.
#             "nvfp4+lora16 nvfp4 --lora-svd-rank 16"; a RECIPES word that a line names runs --recipe RECIPE
#             with those flags (after the plan's, before EXTRA_ARGS), in STUDY_DIR/NAME/seedN; any other word
#             is a preset, as before [empty]. NAME: letters, digits and . _ + - (a folder name)
#   SEEDS     seeds ["1 2 3"]; the grid runs seed-major (every recipe with seed 1, then seed 2, ...), so
#             a grid cut short still compares every recipe on the same seeds
#   MODEL [d6]  B [64]  T [1024]  (one optimizer step = B*T tokens, no accumulation: 65,536)
#   TOKENS    token budget per run [empty: one epoch = every whole batch of the training shards, i.e.
#             sum over shards of floor(floor((n-1)/T)/B) steps]; else steps = floor(TOKENS / (B*T))
#   LR [1.5e-3]  WARMUP_FRAC [0.02] of the steps  FINAL_LR_FRAC [0.1] (cosine to it)
#   VAL_EVALS [10]: validation every ceil(steps/VAL_EVALS) steps (step 0 included) and at the end
#   VAL_BATCHES [empty: the whole validation split, computed from its shards' headers]
#   CKPT_EVERY [200] steps; a run cut by the deadline resumes from its newest checkpoint (a d6 checkpoint
#             is ~0.3 GB, 10 bytes per parameter: every 200 steps costs little, a cut loses < 200 steps)
#   DIAG_EVERY [0]: FP4 diagnostics lines in the log every N steps (0: off; they cost time and space)
#   DEADLINE [540] seconds from the start of this script: no run starts or resumes with less than
#             MIN_LEFT [45] s left, and a running one is stopped (SIGTERM) STOP_MARGIN [5] s before it
#   STUDY_DIR [out/study] (out/ is gitignored): STUDY_DIR/RECIPE/seedN/{log.jsonl,train.txt,ckpt_*}
#   DATA [data/enwiki]; PARTS ["a b c d"]: refuse to start unless DATA/.parts/P.done exists for each
#             (so a machine that went cold between the data calls is caught; PARTS="" skips the check)
#   PREV [.carry/study_prev]: finished logs of earlier sessions (same layout as STUDY_DIR), copied in
#             (those of this grid's recipes and seeds, finished under the plan's model, B, T, steps, warmup,
#             lr and final lr fraction) and skipped, so a grid can
#             span sessions (the machine, and its checkpoints, do not)
#   VARY_SIGNS [1]: ufp4's random Hadamard signs (the preset's seed=1) drawn from the run's seed too.
#             --seed already drives init, data order, every SR draw (the gradients' and AdamW's BF16
#             update) and quartet2's per-step MS-EDEN signs; nvfp4's signs are TE's fixed pattern, part
#             of the recipe, not randomness
#   KEEP_CKPT [0]: 1 keeps a finished run's last checkpoint (0: a finished run's checkpoints are removed)
#   EXTRA_ARGS: more trainer flags for every run (also the variants'); TRAINER [./train_gpt_fp4, built if missing with
#             make train_gpt_fp4 GPU_ARCHS=$GPU_ARCHS [90]]
#   OUT: if set (the device tool sets it), every run's log.jsonl (RECIPE/seedN/log.jsonl), plan.txt, plans.txt are
#             packed into OUT/study_logs.tgz, and the table of scripts/study_table.py written to
#             OUT/study_table/, at the end (the tool returns at most 8 files, none below OUT/a/b/)
# A run counts as finished when its log has the train line of its last step under the planned step count;
# a run that fails (not the deadline) gets a FAILED file and is skipped until RETRY_FAILED=1.
# Prints one line per run finished in this call, with its final validation loss, then the grid's state.
# Exit status: 0 the grid is complete, 10 runs remain (call again), 1 an error.
set -uo pipefail
cd "$(dirname "$0")/../.."
T_START=$SECONDS
RECIPES=${RECIPES:-"bf16 nvfp4 nvfp4-naive"}
SEEDS=${SEEDS:-"1 2 3"}
MODEL=${MODEL:-d6}
B=${B:-64}
T=${T:-1024}
TOKENS=${TOKENS:-}
LR=${LR:-1.5e-3}
WARMUP_FRAC=${WARMUP_FRAC:-0.02}
FINAL_LR_FRAC=${FINAL_LR_FRAC:-0.1}
VAL_EVALS=${VAL_EVALS:-10}
VAL_BATCHES=${VAL_BATCHES:-}
CKPT_EVERY=${CKPT_EVERY:-200}
DIAG_EVERY=${DIAG_EVERY:-0}
DEADLINE=${DEADLINE:-540}
MIN_LEFT=${MIN_LEFT:-45}
STOP_MARGIN=${STOP_MARGIN:-5}
STUDY_DIR=${STUDY_DIR:-out/study}
DATA=${DATA:-data/enwiki}
PARTS=${PARTS-"a b c d"}
PREV=${PREV:-.carry/study_prev}
VARY_SIGNS=${VARY_SIGNS:-1}
KEEP_CKPT=${KEEP_CKPT:-0}
RETRY_FAILED=${RETRY_FAILED:-0}
EXTRA_ARGS=${EXTRA_ARGS:-}
VARIANTS=${VARIANTS:-}
TRAINER=${TRAINER:-./train_gpt_fp4}
TRAIN_GLOB="$DATA/enwiki_train_*.bin"
VAL_GLOB="$DATA/enwiki_val_*.bin"
PY=${PYTHON:-python3}

say() { echo "study: $*"; }
die() { echo "study: error: $*" >&2; exit 1; }
left() { echo $((DEADLINE - (SECONDS - T_START))); }

# ---- the variants: NAME -> its preset and its flags (a RECIPES word no line names is a preset itself)
declare -A variant_recipe=() variant_flags=()
while read -r vname vrecipe vflags; do
    [ -n "$vname" ] || continue
    [[ $vname =~ ^[A-Za-z0-9._+-]+$ ]] || die "VARIANTS: '$vname' is not a folder name (letters, digits, . _ + -)"
    [ -n "$vrecipe" ] || die "VARIANTS: '$vname' names no recipe (a line is NAME RECIPE [FLAGS...])"
    [ -z "${variant_recipe[$vname]:-}" ] || die "VARIANTS: '$vname' is defined twice"
    variant_recipe[$vname]=$vrecipe
    variant_flags[$vname]=$vflags
done <<<"$VARIANTS"
recipe_of() { echo "${variant_recipe[$1]:-$1}"; }   # the trainer's --recipe for a RECIPES word
flags_of() { echo "${variant_flags[$1]:-}"; }       # and its own flags

# ---- the data, and the plan derived from it
for p in $PARTS; do
    [ -f "$DATA/.parts/$p.done" ] || die "$DATA/.parts/$p.done is missing: the data part '$p' is not there (a cold" \
        "machine loses data/enwiki: redo the data calls, see dev/study/enwiki_part.sh), or set PARTS to the parts you have"
done
plan=$("$PY" - "$TRAIN_GLOB" "$VAL_GLOB" "$B" "$T" <<'EOF'
import glob, struct, sys
train, val, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def shards(pat):
    out = []
    for f in sorted(glob.glob(pat)):
        with open(f, "rb") as fh:
            magic, version, n = struct.unpack("<3i", fh.read(12))
        if magic != 20240520:
            sys.exit(f"{f}: not a token shard")
        out.append(n)
    return out
tr, va = shards(train), shards(val)
if not tr or not va:
    sys.exit(f"no shards: {len(tr)} matching {train}, {len(va)} matching {val}")
batches = lambda ns: sum(((n - 1) // T) // B for n in ns)
print(len(tr), sum(tr), batches(tr), len(va), sum(va), batches(va))
EOF
) || die "reading the shards failed"
read -r n_train_shards train_tokens epoch_steps n_val_shards val_tokens val_batches_all <<<"$plan"
STEP_TOKENS=$((B * T))
if [ -n "$TOKENS" ]; then STEPS=$((TOKENS / STEP_TOKENS)); else STEPS=$epoch_steps; fi
[ "$STEPS" -ge 10 ] || die "only $STEPS steps: not enough training data in $TRAIN_GLOB"
WARMUP=$(awk -v s="$STEPS" -v f="$WARMUP_FRAC" 'BEGIN { w = int(s * f + 0.5); print (w < 1 ? 1 : w) }')
VAL_EVERY=$(( (STEPS + VAL_EVALS - 1) / VAL_EVALS ))
VB=${VAL_BATCHES:-$val_batches_all}
[ "$VB" -ge 1 ] || die "the validation split ($val_tokens tokens) holds no whole batch of $B x $T"
say "data: $train_tokens training tokens in $n_train_shards shards ($epoch_steps whole batches = one epoch)," \
    "$val_tokens validation tokens in $n_val_shards shard(s) ($val_batches_all batches)"
say "plan: $MODEL, B=$B T=$T, $STEPS steps = $((STEPS * STEP_TOKENS)) tokens per run, lr $LR, warmup $WARMUP," \
    "cosine to $FINAL_LR_FRAC, val every $VAL_EVERY steps on $VB batches ($((VB * STEP_TOKENS)) tokens)," \
    "checkpoint every $CKPT_EVERY; recipes: $RECIPES; seeds: $SEEDS; deadline ${DEADLINE}s"
mkdir -p "$STUDY_DIR"
cat > "$STUDY_DIR/plan.txt" <<EOF
model $MODEL B $B T $T steps $STEPS tokens $((STEPS * STEP_TOKENS)) lr $LR warmup $WARMUP schedule cosine final_lr_frac $FINAL_LR_FRAC
val_every $VAL_EVERY val_batches $VB train_tokens $train_tokens val_tokens $val_tokens ckpt_every $CKPT_EVERY diag_every $DIAG_EVERY
recipes $RECIPES
seeds $SEEDS
vary_signs $VARY_SIGNS extra_args $EXTRA_ARGS
EOF
# (only a grid with variants says so: the plan of a grid without them, and so plans.txt, reads as it always did)
for r in $RECIPES; do
    [ -n "${variant_recipe[$r]:-}" ] && echo "variant $r: --recipe ${variant_recipe[$r]} ${variant_flags[$r]}" >> "$STUDY_DIR/plan.txt"
done
# plans.txt: every different plan this folder's grid ran under, in order (a grid that spans calls with other
# RECIPES or SEEDS keeps one plan.txt, the newest; plans.txt says what ran before it)
plan_id="== plan $(md5sum < "$STUDY_DIR/plan.txt" | cut -c1-12)"
if [ "$(grep '^== plan ' "$STUDY_DIR/plans.txt" 2>/dev/null | tail -n 1)" != "$plan_id" ]; then
    { echo "$plan_id"; cat "$STUDY_DIR/plan.txt"; } >> "$STUDY_DIR/plans.txt"
fi

# ---- a run's state: "done VAL_LOSS" | "other SETTINGS" (finished under another step count, warmup, lr,
#      final lr fraction, model, batch or sequence length than the plan's) | "partial CKPT_STEP" | "failed" | "fresh"
state() {
    "$PY" - "$1" "$STEPS" "$WARMUP" "$LR" "$FINAL_LR_FRAC" "$B" "$T" "$MODEL" <<'EOF'
import json, os, re, sys
d, steps = sys.argv[1], int(sys.argv[2])
plan = {"warmup": int(sys.argv[3]), "lr": float(sys.argv[4]), "final_lr_frac": float(sys.argv[5]),
        "batch_size": int(sys.argv[6]), "seq_len": int(sys.argv[7])}
cfg_steps, cfg, last_train, vals, model = None, {}, 0, {}, None
try:
    with open(os.path.join(d, "log.jsonl")) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            t = r.get("type")
            if t == "config":
                cfg_steps, cfg = r.get("steps"), r
                # a resumed run of trainers before 2026-12-02 logged its model as "checkpoint": keep the
                # model of the config line that named it
                if r.get("model", "checkpoint") != "checkpoint":
                    model = r["model"]
            elif t == "train":
                last_train = max(last_train, int(r["step"]))
            elif t == "val":
                vals[int(r["step"])] = r["val_loss"]
except OSError:
    pass
ckpts = sorted(int(m.group(1)) for f in (os.listdir(d) if os.path.isdir(d) else [])
               for m in [re.fullmatch(r"ckpt_(\d{8})\.bin", f)] if m)
differ = [f"steps {cfg_steps}"] if cfg_steps != steps else []
differ += [f"{k} {cfg[k]}" for k, v in plan.items() if k in cfg and abs(float(cfg[k]) - v) > 1e-6 * max(1.0, abs(v))]
differ += [f"model {model}"] if model is not None and model != sys.argv[8] else []
if cfg_steps is not None and last_train >= cfg_steps and cfg_steps > 0:
    if not differ:
        print("done", "%.6f" % vals[max(vals)] if vals else "nan")
    else:
        print("other", ", ".join(differ))
elif os.path.exists(os.path.join(d, "FAILED")):
    print("failed")
elif ckpts and not differ:
    print("partial", ckpts[-1])
else:
    print("fresh")
EOF
}

# ---- finished runs of earlier sessions
if [ -d "$PREV" ]; then
    for rel in $(for s in $SEEDS; do for r in $RECIPES; do echo "$r/seed$s"; done; done); do
        f=$PREV/$rel/log.jsonl
        [ -f "$f" ] || continue
        read -r st _ <<<"$(state "$(dirname "$f")")"
        [ "$st" = done ] || continue
        read -r here _ <<<"$(state "$STUDY_DIR/$rel")"
        [ "$here" = done ] && continue
        rm -rf "${STUDY_DIR:?}/$rel"; mkdir -p "$STUDY_DIR/$rel"
        cp "$f" "$STUDY_DIR/$rel/log.jsonl"
        say "$rel: finished in an earlier session (from $PREV)"
    done
fi

# ---- the trainer
if [ ! -x "$TRAINER" ]; then
    [ "$TRAINER" = ./train_gpt_fp4 ] || die "no trainer at $TRAINER"
    say "building train_gpt_fp4 (GPU_ARCHS=${GPU_ARCHS:-90})"
    t0=$SECONDS
    make -j"$(nproc)" train_gpt_fp4 GPU_ARCHS="${GPU_ARCHS:-90}" > "$STUDY_DIR/build.txt" 2>&1 ||
        { tail -n 30 "$STUDY_DIR/build.txt"; die "the build failed"; }
    say "built in $((SECONDS - t0)) s"
fi

sign_args() {   # ufp4 with its Hadamard signs drawn from the run's seed (the preset's slots, seed=1 -> seed=S)
    local r=$1 s=$2
    if [ "$VARY_SIGNS" = 1 ] && [ "$r" = ufp4 ]; then
        echo "--fprop-x int4,h16,seed=$s --fprop-w int4,h16,seed=$s --dgrad-dy int4,sr,h16,seed=$s" \
             "--dgrad-w int4,h16,seed=$s --wgrad-dy int4,sr,h16,seed=$s --wgrad-x int4,h16,seed=$s"
    fi
}

copy_out() {   # the device tool returns at most 8 files, none deeper than OUT/a/b: the logs travel as one archive
    [ -n "${OUT:-}" ] || return 0
    (cd "$STUDY_DIR" && ls -d */seed*/log.jsonl plan.txt plans.txt 2>/dev/null | tar czf "$OUT/study_logs.tgz" -T -) ||
        say "could not pack the logs into OUT/study_logs.tgz"
    "$PY" scripts/study_table.py "$STUDY_DIR" --out "$OUT/study_table" > "$OUT/study_table.txt" 2>&1 ||
        say "scripts/study_table.py failed (see OUT/study_table.txt)"
}

# ---- the grid
stopped=""
for seed in $SEEDS; do
    [ -z "$stopped" ] || break
    for r in $RECIPES; do
        d=$STUDY_DIR/$r/seed$seed
        rec=$(recipe_of "$r")
        read -r st arg <<<"$(state "$d")"
        case $st in
        done)   continue ;;
        other)  say "$r seed $seed: finished under other settings than the plan's ($arg): left out (delete $d to rerun)"
                continue ;;
        failed) if [ "$RETRY_FAILED" = 1 ]; then rm -f "$d/FAILED"; st=fresh
                else say "$r seed $seed: failed earlier (see $d/train.txt; RETRY_FAILED=1 retries)"; continue; fi ;;
        esac
        if [ "$(left)" -lt "$MIN_LEFT" ]; then stopped="the deadline (only $(left) s left)"; break; fi
        mkdir -p "$d"
        if [ "$st" = partial ]; then
            resume=(--resume latest)
            say "$r seed $seed: resuming from step $arg"
        else
            resume=()
            rm -f "$d"/log.jsonl "$d"/log.jsonl.tmp "$d"/ckpt_*
        fi
        args=(--model "$MODEL" -b "$B" -t "$T" --total-batch "$STEP_TOKENS" --steps "$STEPS" --lr "$LR"
              --warmup "$WARMUP" --schedule cosine --final-lr-frac "$FINAL_LR_FRAC" --val-every "$VAL_EVERY"
              --val-batches "$VB" --sample-every 0 --diag-every "$DIAG_EVERY" --ckpt-every "$CKPT_EVERY"
              --seed "$seed" --recipe "$rec" -i "$TRAIN_GLOB" -j "$VAL_GLOB" -o "$d"
              $(sign_args "$rec" "$seed") $(flags_of "$r") $EXTRA_ARGS "${resume[@]}")
        t0=$SECONDS
        echo "=== $(date -u +%FT%TZ) $TRAINER ${args[*]}" >> "$d/train.txt"
        lim=$(( $(left) - STOP_MARGIN )); [ $lim -ge 1 ] || lim=1
        timeout -k 5 $lim "$TRAINER" "${args[@]}" >> "$d/train.txt" 2>&1
        rc=$?
        read -r st arg <<<"$(state "$d")"
        if [ "$st" = done ]; then
            say "$r seed $seed: done in $((SECONDS - t0)) s, final val loss $arg"
            if [ "$KEEP_CKPT" = 1 ]; then
                ls "$d"/ckpt_*.bin 2>/dev/null | LC_ALL=C sort | head -n -1 | xargs -r rm -f
            else
                rm -f "$d"/ckpt_*
            fi
        elif [ $rc = 124 ] || [ $rc = 137 ]; then
            if [ "$st" = partial ]; then where="resumes from its checkpoint of step $arg"
            else where="no checkpoint yet: starts over"; fi
            stopped="the deadline ($r seed $seed $where)"
            say "$r seed $seed: cut by the deadline after $((SECONDS - t0)) s ($where)"
            break
        else
            { echo "exit status $rc"; tail -n 5 "$d/train.txt"; } > "$d/FAILED"
            say "$r seed $seed: FAILED (exit status $rc); the log's end:"
            tail -n 5 "$d/train.txt" | sed 's/^/    /'
        fi
    done
done

# ---- where the grid stands
total=0; ndone=0; nfailed=0; summary=""
for seed in $SEEDS; do
    for r in $RECIPES; do
        total=$((total + 1))
        read -r st arg <<<"$(state "$STUDY_DIR/$r/seed$seed")"
        case $st in
        done)   ndone=$((ndone + 1)); summary+=" $r/$seed=$arg" ;;
        failed) nfailed=$((nfailed + 1)); summary+=" $r/$seed=FAILED" ;;
        partial) summary+=" $r/$seed=at-$arg" ;;
        *) ;;
        esac
    done
done
say "final val losses:${summary:- none yet}"
copy_out
if [ $((ndone + nfailed)) = $total ]; then
    say "grid complete: $ndone of $total runs finished, $nfailed failed ($((SECONDS - T_START)) s in this call)"
    exit 0
fi
say "INCOMPLETE: $ndone of $total runs finished, $nfailed failed; stopped by ${stopped:-nothing?}; call again to continue" \
    "($((SECONDS - T_START)) s in this call)"
exit 10
