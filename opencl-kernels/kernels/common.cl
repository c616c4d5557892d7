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

// ---- GGUF Q5_0, Q5_1 and the K-quants Q4_K, Q5_K, Q6_K, read as stored (no re-layout) -------
// Each decoder takes a row's GGUF bytes, a 32-value slice kt of the row (Q5_x: block kt;
// K-quants: sub-block kt % 8 of super-block kt / 8, for Q6_K two of its 16-value sub-blocks)
// and a part p (0..3) of it: the values 32 kt + 8 p .. 32 kt + 8 p + 7. It returns their quants
// as floats, already offset (Q5_0: q - 16, Q6_K: q - 32), and the part's scale s and offset o:
// value = q * s + o. s and o are the products hetero_sme::dequantize_row forms (K-quants:
// s = d * sc, o = -(dmin * m); Q6_K: s = d * sc), so the kernels' weights are its values.
// Loads are as wide as the block alignment allows: Q5_1, Q4_K and Q5_K blocks (24, 144 and
// 176 bytes) keep their 8-byte quant runs 8-aligned; Q5_0 (22) and Q6_K (210) are 2-aligned.

// Q5_0: 22 bytes = f16 d, qh[4] (fifth bit of value e: bit e), qs[16] (value e < 16: low
// nibble of qs[e], e >= 16: high nibble of qs[e - 16]); value (q - 16) d.
inline float8 qp_q5_0(__global const uchar *row, uint kt, uint p, float *s, float *o) {
    __global const uchar *b = row + (size_t)kt * 22u;
    *s = vload_half(0, (__global const half *)b);
    *o = 0.0f;
    uchar8 n = as_uchar8(vload4(0, (__global const ushort *)(b + 6u + 8u * (p & 1u))));
    n = (n >> (uchar)(4u * (p >> 1))) & (uchar)15;
    uchar8 h = ((uchar8)(b[2u + p]) >> (uchar8)(0, 1, 2, 3, 4, 5, 6, 7)) & (uchar)1;
    return convert_float8(n | (h << (uchar)4)) - 16.0f;
}

// Q5_1: 24 bytes = f16 d, f16 m, qh[4], qs[16] laid out as Q5_0; value q d + m.
inline float8 qp_q5_1(__global const uchar *row, uint kt, uint p, float *s, float *o) {
    __global const uchar *b = row + (size_t)kt * 24u;
    float2 dm = vload_half2(0, (__global const half *)b);
    *s = dm.x;
    *o = dm.y;
    uchar8 n = as_uchar8(vload2(0, (__global const uint *)(b + 8u + 8u * (p & 1u))));
    n = (n >> (uchar)(4u * (p >> 1))) & (uchar)15;
    uchar8 h = ((uchar8)(b[4u + p]) >> (uchar8)(0, 1, 2, 3, 4, 5, 6, 7)) & (uchar)1;
    return convert_float8(n | (h << (uchar)4));
}

// The 6-bit scale (x) and minimum (y) of sub-block j of a Q4_K / Q5_K super-block, from its
// 12 packed bytes q: j < 4: low 6 bits of q[j], q[j + 4]; else a nibble of q[j + 4] and the top
// two bits of q[j - 4] (scale) and q[j] (minimum).
inline uint2 scale_min_k4(uint j, __global const uchar *q) {
    if (j < 4u) return (uint2)(q[j] & 63u, q[j + 4u] & 63u);
    return (uint2)((q[j + 4u] & 15u) | ((q[j - 4u] >> 6) << 4),
                   (q[j + 4u] >> 4) | ((q[j] >> 6) << 4));
}

// Q4_K: 144 bytes = f16 d, f16 dmin, scales[12], qs[128]; sub-block j: nibbles of
// qs[32 (j / 2) ..][..32], low for even j, high for odd; value d sc q - dmin m.
inline float8 qp_q4_k(__global const uchar *row, uint kt, uint p, float *s, float *o) {
    __global const uchar *b = row + (size_t)(kt >> 3) * 144u;
    uint j = kt & 7u;
    float2 dm = vload_half2(0, (__global const half *)b);
    uint2 sm = scale_min_k4(j, b + 4u);
    *s = dm.x * (float)sm.x;
    *o = -(dm.y * (float)sm.y);
    uchar8 n = as_uchar8(vload2(0, (__global const uint *)(b + 16u + 32u * (j >> 1) + 8u * p)));
    return convert_float8((n >> (uchar)(4u * (j & 1u))) & (uchar)15);
}

