# cli.mk: the trainer's command line, data files and checkpoints, checked before the GPU is touched.
#   build/test_cli   runs ./train_gpt_fp4 with bad inputs (CPU only; needs the trainer built, skips otherwise)
CPU_TESTS += build/test_cli
build/test_cli: dev/test/check_coverage.h llmc/run/checkpoint.h llmc/run/ckpt_fields.h llmc/model/gpt_config.h llmc/model/models.h llmc/model/llama.h llmc/run/dataloader.h llmc/fp4/recipe.h llmc/run/eval_tasks.h
# scripts/check_diverge.sh: a diverging run names its newest good checkpoint and leaves none from broken
# weights (GPU; skips without one). A script, listed with the GPU tests so that make test runs it.
GPU_TESTS += scripts/check_diverge.sh
# scripts/check_bf16_forward.sh: --bf16-forward-from across resumes, before and after the switch (GPU; skips
# without one): check_resume.sh's bit-for-bit losses and events under nvfp4 with the switch.
GPU_TESTS += scripts/check_bf16_forward.sh
