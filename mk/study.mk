# study.mk: the multi-seed recipe study (dev/study/, scripts/study_table.py), checked on the CPU with a stand-in
# trainer and tokenizer (dev/study/test_study.sh).
CPU_TESTS += dev/study/test_study.sh
