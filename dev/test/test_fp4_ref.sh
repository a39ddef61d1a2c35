#!/usr/bin/env bash
# test_fp4_ref.sh: the numpy reference (dev/fp4_ref.py --verify) recomputes every record of the committed
# golden file dev/golden/fp4_golden.bin from the inputs stored in it and must get the same bytes; the
# C tests compare against that file, so this ties it to the reference. Needs python3 with numpy (any
# python3 on PATH that has it, else /usr/bin/python3, or PYTHON=...); skips with a message without one.
cd "$(dirname "$0")/../.."
for py in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c "import numpy" >/dev/null 2>&1; then
        exec "$py" dev/fp4_ref.py --verify dev/golden/fp4_golden.bin
    fi
done
echo "SKIP fp4_ref: no python3 with numpy here (apt-get install python3-numpy, or pip install numpy)"
echo "TESTS fp4_ref: passed=0 failed=0 skipped=1"
