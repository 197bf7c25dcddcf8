#!/usr/bin/env bash
# Same-window LibSVM read: sparrow, MXNet 1.9.1 (OMP 1 and 2), scikit-learn.
set -u
cd /work/main
OUT=bench-notes/libsvm_2026-11-23
F=/work/bench-data/big_1m_x_40.libsvm
sp() { for i in 1 2 3; do echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) $(target/release/examples/libsvm_read $F --data-shape 10000000 --batch-size 1024 --json 2>/dev/null)"; done >> $OUT/sparrow.jsonl; }
sp
OMP_NUM_THREADS=1 /work/venvs/mx/bin/python ../shared/anchors/mxnet/bench_libsvm_read.py $F $OUT/mxnet_omp1.json 3 200 --skip-1024 > $OUT/mxnet_omp1.log 2>&1
sp
OMP_NUM_THREADS=2 /work/venvs/mx/bin/python ../shared/anchors/mxnet/bench_libsvm_read.py $F $OUT/mxnet_omp2.json 3 200 --skip-1024 > $OUT/mxnet_omp2.log 2>&1
sp
/work/venvs/sk/bin/python ../shared/anchors/mxnet/bench_sklearn_svmlight.py $F $OUT/sklearn.json 1 > $OUT/sklearn.log 2>&1
sp
echo done > $OUT/.done
