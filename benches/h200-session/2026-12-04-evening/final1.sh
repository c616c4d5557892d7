# Call 1: llama.cpp build started in the background, synth files, limits; GPU start-up; 8B CPU pp4096 (new vs base).
export MODELS="llama-1b:q4_0 llama-8b:q4_0 llama-8b:q4_k_m" CPU_THREADS=16 ROUNDS=2
bash benches/scale-h200.sh build 2>&1 | tail -12
mkdir -p /root/startup && ln -sf /root/scale/synth/llama-8b-q4_0.gguf /root/startup/llama-8b-q4_0.gguf
OUT=$OUT/startup timeout 200 bash benches/h200-startup.sh 2>&1 | grep -E "startup|decoder built|wall|==" | head -20
chmod +x .device/engine-min-base .device/dq_gemm; f=/root/scale/synth/llama-8b-q4_0.gguf
for b in .device/engine-min-base .device/eng/engine-min; do for p in 512 4096; do echo "$b pp$p: $(timeout 100 $b bench --model $f --plan cpu --threads 16 --pp $p --tg 0 --reps 1 2>&1 | grep ^pp)"; done; done | tee $OUT/pp-ratio.txt
.device/dq_gemm peak 16 | tee $OUT/dq-peak.txt
