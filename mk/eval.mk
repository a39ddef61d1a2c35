# eval.mk: held-out tasks (llmc/run/eval_tasks.h: HellaSwag and LAMBADA token files, rows, scoring).
#   build/test_eval                 the token-file reader and its errors, rows, shapes and scoring (CPU)
#   dev/test/test_eval_files.sh     the committed data/eval files read back by the Python reader, and rebuilt
#                                   from ../shared/data/eval byte for byte where tiktoken is installed (skips)
CPU_TESTS += build/test_eval
CPU_TESTS += dev/test/test_eval_files.sh
build/test_eval: llmc/run/eval_tasks.h llmc/run/checkpoint.h dev/test/check_coverage.h
#   build/test_export               scripts/export_hf.py: GPT-2 and Llama (GQA, untied and tied) checkpoints with known
#                                   weights exported, read back value for value, config.json checked, bad headers
#                                   refused; with torch and transformers installed, the exports loaded and checked by
#                                   dev/eval/check_export.py against a float64 forward (CPU; skips without python3
#                                   and numpy, and the transformers part without those)
CPU_TESTS += build/test_export
build/test_export: llmc/run/checkpoint.h llmc/run/ckpt_fields.h llmc/model/gpt_config.h llmc/model/models.h \
                   scripts/export_hf.py dev/eval/check_export.py
