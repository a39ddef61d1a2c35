# cli.mk: the trainer's command line, data files and checkpoints, checked before the GPU is touched.
#   build/test_cli   runs ./train_gpt_fp4 with bad inputs (CPU only; needs the trainer built, skips otherwise)
CPU_TESTS += build/test_cli
build/test_cli: llmc/checkpoint.h llmc/gpt_config.h llmc/dataloader.h llmc/recipe.h
