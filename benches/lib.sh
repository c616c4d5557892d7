# Shared helpers of the bench scripts (sourced, not run): medians, ratios, NVIDIA's OpenCL ICD,
# and the one-line readers of `engine-min bench` and `llama-bench` output.

med() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# The median of field FIELD over the lines of FILE that match the awk condition COND.
medf() { awk "$2 {print \$$3}" "$1" | med; } # FILE COND FIELD
# A / B with DIGITS decimals ("n/a" when either is missing or B is zero).
ratio() { echo "$1 $2" | awk -v d="${3:-2}" '{if ($2+0==0 || $1=="") print "n/a"; else printf "%.*f", d, $1/$2}'; } # A B [DIGITS]

# NVIDIA's OpenCL: the ICD file the loader reads, and the crate's platform/cache variables.
opencl_env() {
  local nv
  nv=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
  [ -z "$nv" ] && nv=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
  mkdir -p /etc/OpenCL/vendors && echo "${nv:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
  ldconfig -p | grep -q "libOpenCL.so.1 " || export HETERO_OPENCL_LIB=${nv:-libnvidia-opencl.so.1}
  export HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA}
  export HETERO_OPENCL_CACHE=${HETERO_OPENCL_CACHE:-/root/hetero-ocl-cache}
}

# "pp tg" medians from `engine-min bench` output on stdin (0 where a part is missing).
eng_pp_tg() { awk '/^pp[0-9]+:/ {pp=$2} /^tg[0-9]+:/ {tg=$2} END {print pp+0, tg+0}'; }

# "pp tg" (avg t/s) from `llama-bench -o csv` output on stdin (0 where a part is missing).
lla_pp_tg() {
  # Every data field is quoted and may hold commas (our backend's cpu_info does): split the
  # rows on "," between quotes, the bare header on commas.
  awk 'NR==1 {n=split($0,h,","); for (i=1;i<=n;i++) {gsub(/"/,"",h[i]); c[h[i]]=i}; next}
       {s=$0; sub(/^"/,"",s); sub(/"$/,"",s); split(s,f,/","/)
        if (f[c["n_prompt"]]>0) pp=f[c["avg_ts"]]; else tg=f[c["avg_ts"]]} END {print pp+0, tg+0}'
}
