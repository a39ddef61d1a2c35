# python.mk: the Python scripts (scripts/), checked on the CPU: plot_loss.py and study_table.py label runs and
# group seeds from their logs' config lines (scripts/runlabels.py; dev/test/test_plot_labels.sh).
CPU_TESTS += dev/test/test_plot_labels.sh
