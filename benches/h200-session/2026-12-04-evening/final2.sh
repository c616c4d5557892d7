# Call 2: CPU side by side with llama.cpp's AMX build (waits for the build), 16 threads, 2 rounds.
export MODELS="llama-1b:q4_0 llama-8b:q4_0 llama-8b:q4_k_m" CPU_THREADS=16 ROUNDS=2
bash benches/scale-h200.sh cpu 2>&1 | tail -8
f=/root/scale/synth/llama-8b-q4_0.gguf
.device/eng/engine-min bench --model $f --plan cpu --threads 16 --pp 512 --tg 16 --reps 1 --breakdown > $OUT/cpu-breakdown.txt 2>&1; grep -E "^pp|other|attention|swiglu" $OUT/cpu-breakdown.txt