// Q5_K: 176 bytes = f16 d, f16 dmin, scales[12], qh[32], qs[128]; Q4_K's nibbles plus a fifth
// bit: value l of sub-block j has bit j of qh[l].
inline float8 qp_q5_k(__global const uchar *row, uint kt, uint p, float *s, float *o) {
    __global const uchar *b = row + (size_t)(kt >> 3) * 176u;
    uint j = kt & 7u;
    float2 dm = vload_half2(0, (__global const half *)b);
    uint2 sm = scale_min_k4(j, b + 4u);
    *s = dm.x * (float)sm.x;
    *o = -(dm.y * (float)sm.y);
    uchar8 n = as_uchar8(vload2(0, (__global const uint *)(b + 48u + 32u * (j >> 1) + 8u * p)));
    uchar8 h = as_uchar8(vload2(0, (__global const uint *)(b + 16u + 8u * p)));
    n = (n >> (uchar)(4u * (j & 1u))) & (uchar)15;
    h = (h >> (uchar)j) & (uchar)1;
    return convert_float8(n | (h << (uchar)4));
}

// Q6_K: 210 bytes = ql[128], qh[64], scales[16] (i8), f16 d. Slice j (0..7) is quarter
// q = j % 4 of half h = j / 4: value l (0..31) has the low nibble (q < 2) or high nibble of
// ql[64 h + 32 (q % 2) + l], bits 2q, 2q + 1 of qh[32 h + l], scale scales[8 h + 2 q + l / 16];
// value d sc (q - 32).
inline float8 qp_q6_k(__global const uchar *row, uint kt, uint p, float *s, float *o) {
    __global const uchar *b = row + (size_t)(kt >> 3) * 210u;
    uint j = kt & 7u, h = j >> 2, q = j & 3u;
    float d = vload_half(0, (__global const half *)(b + 208u));
    *s = d * (float)((__global const char *)b)[192u + 8u * h + 2u * q + (p >> 1)];
    *o = 0.0f;
    uchar8 lo = as_uchar8(vload4(0, (__global const ushort *)(b + 64u * h + 32u * (q & 1u) + 8u * p)));
    uchar8 hi = as_uchar8(vload4(0, (__global const ushort *)(b + 128u + 32u * h + 8u * p)));
    lo = (lo >> (uchar)(4u * (q >> 1))) & (uchar)15;
    hi = (hi >> (uchar)(2u * q)) & (uchar)3;
    return convert_float8(lo | (hi << (uchar)4)) - 32.0f;
}

// Bytes of a row of K values.
#define ROWB_q5_0(K) (((K) >> 5) * 22u)
#define ROWB_q5_1(K) (((K) >> 5) * 24u)
#define ROWB_q4_k(K) (((K) >> 8) * 144u)
#define ROWB_q5_k(K) (((K) >> 8) * 176u)
#define ROWB_q6_k(K) (((K) >> 8) * 210u)

// Per format F: dot8_F = sum of part p of slice kt times activations xa (values 0..3), xb
// (4..7), the scale and offset applied once per part; deq8_F = the part's 8 values.
#define QPART_FNS(F)                                                                             \
    inline float dot8_##F(__global const uchar *row, uint kt, uint p, float4 xa, float4 xb) {   \
        float s, o;                                                                              \
        float8 q = qp_##F(row, kt, p, &s, &o);                                                  \
        return s * (dot(q.lo, xa) + dot(q.hi, xb)) + o * dot(xa + xb, (float4)(1.0f));          \
    }                                                                                            \
    inline float8 deq8_##F(__global const uchar *row, uint kt, uint p) {                        \
        float s, o;                                                                              \
        float8 q = qp_##F(row, kt, p, &s, &o);                                                  \
        return q * s + o;                                                                        \
    }

QPART_FNS(q5_0)
QPART_FNS(q5_1)
QPART_FNS(q4_k)
QPART_FNS(q5_k)
QPART_FNS(q6_k)
