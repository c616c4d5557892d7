// Helpers shared by the kernel programs (layer.cl, decoder.cl): reductions through local
// memory and the exact 4-bit and 8-bit block decoders. Portable OpenCL C 1.2: no cl_khr_fp16
// (FP16 data is read with vload_half*, arithmetic is FP32), no subgroups.

#define MAX_WG 256

// Sum over the `tpr` work-items of row `r` of a (tpr, rows) work-group; tpr is a power of two.
inline float row_sum(float v, __local float* red, uint t, uint r, uint tpr) {
    uint base = r * tpr;
    barrier(CLK_LOCAL_MEM_FENCE);
    red[base + t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = tpr >> 1; s > 0u; s >>= 1) {
        if (t < s) red[base + t] += red[base + t + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[base];
}

// Sum / max over a 1-D work-group whose size is a power of two.
inline float group_sum(float v, __local float* red) {
    uint t = get_local_id(0), n = get_local_size(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    red[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = n >> 1; s > 0u; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

inline float group_max(float v, __local float* red) {
    uint t = get_local_id(0), n = get_local_size(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    red[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = n >> 1; s > 0u; s >>= 1) {
        if (t < s) red[t] = fmax(red[t], red[t + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

// One 8-element part p (0..3) of a GGUF Q8_0 block (34 bytes = f16 d, 32 x i8, 2-byte aligned)
// against activations xa (elements 8p..8p+3) and xb (8p+4..8p+7): d * sum q x.
inline float q8_part(__global const uchar* bp, uint p, float4 xa, float4 xb) {
    float d = vload_half(0, (__global const half*)bp);
    ushort4 u = vload4(0, (__global const ushort*)(bp + 2 + 8u * p));
    float8 q = convert_float8(as_char8(u));
    return d * (dot(q.lo, xa) + dot(q.hi, xb));
}

// ---- "T" layout: 4-bit GEMV with 16-byte loads, coalesced activations, cheap decoding -----
// Why: on an H200 every earlier Q4 design plateaued at ~2.5e12 weights/s (1.2-1.45 TB/s in Q4
// bytes, a third of copy) whatever its load width, while FP16 streams 1.9e12 weights/s at
// 3.7 TB/s: each Q4 weight cost ~8 instructions (shift + and-or + bias subtraction + FMA, and
// 64-bit address arithmetic), so the SMs ran out of issue slots with too few bytes in flight.
// This layout and kernel cut that to ~3.5 instructions per weight and keep 16-64 B per
// work-item in flight:
// * quant plane, per row nb = K/32 16-byte units; unit u holds the 32-bit words w = u,
//   u + nb, u + 2nb, u + 3nb of the row, word w = weights 8w..8w+7 with weight e in bits
//   4e..4e+3 (plain nibble order). So one aligned 16-byte load per work-item, neighbouring
//   work-items read neighbouring units, and for each of the four words neighbouring work-items
//   need neighbouring 32-byte activation slices (coalesced).
// * scale plane, per row nb entries in block order: f16 d (Q4_0) or f16 d, f16 m (Q4_1).
// * decoding, exact, no shifts for the low half of a word: as_float(0x4B000000 | (v & 0xF<<p))
//   is 2^23 + q*2^p (p <= 12), and fma(that, 2^-p, -(2^(23-p) + off)) is exactly q - off: one
//   and-or (LOP3) + one FMA per weight, one shift per 8 weights (v >> 16 for the high half).
// * all index arithmetic in 32 bits (units and scale indices stay below 2^32 for any matrix
//   of fewer than 2^37 weights, checked on the host).
#define T_NIB(v, m, c, o) fma(as_float(((v) & (m)) | 0x4B000000u), (c), (o))
// Sum over one word's 8 weights of (q - off) * x, activations xa (weights 0..3), xb (4..7).
inline float t_word(uint v, float4 xa, float4 xb, float off) {
    uint h = v >> 16;
    float4 lo = (float4)(T_NIB(v, 0xFu, 1.0f, -(8388608.0f + off)),
                         T_NIB(v, 0xF0u, 0.0625f, -(524288.0f + off)),
                         T_NIB(v, 0xF00u, 0.00390625f, -(32768.0f + off)),
                         T_NIB(v, 0xF000u, 0.000244140625f, -(2048.0f + off)));
    float4 hi = (float4)(T_NIB(h, 0xFu, 1.0f, -(8388608.0f + off)),
                         T_NIB(h, 0xF0u, 0.0625f, -(524288.0f + off)),
                         T_NIB(h, 0xF00u, 0.00390625f, -(32768.0f + off)),
                         T_NIB(h, 0xF000u, 0.000244140625f, -(2048.0f + off)));
    return dot(lo, xa) + dot(hi, xb);
}

// One 16-byte unit u of row j: four words, four scales (Q4_1: and mins).
#define T_UNIT_Q4_0(ACC, Q, DB, U, NB, X)                                                      \
    {                                                                                           \
        float s0 = vload_half((DB) + (((U)) >> 2), d);                                          \
        float s1 = vload_half((DB) + (((U) + (NB)) >> 2), d);                                   \
        float s2 = vload_half((DB) + (((U) + 2u * (NB)) >> 2), d);                              \
        float s3 = vload_half((DB) + (((U) + 3u * (NB)) >> 2), d);                              \
        ACC += s0 * t_word((Q).x, X[0], X[1], 8.0f) + s1 * t_word((Q).y, X[2], X[3], 8.0f) +    \
               s2 * t_word((Q).z, X[4], X[5], 8.0f) + s3 * t_word((Q).w, X[6], X[7], 8.0f);     \
    }
#define T_UNIT_Q4_1(ACC, Q, DB, U, NB, X)                                                      \
    {                                                                                           \
        float2 s0 = vload_half2((DB) + (((U)) >> 2), d);                                        \
        float2 s1 = vload_half2((DB) + (((U) + (NB)) >> 2), d);                                 \
        float2 s2 = vload_half2((DB) + (((U) + 2u * (NB)) >> 2), d);                            \
        float2 s3 = vload_half2((DB) + (((U) + 3u * (NB)) >> 2), d);                            \
        ACC += s0.x * t_word((Q).x, X[0], X[1], 0.0f) + s1.x * t_word((Q).y, X[2], X[3], 0.0f) + \
               s2.x * t_word((Q).z, X[4], X[5], 0.0f) + s3.x * t_word((Q).w, X[6], X[7], 0.0f) + \
               s0.y * X[8].x + s1.y * X[8].y + s2.y * X[8].z + s3.y * X[8].w;                   \
    }
