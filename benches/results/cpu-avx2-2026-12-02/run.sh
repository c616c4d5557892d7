#!/bin/sh
# Alternating runs: every format on avx2, portable on q4_0 and q4_k, three rounds.
cd /work/wt-cpu
for rep in 1 2 3; do
  for f in q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k; do
    echo "== rep $rep avx2 $f $(uptime)"
    ./target/release/examples/int8_decode 1 2 --format $f --shapes llama --m 1 --kernel avx2
  done
  for f in q4_0 q4_k; do
    echo "== rep $rep portable $f $(uptime)"
    ./target/release/examples/int8_decode 1 2 --format $f --shapes llama --m 1 --kernel portable
  done
done
