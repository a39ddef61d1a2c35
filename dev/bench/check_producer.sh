set -x
nvidia-smi -L
(time make -j16 train_gpt_fp4 test_gpt_fp4) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
./test_gpt_fp4 > $OUT/test_gpt_fp4.txt 2>&1; echo "test_gpt_fp4 rc=$?"; tail -3 $OUT/test_gpt_fp4.txt
for r in nvfp4 ufp4 nvfp4-naive mxfp4; do
 for v in 0 1; do
  LLMC_ATTENTION=own LLMC_QF_NOPRO=$v ./train_gpt_fp4 --model d12 --batch-size 16 --seq-len 1024 --total-batch 16384 --steps 6 --recipe $r --val-every 0 --sample-every 0 --ckpt-every -1 --out-dir /tmp/o_${r}_${v} > $OUT/loss_${r}_$v.txt 2>&1
  grep -o '"loss": *[0-9.]*' /tmp/o_${r}_${v}/log.jsonl | tr '\n' ' ' > $OUT/l_${r}_$v.txt; echo
 done
 cmp $OUT/l_${r}_0.txt $OUT/l_${r}_1.txt && echo "SAME LOSSES $r" || { echo "DIFF $r"; cat $OUT/l_${r}_0.txt $OUT/l_${r}_1.txt; }
done
STEPS=20 BENCH_OUT=/tmp/bA dev/bench/bench_train.sh bf16 nvfp4 ufp4 mxfp4 > $OUT/bench_fused.txt 2>&1; cat $OUT/bench_fused.txt
LLMC_QF_NOPRO=1 STEPS=20 BENCH_OUT=/tmp/bB dev/bench/bench_train.sh bf16 nvfp4 ufp4 mxfp4 > $OUT/bench_nopro.txt 2>&1; cat $OUT/bench_nopro.txt
