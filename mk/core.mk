# core.mk: the trainer's host-side pieces (CPU only).
#   build/test_core         option parsing, schedules, the log (llmc/run/args.h, schedule.h, logger.h)
#   build/test_recipe       recipes (llmc/fp4/recipe.h)
#   build/test_checkpoint   checkpoint files: sections, checksums, atomic writes (llmc/run/checkpoint.h)
CPU_TESTS += build/test_core
CPU_TESTS += build/test_recipe
CPU_TESTS += build/test_plan
CPU_TESTS += build/test_checkpoint
build/test_recipe build/test_core: dev/test/check_coverage.h
build/test_checkpoint: dev/test/check_coverage.h
