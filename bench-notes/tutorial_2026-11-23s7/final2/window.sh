#!/usr/bin/env bash
# Issue-6 window (session 7): sparrow's full table at 1 and 2 threads, then (c) only for
# MXNet (dot_rsp, OMP 1/2) and PyTorch (EmbeddingBag, 1/2 threads), then sparrow (c) again.
set -u
cd "$(dirname "$0")/../../.."
OUT=bench-notes/tutorial_2026-11-23s7/final2
ANCH=../shared/anchors
for t in 1 2; do target/release/examples/sparse_gluon --threads $t --json > $OUT/sparrow_t$t.json 2>/dev/null; done
mkdir -p /tmp/tut_mx; [ -f /tmp/tut_mx/tutorial.libsvm ] || /work/venvs/mx/bin/python $ANCH/mxnet/bench_tutorial_sparse_gluon.py make-data /tmp/tut_mx > /dev/null
for omp in 1 2; do
  OMP_NUM_THREADS=$omp /work/venvs/mx/bin/python $ANCH/mxnet/bench_tutorial_sparse_gluon.py run dot_rsp /tmp/tut_mx/tutorial.libsvm 7 > $OUT/mx_dot_rsp_omp$omp.json 2>$OUT/mx_omp$omp.err
done
for t in 1 2; do
  /work/venvs/torch/bin/python $ANCH/torch/bench_sparse_mlp.py --variant embbag --threads $t --epochs 7 --json $OUT/torch.jsonl > /dev/null 2>$OUT/torch_t$t.err
done
for i in 1 2 3 4 5; do target/release/examples/sparse_gluon --threads 1 --variants c --json > $OUT/sparrow_c_t1_run$i.json 2>/dev/null; done
echo done > $OUT/.done
