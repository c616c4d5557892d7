#!/bin/sh
cd /work/wt-cpu
for rep in 1 2 3; do
  for f in q4_0 q4_k q5_k q6_k; do
    echo "== rep $rep avx2 $f $(uptime)"
    ./target/release/examples/int8_decode 1 2 --format $f --shapes llama --m 1 --kernel avx2
  done
  echo "== rep $rep portable q4_k $(uptime)"
  ./target/release/examples/int8_decode 1 2 --format q4_k --shapes llama --m 1 --kernel portable
done
