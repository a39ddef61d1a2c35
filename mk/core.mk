# core.mk: the trainer's host-side pieces (CPU only).
#   build/test_core         option parsing, schedules, the log (llmc/args.h, schedule.h, logger.h)
#   build/test_recipe       recipes (llmc/recipe.h)
#   build/test_checkpoint   checkpoint files: sections, checksums, atomic writes (llmc/checkpoint.h)
CPU_TESTS += build/test_core
CPU_TESTS += build/test_recipe
CPU_TESTS += build/test_plan
CPU_TESTS += build/test_checkpoint
