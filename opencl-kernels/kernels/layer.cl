// Kernels for one decoder layer, built after common.cl (helpers). Portable OpenCL C 1.2: no
// cl_khr_fp16 (FP16 data is read with vload_half*, arithmetic is FP32), no subgroups
// (reductions go through local memory).
//
// Every kernel ends with the completion protocol (signal_done): when `epoch` != 0, each
// work-group, after all its global writes (barrier with a global fence), increments an arrival
// counter sig[0]; the group that arrives last resets the counter, fences, and atomically stores
// `epoch` into the flag word sig[1]. A host thread that reads sig[1] == epoch (acquire) then
// sees every output of that launch. Kernels never return early, because signal_done has a barrier.


inline void signal_done(__global volatile uint* sig, uint epoch) {
    // Unconditional: with the barrier behind an early return, PoCL 3.1 crashed (SIGSEGV).
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (epoch != 0u && get_local_id(0) == 0 && get_local_id(1) == 0) {
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        uint groups = (uint)(get_num_groups(0) * get_num_groups(1));
        uint prev = atomic_inc(&sig[0]);
        if (prev == groups - 1u) {
            sig[0] = 0u;
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            atomic_xchg(&sig[1], epoch);
        }
    }
}


// ---- 4-bit block helpers ------------------------------------------------------------------
// A 16-byte quant word q (GGUF order): byte i holds element i in its low nibble and element
// i + 16 in its high nibble. Nibbles become floats without int->float conversions (a slow,
// quarter-rate instruction on many GPUs): as_float(0x4B000000 | q) is exactly 2^23 + q, and
// subtracting `bias` = 2^23 + offset leaves q - offset exactly.
#define Q4_WORD(v, o)                                                                        \
    {                                                                                        \
        float4 xl = vload4(0, xb + (o));                                                     \
        float4 xh = vload4(0, xb + (o) + 16);                                                \
        uint4 v4 = (uint4)((v), (v) >> 8, (v) >> 16, (v) >> 24);                             \
        float4 ql = as_float4((v4 & 0xfu) | 0x4B000000u) - bias;                             \
        float4 qh = as_float4(((v4 >> 4) & 0xfu) | 0x4B000000u) - bias;                      \
        a += dot(ql, xl) + dot(qh, xh);                                                      \
    }

#define Q4_BIAS_0 8388608.0f  /* 2^23: q */
#define Q4_BIAS_8 8388616.0f  /* 2^23 + 8: q - 8 */

// sum_i (q_i - offset) * x_i over one block (bias selects the offset).
inline float q4_dot(uint4 q, __global const float* xb, float bias) {
    float a = 0.0f;
    Q4_WORD(q.s0, 0)
    Q4_WORD(q.s1, 4)
    Q4_WORD(q.s2, 8)
    Q4_WORD(q.s3, 12)
    return a;
}


inline uint4 load_q16_u16(__global const uchar* p) {
    ushort8 h = vload8(0, (__global const ushort*)p);
    return (uint4)((uint)h.s0 | ((uint)h.s1 << 16), (uint)h.s2 | ((uint)h.s3 << 16),
                   (uint)h.s4 | ((uint)h.s5 << 16), (uint)h.s6 | ((uint)h.s7 << 16));
}

inline float sum16(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    return b.x + b.y + b.z + b.w;
}

// ---- GEMV: y[n] = sum_k W[n][k] x[k] -------------------------------------------------------
// Work-group (tpr, rows): tpr work-items share one weight row; global (tpr, ceil(N/rows)*rows).

// FP16 weights, K % 8 == 0: one 16-byte load per work-item per step.
__kernel void gemv_f16(__global const uint4* w, __global const float* x, __global float* y,
                       uint N, uint K, __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row = get_global_id(1);
    float acc = 0.0f;
    if (row < N) {
        uint k8 = K >> 3;
        __global const uint4* wr = w + (size_t)row * k8;
        __global const float4* x4 = (__global const float4*)x;
        for (uint i = t; i < k8; i += tpr) {
            uint4 q = wr[i];
            float8 wf = vload_half8(0, (const __private half*)&q);
            acc += dot(wf.lo, x4[2 * i]) + dot(wf.hi, x4[2 * i + 1]);
        }
    }
    acc = row_sum(acc, red, t, r, tpr);
    if (t == 0 && row < N) y[row] = acc;
    signal_done(sig, epoch);
}

// FP16 weights, any K: element-wise vload_half.
__kernel void gemv_f16_any(__global const half* w, __global const float* x, __global float* y,
                           uint N, uint K, __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row = get_global_id(1);
    float acc = 0.0f;
    if (row < N) {
        __global const half* wr = w + (size_t)row * K;
        for (uint i = t; i < K; i += tpr) acc += vload_half(i, wr) * x[i];
    }
    acc = row_sum(acc, red, t, r, tpr);
    if (t == 0 && row < N) y[row] = acc;
    signal_done(sig, epoch);
}

// Block formats: a 32-element block is read by 4 work-items, one "part" p (0..3) each. Q4: quant
// bytes 4p..4p+3 hold elements 4p..4p+3 (low nibbles) and 16+4p..19+4p (high nibbles); Q8: bytes
// 8p..8p+7 hold elements 8p..8p+7. Neighbouring work-items read neighbouring quant words and
// neighbouring activations (coalesced); a block-per-work-item mapping reads activations 128
// bytes apart per work-item, which ran at 3% of copy bandwidth on an H200.

inline float q4_part(uint v, float4 xl, float4 xh, float bias) {
    uint4 v4 = (uint4)(v, v >> 8, v >> 16, v >> 24);
    float4 ql = as_float4((v4 & 0xfu) | 0x4B000000u) - bias;
    float4 qh = as_float4(((v4 >> 4) & 0xfu) | 0x4B000000u) - bias;
    return dot(ql, xl) + dot(qh, xh);
}

// Q4_0: 18 bytes = f16 d, 16 bytes of nibbles; value = (q - 8) * d. 2-byte aligned.
inline float part_q4_0(__global const uchar* bp, uint p, __global const float4* xb) {
    float d = vload_half(0, (__global const half*)bp);
    __global const ushort* q = (__global const ushort*)(bp + 2) + 2u * p;
    uint v = (uint)q[0] | ((uint)q[1] << 16);
    return d * q4_part(v, xb[p], xb[p + 4u], Q4_BIAS_8);
}

// Q4_1: 20 bytes = f16 d, f16 m, 16 bytes of nibbles; value = q * d + m. 4-byte aligned.
inline float part_q4_1(__global const uchar* bp, uint p, __global const float4* xb) {
    float d = vload_half(0, (__global const half*)bp);
    float m = vload_half(1, (__global const half*)bp);
    uint v = ((__global const uint*)(bp + 4))[p];
    float4 xl = xb[p], xh = xb[p + 4u];
    return d * q4_part(v, xl, xh, Q4_BIAS_0) + m * dot(xl + xh, (float4)(1.0f));
}

// Q8_0: 34 bytes = f16 d, 32 x i8; value = q * d. 2-byte aligned.
inline float part_q8_0(__global const uchar* bp, uint p, __global const float4* xb) {
    return q8_part(bp, p, xb[2u * p], xb[2u * p + 1u]);
}

#define GEMV_BLOCKS(NAME, BYTES, PART)                                                         \
    __kernel void NAME(__global const uchar* w, __global const float4* x, __global float* y,   \
                       uint N, uint K, __global volatile uint* sig, uint epoch) {              \
        __local float red[MAX_WG];                                                             \
        uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);                \
        uint row = get_global_id(1);                                                           \
        float acc = 0.0f;                                                                      \
        if (row < N) {                                                                         \
            uint nw = K >> 3;                                                                  \
            __global const uchar* wr = w + (size_t)row * (K >> 5) * BYTES;                     \
            for (uint i = t; i < nw; i += tpr)                                                 \
                acc += PART(wr + (size_t)(i >> 2) * BYTES, i & 3u, x + (i >> 2) * 8u);         \
        }                                                                                      \
        acc = row_sum(acc, red, t, r, tpr);                                                    \
        if (t == 0 && row < N) y[row] = acc;                                                   \
        signal_done(sig, epoch);                                                               \
    }

GEMV_BLOCKS(gemv_q4_0, 18, part_q4_0)
GEMV_BLOCKS(gemv_q4_1, 20, part_q4_1)
GEMV_BLOCKS(gemv_q8_0, 34, part_q8_0)

// Q5_0, Q5_1 and the K-quants, GGUF bytes as stored: work-item part i (0 .. K/8) takes the 8
// values 8i .. 8i + 7 (part i % 4 of 32-value slice i / 4; common.cl's dot8_*), so neighbouring
// work-items read neighbouring quant bytes and activations; K-quant scales are decoded per part
// from the super-block's 12 (Q6_K: 16) scale bytes, which neighbouring parts share in cache.
#define GEMV_PARTS(NAME, F)                                                                    \
    __kernel void NAME(__global const uchar* w, __global const float4* x, __global float* y,   \
                       uint N, uint K, __global volatile uint* sig, uint epoch) {              \
        __local float red[MAX_WG];                                                             \
        uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);                \
        uint row = get_global_id(1);                                                           \
        float acc = 0.0f;                                                                      \
        if (row < N) {                                                                         \
            uint nw = K >> 3;                                                                  \
            __global const uchar* wr = w + (size_t)row * ROWB_##F(K);                         \
            for (uint i = t; i < nw; i += tpr)                                                 \
                acc += dot8_##F(wr, i >> 2, i & 3u, x[2u * i], x[2u * i + 1u]);                \
        }                                                                                      \
        acc = row_sum(acc, red, t, r, tpr);                                                    \
        if (t == 0 && row < N) y[row] = acc;                                                   \
        signal_done(sig, epoch);                                                               \
    }

GEMV_PARTS(gemv_q5_0, q5_0)
GEMV_PARTS(gemv_q5_1, q5_1)
GEMV_PARTS(gemv_q4_k, q4_k)
GEMV_PARTS(gemv_q5_k, q5_k)
GEMV_PARTS(gemv_q6_k, q6_k)

// Loads word `ii` of a re-laid-out Q4_0 row (quant word at qs[WB + ii], scale at d[DB + ii/4])
// and its 8 activations.
#define SOA_LOAD(j, ii, WB, DB)                                                                \
    uint v##j = qs[(WB) + (ii)];                                                               \
    float s##j = vload_half((DB) + ((ii) >> 2), d);                                            \
    float4 xl##j = x[((ii) >> 2) * 8u + ((ii) & 3u)];                                          \
    float4 xh##j = x[((ii) >> 2) * 8u + ((ii) & 3u) + 4u];

// Q4_0 re-laid out at load time (structure of arrays): qs holds each block's 16 quant bytes as
// four aligned 32-bit words, d[row*nb+b] its f16 scale; same part mapping as above.
__kernel void gemv_q4_0_soa(__global const uint* qs, __global const half* d,
                            __global const float4* x, __global float* y, uint N, uint K,
                            __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row = get_global_id(1);
    float acc = 0.0f;
    if (row < N) {
        uint nw = K >> 3;
        size_t wb = (size_t)row * nw, db = (size_t)row * (K >> 5);
        uint i = t;
        // Unrolled by four, loads first: four independent 4-byte quant loads in flight per
        // work-item (one alone leaves too few bytes in flight to cover memory latency).
        for (; i + 3u * tpr < nw; i += 4u * tpr) {
            SOA_LOAD(0, i, wb, db)
            SOA_LOAD(1, i + tpr, wb, db)
            SOA_LOAD(2, i + 2u * tpr, wb, db)
            SOA_LOAD(3, i + 3u * tpr, wb, db)
            acc += s0 * q4_part(v0, xl0, xh0, Q4_BIAS_8) + s1 * q4_part(v1, xl1, xh1, Q4_BIAS_8) +
                   s2 * q4_part(v2, xl2, xh2, Q4_BIAS_8) + s3 * q4_part(v3, xl3, xh3, Q4_BIAS_8);
        }
        for (; i < nw; i += tpr) {
            SOA_LOAD(0, i, wb, db)
            acc += s0 * q4_part(v0, xl0, xh0, Q4_BIAS_8);
        }
    }
    acc = row_sum(acc, red, t, r, tpr);
    if (t == 0 && row < N) y[row] = acc;
    signal_done(sig, epoch);
}

// Two rows per work-item: each activation load serves two rows.
__kernel void gemv_q4_0_soa_r2(__global const uint* qs, __global const half* d,
                               __global const float4* x, __global float* y, uint N, uint K,
                               __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row0 = get_global_id(1) * 2u;
    float a0 = 0.0f, a1 = 0.0f;
    if (row0 < N) {
        uint nw = K >> 3, nb = K >> 5;
        uint row1 = row0 + 1u < N ? row0 + 1u : row0;
        size_t w0 = (size_t)row0 * nw, w1 = (size_t)row1 * nw;
        size_t d0 = (size_t)row0 * nb, d1 = (size_t)row1 * nb;
        uint i = t;
        for (; i + tpr < nw; i += 2u * tpr) {
            SOA_LOAD(0, i, w0, d0)
            SOA_LOAD(1, i + tpr, w0, d0)
            SOA_LOAD(2, i, w1, d1)
            SOA_LOAD(3, i + tpr, w1, d1)
            a0 += s0 * q4_part(v0, xl0, xh0, Q4_BIAS_8) + s1 * q4_part(v1, xl1, xh1, Q4_BIAS_8);
            a1 += s2 * q4_part(v2, xl0, xh0, Q4_BIAS_8) + s3 * q4_part(v3, xl1, xh1, Q4_BIAS_8);
        }
        for (; i < nw; i += tpr) {
            SOA_LOAD(0, i, w0, d0)
            SOA_LOAD(1, i, w1, d1)
            a0 += s0 * q4_part(v0, xl0, xh0, Q4_BIAS_8);
            a1 += s1 * q4_part(v1, xl0, xh0, Q4_BIAS_8);
        }
    }
    a0 = row_sum(a0, red, t, r, tpr);
    a1 = row_sum(a1, red, t, r, tpr);
    if (t == 0 && row0 < N) {
        y[row0] = a0;
        if (row0 + 1u < N) y[row0 + 1u] = a1;
    }
    signal_done(sig, epoch);
}

// Four rows per work-item, and fewer instructions per nibble: each nibble goes straight into
// the top mantissa bits of 1.0f, giving 1 + q/16 exactly (one shift, one and-or). With
// S = sum (1 + q/16) x over a part, sum (q - 8) x = 16 S - 24 sum x; sum x is computed once per
// part and shared by the four rows, as are the activation loads.
inline float part_s(uint v, float4 xl, float4 xh) {
    const uint M = 0x00780000u, E = 0x3F800000u;
    float4 ql = (float4)(as_float(((v << 19) & M) | E), as_float(((v << 11) & M) | E),
                         as_float(((v << 3) & M) | E), as_float(((v >> 5) & M) | E));
    float4 qh = (float4)(as_float(((v << 15) & M) | E), as_float(((v << 7) & M) | E),
                         as_float(((v >> 1) & M) | E), as_float(((v >> 9) & M) | E));
    return dot(ql, xl) + dot(qh, xh);
}

__kernel void gemv_q4_0_soa_r4(__global const uint* qs, __global const half* d,
                               __global const float4* x, __global float* y, uint N, uint K,
                               __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row0 = get_global_id(1) * 4u;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    if (row0 < N) {
        uint nw = K >> 3, nb = K >> 5, last = N - 1u;
        uint r1 = min(row0 + 1u, last), r2 = min(row0 + 2u, last), r3 = min(row0 + 3u, last);
        __global const uint* q0 = qs + (size_t)row0 * nw;
        __global const uint* q1 = qs + (size_t)r1 * nw;
        __global const uint* q2 = qs + (size_t)r2 * nw;
        __global const uint* q3 = qs + (size_t)r3 * nw;
        __global const half* d0 = d + (size_t)row0 * nb;
        __global const half* d1 = d + (size_t)r1 * nb;
        __global const half* d2 = d + (size_t)r2 * nb;
        __global const half* d3 = d + (size_t)r3 * nb;
        for (uint i = t; i < nw; i += tpr) {
            uint b = i >> 2, p = i & 3u;
            float4 xl = x[b * 8u + p], xh = x[b * 8u + p + 4u];
            float sx = 24.0f * dot(xl + xh, (float4)(1.0f));
            a0 += vload_half(b, d0) * (16.0f * part_s(q0[i], xl, xh) - sx);
            a1 += vload_half(b, d1) * (16.0f * part_s(q1[i], xl, xh) - sx);
            a2 += vload_half(b, d2) * (16.0f * part_s(q2[i], xl, xh) - sx);
            a3 += vload_half(b, d3) * (16.0f * part_s(q3[i], xl, xh) - sx);
        }
    }
    a0 = row_sum(a0, red, t, r, tpr);
    a1 = row_sum(a1, red, t, r, tpr);
    a2 = row_sum(a2, red, t, r, tpr);
    a3 = row_sum(a3, red, t, r, tpr);
    if (t == 0 && row0 < N) {
        y[row0] = a0;
        if (row0 + 1u < N) y[row0 + 1u] = a1;
        if (row0 + 2u < N) y[row0 + 2u] = a2;
        if (row0 + 3u < N) y[row0 + 3u] = a3;
    }
    signal_done(sig, epoch);
}

// FP16, K % 8 == 0, two rows per work-item (each activation load serves both rows).
__kernel void gemv_f16_r2(__global const uint4* w, __global const float4* x, __global float* y,
                          uint N, uint K, __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row0 = get_global_id(1) * 2u;
    float a0 = 0.0f, a1 = 0.0f;
    if (row0 < N) {
        uint k8 = K >> 3;
        __global const uint4* w0 = w + (size_t)row0 * k8;
        __global const uint4* w1 = w + (size_t)min(row0 + 1u, N - 1u) * k8;
        for (uint i = t; i < k8; i += tpr) {
            float4 xa = x[2 * i], xb = x[2 * i + 1];
            uint4 q0 = w0[i], q1 = w1[i];
            float8 f0 = vload_half8(0, (const __private half*)&q0);
            float8 f1 = vload_half8(0, (const __private half*)&q1);
            a0 += dot(f0.lo, xa) + dot(f0.hi, xb);
            a1 += dot(f1.lo, xa) + dot(f1.hi, xb);
        }
    }
    a0 = row_sum(a0, red, t, r, tpr);
    a1 = row_sum(a1, red, t, r, tpr);
    if (t == 0 && row0 < N) {
        y[row0] = a0;
        if (row0 + 1u < N) y[row0 + 1u] = a1;
    }
    signal_done(sig, epoch);
}

// Q4_0 re-laid out for four rows at once ("x4"): rows are taken in groups of four and, for
// each quant word i, the four rows' words are stored side by side, so one aligned 16-byte load
// brings word i of four rows (neighbouring work-items: neighbouring words, coalesced), and the
// four scales of a block sit in 8 bytes. Activation loads are shared by the four rows.
// qs4[(g * nw + i)] = (word i of rows 4g..4g+3); d4[(g * nb + b) * 4 + j] = scale of row 4g+j.
#define X4_LOAD(j, ii)                                                                          \
    uint4 v##j = q4[(ii)];                                                                      \
    float4 s##j = vload_half4((ii) >> 2, dg);                                                   \
    float4 xl##j = x[((ii) >> 2) * 8u + ((ii) & 3u)];                                           \
    float4 xh##j = x[((ii) >> 2) * 8u + ((ii) & 3u) + 4u];
#define X4_ACC(j)                                                                               \
    a.x += s##j.x * q4_part(v##j.x, xl##j, xh##j, Q4_BIAS_8);                                   \
    a.y += s##j.y * q4_part(v##j.y, xl##j, xh##j, Q4_BIAS_8);                                   \
    a.z += s##j.z * q4_part(v##j.z, xl##j, xh##j, Q4_BIAS_8);                                   \
    a.w += s##j.w * q4_part(v##j.w, xl##j, xh##j, Q4_BIAS_8);

__kernel void gemv_q4_0_x4(__global const uint4* qs4, __global const half* d4,
                           __global const float4* x, __global float* y, uint N, uint K,
                           __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint g = get_global_id(1), row0 = g * 4u;
    float4 a = (float4)(0.0f);
    if (row0 < N) {
        uint nw = K >> 3, nb = K >> 5;
        __global const uint4* q4 = qs4 + (size_t)g * nw;
        __global const half* dg = d4 + (size_t)g * nb * 4u;
        uint i = t;
        for (; i + tpr < nw; i += 2u * tpr) {
            X4_LOAD(0, i)
            X4_LOAD(1, i + tpr)
            X4_ACC(0)
            X4_ACC(1)
        }
        for (; i < nw; i += tpr) {
            X4_LOAD(0, i)
            X4_ACC(0)
        }
    }
    a.x = row_sum(a.x, red, t, r, tpr);
    a.y = row_sum(a.y, red, t, r, tpr);
    a.z = row_sum(a.z, red, t, r, tpr);
    a.w = row_sum(a.w, red, t, r, tpr);
    if (t == 0 && row0 < N) {
        y[row0] = a.x;
        if (row0 + 1u < N) y[row0 + 1u] = a.y;
        if (row0 + 2u < N) y[row0 + 2u] = a.z;
        if (row0 + 3u < N) y[row0 + 3u] = a.w;
    }
    signal_done(sig, epoch);
}

// Activations of unit u: X[2s], X[2s+1] = x[8(u + s nb) ..][..8]; X[8] (Q4_1) = their sums.
#define T_LOADX(X, U, NB, SUMS)                                                                 \
    for (uint s_ = 0; s_ < 4u; ++s_) {                                                          \
        X[2u * s_] = x[2u * ((U) + s_ * (NB))];                                                 \
        X[2u * s_ + 1u] = x[2u * ((U) + s_ * (NB)) + 1u];                                       \
    }                                                                                           \
    if (SUMS) {                                                                                 \
        float4 one = (float4)(1.0f);                                                            \
        X[8] = (float4)(dot(X[0] + X[1], one), dot(X[2] + X[3], one), dot(X[4] + X[5], one),     \
                        dot(X[6] + X[7], one));                                                 \
    }

// R rows per work-item (sharing activation loads), U units per work-item in flight per row.
// Work-group (tpr, rows); global (tpr, ceil(N/R/rows)*rows). Reduction once per row at the end.
#define GEMV_T(NAME, UNIT, SUMS, R, U)                                                 \
    __kernel void NAME(__global const uint4* qs, __global const half* d,                        \
                       __global const float4* x, __global float* y, uint N, uint K,             \
                       __global volatile uint* sig, uint epoch) {                               \
        __local float red[MAX_WG * R];                                                          \
        uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);                 \
        uint nr = get_local_size(1);                                                            \
        uint row0 = get_global_id(1) * R;                                                       \
        float acc[R];                                                                           \
        for (uint j = 0; j < R; ++j) acc[j] = 0.0f;                                             \
        if (row0 < N) {                                                                         \
            uint nb = K >> 5;                                                                   \
            uint qb[R], db[R];                                                                  \
            for (uint j = 0; j < R; ++j) {                                                      \
                uint row = min(row0 + j, N - 1u);                                               \
                qb[j] = row * nb;                                                               \
                db[j] = row * nb; /* in scale entries: half (Q4_0) or half2 (Q4_1) */      \
            }                                                                                   \
            uint u = t;                                                                         \
            for (; u + (U - 1u) * tpr < nb; u += U * tpr) {                                     \
                uint4 q[U][R];                                                                  \
                for (uint i = 0; i < U; ++i)                                                    \
                    for (uint j = 0; j < R; ++j) q[i][j] = qs[qb[j] + u + i * tpr];             \
                for (uint i = 0; i < U; ++i) {                                                  \
                    float4 X[9];                                                                \
                    T_LOADX(X, u + i * tpr, nb, SUMS)                                           \
                    for (uint j = 0; j < R; ++j) UNIT(acc[j], q[i][j], db[j], (u + i * tpr), nb, X) \
                }                                                                               \
            }                                                                                   \
            for (; u < nb; u += tpr) {                                                          \
                float4 X[9];                                                                    \
                T_LOADX(X, u, nb, SUMS)                                                         \
                for (uint j = 0; j < R; ++j) {                                                  \
                    uint4 q1 = qs[qb[j] + u];                                                   \
                    UNIT(acc[j], q1, db[j], u, nb, X)                                           \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        for (uint j = 0; j < R; ++j) red[(j * nr + r) * tpr + t] = acc[j];                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        for (uint s = tpr >> 1; s > 0u; s >>= 1) {                                              \
            if (t < s)                                                                          \
                for (uint j = 0; j < R; ++j) red[(j * nr + r) * tpr + t] += red[(j * nr + r) * tpr + t + s]; \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        }                                                                                       \
        if (t == 0u)                                                                            \
            for (uint j = 0; j < R; ++j)                                                        \
                if (row0 + j < N) y[row0 + j] = red[(j * nr + r) * tpr];                        \
        signal_done(sig, epoch);                                                                \
    }

GEMV_T(gemv_q4_0_t_r1u1, T_UNIT_Q4_0, 0, 1u, 1u)
GEMV_T(gemv_q4_0_t_r1u2, T_UNIT_Q4_0, 0, 1u, 2u)
GEMV_T(gemv_q4_0_t_r1u4, T_UNIT_Q4_0, 0, 1u, 4u)
GEMV_T(gemv_q4_0_t_r2u1, T_UNIT_Q4_0, 0, 2u, 1u)
GEMV_T(gemv_q4_0_t_r2u2, T_UNIT_Q4_0, 0, 2u, 2u)
GEMV_T(gemv_q4_0_t_r2u4, T_UNIT_Q4_0, 0, 2u, 4u)
GEMV_T(gemv_q4_0_t_r4u1, T_UNIT_Q4_0, 0, 4u, 1u)
GEMV_T(gemv_q4_0_t_r4u2, T_UNIT_Q4_0, 0, 4u, 2u)
GEMV_T(gemv_q4_0_t_r4u4, T_UNIT_Q4_0, 0, 4u, 4u)
GEMV_T(gemv_q4_1_t_r1u1, T_UNIT_Q4_1, 1, 1u, 1u)
GEMV_T(gemv_q4_1_t_r1u2, T_UNIT_Q4_1, 1, 1u, 2u)
GEMV_T(gemv_q4_1_t_r1u4, T_UNIT_Q4_1, 1, 1u, 4u)
GEMV_T(gemv_q4_1_t_r2u1, T_UNIT_Q4_1, 1, 2u, 1u)
GEMV_T(gemv_q4_1_t_r2u2, T_UNIT_Q4_1, 1, 2u, 2u)
GEMV_T(gemv_q4_1_t_r2u4, T_UNIT_Q4_1, 1, 2u, 4u)
GEMV_T(gemv_q4_1_t_r4u1, T_UNIT_Q4_1, 1, 4u, 1u)
GEMV_T(gemv_q4_1_t_r4u2, T_UNIT_Q4_1, 1, 4u, 2u)
GEMV_T(gemv_q4_1_t_r4u4, T_UNIT_Q4_1, 1, 4u, 4u)

// ---- small-M GEMM for prefill: Y[m][n] = sum_k X[m][k] W[n][k] ----------------------------
// Same work-group shape as GEMV; each weight chunk is loaded once per tile of MT rows of X.
#define MT 4

__kernel void gemm_f16(__global const half* w, __global const float* x, __global float* y,
                       uint M, uint N, uint K, __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row = get_global_id(1);
    __global const half* wr = w + (size_t)(row < N ? row : 0) * K;
    for (uint m0 = 0; m0 < M; m0 += MT) {
        float acc[MT];
        for (uint j = 0; j < MT; ++j) acc[j] = 0.0f;
        if (row < N) {
            for (uint i = t; i < K; i += tpr) {
                float wv = vload_half(i, wr);
                for (uint j = 0; j < MT; ++j)
                    if (m0 + j < M) acc[j] += wv * x[(size_t)(m0 + j) * K + i];
            }
        }
        for (uint j = 0; j < MT; ++j) {
            float v = row_sum(acc[j], red, t, r, tpr);
            if (t == 0 && row < N && m0 + j < M) y[(size_t)(m0 + j) * N + row] = v;
        }
    }
    signal_done(sig, epoch);
}

__kernel void gemm_q4_0(__global const uchar* w, __global const float* x, __global float* y,
                        uint M, uint N, uint K, __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);
    uint row = get_global_id(1);
    uint nb = K >> 5;
    __global const uchar* wr = w + (size_t)(row < N ? row : 0) * nb * 18;
    for (uint m0 = 0; m0 < M; m0 += MT) {
        float acc[MT];
        for (uint j = 0; j < MT; ++j) acc[j] = 0.0f;
        if (row < N) {
            for (uint b = t; b < nb; b += tpr) {
                __global const uchar* bp = wr + (size_t)b * 18;
                float d = vload_half(0, (__global const half*)bp);
                uint4 q = load_q16_u16(bp + 2);
                for (uint j = 0; j < MT; ++j) {
                    if (m0 + j < M) {
                        acc[j] += d * q4_dot(q, x + (size_t)(m0 + j) * K + b * 32, Q4_BIAS_8);
                    }
                }
            }
        }
        for (uint j = 0; j < MT; ++j) {
            float v = row_sum(acc[j], red, t, r, tpr);
            if (t == 0 && row < N && m0 + j < M) y[(size_t)(m0 + j) * N + row] = v;
        }
    }
    signal_done(sig, epoch);
}

// Q4_1 and Q8_0 GEMM: same structure as gemm_q4_0 (one work-item per block of a row, MT rows
// of X per weight load); BDOT(bp, xp) is one block's dot product with 32 activations.
inline float sum32(__global const float* xp) {
    float4 a = (float4)(0.0f);
    for (uint i = 0; i < 8u; ++i) a += vload4(i, xp);
    return a.x + a.y + a.z + a.w;
}

// Q4_1: 20 bytes = f16 d, f16 m, 16 nibble bytes (4-byte aligned); q * d + m.
inline float bdot_q4_1(__global const uchar* bp, __global const float* xp) {
    float d = vload_half(0, (__global const half*)bp);
    float m = vload_half(1, (__global const half*)bp);
    uint4 q = vload4(0, (__global const uint*)(bp + 4));
    return d * q4_dot(q, xp, Q4_BIAS_0) + m * sum32(xp);
}

// Q8_0: 34 bytes = f16 d, 32 x i8 (2-byte aligned); q * d.
inline float bdot_q8_0(__global const uchar* bp, __global const float* xp) {
    float d = vload_half(0, (__global const half*)bp);
    __global const char* q = (__global const char*)(bp + 2);
    float a = 0.0f;
    for (uint i = 0; i < 4u; ++i) {
        float8 qv = convert_float8(vload8(i, q));
        a += dot(qv.lo, vload4(2u * i, xp)) + dot(qv.hi, vload4(2u * i + 1u, xp));
    }
    return d * a;
}

#define GEMM_BLOCKS(NAME, BYTES, BDOT)                                                         \
    __kernel void NAME(__global const uchar* w, __global const float* x, __global float* y,    \
                       uint M, uint N, uint K, __global volatile uint* sig, uint epoch) {      \
        __local float red[MAX_WG];                                                             \
        uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);                \
        uint row = get_global_id(1);                                                           \
        uint nb = K >> 5;                                                                      \
        __global const uchar* wr = w + (size_t)(row < N ? row : 0) * nb * BYTES;               \
        for (uint m0 = 0; m0 < M; m0 += MT) {                                                  \
            float acc[MT];                                                                     \
            for (uint j = 0; j < MT; ++j) acc[j] = 0.0f;                                       \
            if (row < N) {                                                                     \
                for (uint b = t; b < nb; b += tpr) {                                           \
                    __global const uchar* bp = wr + (size_t)b * BYTES;                         \
                    for (uint j = 0; j < MT; ++j)                                              \
                        if (m0 + j < M) acc[j] += BDOT(bp, x + (size_t)(m0 + j) * K + b * 32u); \
                }                                                                              \
            }                                                                                  \
            for (uint j = 0; j < MT; ++j) {                                                    \
                float v = row_sum(acc[j], red, t, r, tpr);                                     \
                if (t == 0 && row < N && m0 + j < M) y[(size_t)(m0 + j) * N + row] = v;       \
            }                                                                                  \
        }                                                                                      \
        signal_done(sig, epoch);                                                               \
    }

GEMM_BLOCKS(gemm_q4_1, 20, bdot_q4_1)
GEMM_BLOCKS(gemm_q8_0, 34, bdot_q8_0)

// Q5_0, Q5_1 and the K-quants: one work-item per 32-value slice of a row; each part's 8 values
// are dequantized once (common.cl's deq8_*) and used for the MT rows of X.
#define GEMM_PARTS(NAME, F)                                                                    \
    __kernel void NAME(__global const uchar* w, __global const float* x, __global float* y,    \
                       uint M, uint N, uint K, __global volatile uint* sig, uint epoch) {      \
        __local float red[MAX_WG];                                                             \
        uint t = get_local_id(0), r = get_local_id(1), tpr = get_local_size(0);                \
        uint row = get_global_id(1);                                                           \
        uint nb = K >> 5;                                                                      \
        __global const uchar* wr = w + (size_t)(row < N ? row : 0) * ROWB_##F(K);              \
        for (uint m0 = 0; m0 < M; m0 += MT) {                                                  \
            float acc[MT];                                                                     \
            for (uint j = 0; j < MT; ++j) acc[j] = 0.0f;                                       \
            if (row < N) {                                                                     \
                for (uint kt = t; kt < nb; kt += tpr) {                                        \
                    for (uint p = 0; p < 4u; ++p) {                                            \
                        float8 wv = deq8_##F(wr, kt, p);                                       \
                        for (uint j = 0; j < MT; ++j) {                                        \
                            if (m0 + j < M) {                                                  \
                                __global const float* xp =                                     \
                                    x + (size_t)(m0 + j) * K + kt * 32u + p * 8u;              \
                                acc[j] += dot(wv.lo, vload4(0, xp)) + dot(wv.hi, vload4(1, xp)); \
                            }                                                                  \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            for (uint j = 0; j < MT; ++j) {                                                    \
                float v = row_sum(acc[j], red, t, r, tpr);                                     \
                if (t == 0 && row < N && m0 + j < M) y[(size_t)(m0 + j) * N + row] = v;       \
            }                                                                                  \
        }                                                                                      \
        signal_done(sig, epoch);                                                               \
    }

GEMM_PARTS(gemm_q5_0, q5_0)
GEMM_PARTS(gemm_q5_1, q5_1)
GEMM_PARTS(gemm_q4_k, q4_k)
GEMM_PARTS(gemm_q5_k, q5_k)
GEMM_PARTS(gemm_q6_k, q6_k)

// ---- RMSNorm: y[r][i] = x[r][i] / sqrt(mean_i(x[r]^2) + eps) * g[i]; one work-group a row ----
__kernel void rms_norm(__global const float* x, __global const float* g, __global float* y,
                       uint rows, uint n, float eps, __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    uint row = get_group_id(0), t = get_local_id(0), ls = get_local_size(0);
    __global const float* xr = x + (size_t)row * n;
    float s = 0.0f;
    for (uint i = t; i < n; i += ls) s += xr[i] * xr[i];
    s = group_sum(s, red);
    float inv = rsqrt(s / (float)n + eps);
    for (uint i = t; i < n; i += ls) y[(size_t)row * n + i] = xr[i] * inv * g[i];
    signal_done(sig, epoch);
}

// ---- SwiGLU: out[i] = silu(gate[i]) * up[i] ----------------------------------------------------
__kernel void swiglu(__global const float* gate, __global const float* up, __global float* out,
                     uint n, __global volatile uint* sig, uint epoch) {
    uint i = get_global_id(0);
    if (i < n) {
        float g = gate[i];
        out[i] = g / (1.0f + exp(-g)) * up[i];
    }
    signal_done(sig, epoch);
}

// ---- residual add: out[i] = a[i] + b[i] (out may be a) -----------------------------------------
__kernel void add(__global const float* a, __global const float* b, __global float* out, uint n,
                  __global volatile uint* sig, uint epoch) {
    uint i = get_global_id(0);
    if (i < n) out[i] = a[i] + b[i];
    signal_done(sig, epoch);
}

// ---- RoPE, in place on x[T][H][D] at positions pos0 + t --------------------------------------
// mode 0 ("normal", llama.cpp's LLAMA rope): rotates pairs (2i, 2i+1).
// mode 1 ("neox", HF layout): rotates pairs (i, i + D/2).
// angle = pos * base^(-2i/D), i in [0, D/2).
__kernel void rope(__global float* x, uint T, uint H, uint D, uint pos0, float base, uint mode,
                   __global volatile uint* sig, uint epoch) {
    uint p = get_global_id(0); // pair index over H * D/2
    uint tok = get_global_id(1);
    uint half_d = D >> 1;
    if (p < H * half_d && tok < T) {
        uint h = p / half_d, i = p % half_d;
        __global float* xh = x + ((size_t)tok * H + h) * D;
        uint ia = mode == 0u ? 2u * i : i;
        uint ib = mode == 0u ? 2u * i + 1u : i + half_d;
        float inv_freq = pow(base, -2.0f * (float)i / (float)D);
        float ang = (float)(pos0 + tok) * inv_freq;
        float c = cos(ang), s = sin(ang);
        float a = xh[ia], b = xh[ib];
        xh[ia] = a * c - b * s;
        xh[ib] = a * s + b * c;
    }
    signal_done(sig, epoch);
}

// ---- decode attention: one query token over a KV cache, grouped-query heads -------------------
// q[H][D]; kc, vc: [S_max][Hkv][D] (token-major, FP32); out[H][D]; scratch[H][S_max].
// One work-group per query head; kv head = h / (H / Hkv).
__kernel void attn_decode(__global const float* q, __global const float* kc,
                          __global const float* vc, __global float* out,
                          __global float* scratch, uint H, uint Hkv, uint D, uint S_max, uint L,
                          float scale, __global volatile uint* sig, uint epoch) {
    __local float red[MAX_WG];
    __local float qs[MAX_WG];
    uint h = get_group_id(0), t = get_local_id(0), ls = get_local_size(0);
    uint kvh = h / (H / Hkv);
    for (uint d = t; d < D; d += ls) qs[d] = q[h * D + d];
    barrier(CLK_LOCAL_MEM_FENCE);
    __global float* sc = scratch + (size_t)h * S_max;
    float mx = -INFINITY;
    for (uint j = t; j < L; j += ls) {
        __global const float* kp = kc + ((size_t)j * Hkv + kvh) * D;
        float s = 0.0f;
        for (uint d = 0; d < D; ++d) s += qs[d] * kp[d];
        s *= scale;
        sc[j] = s;
        mx = fmax(mx, s);
    }
    mx = group_max(mx, red);
    float sum = 0.0f;
    for (uint j = t; j < L; j += ls) {
        float e = exp(sc[j] - mx);
        sc[j] = e;
        sum += e;
    }
    sum = group_sum(sum, red);
    barrier(CLK_GLOBAL_MEM_FENCE);
    float inv = 1.0f / sum;
    for (uint d = t; d < D; d += ls) {
        float o = 0.0f;
        for (uint j = 0; j < L; ++j) o += sc[j] * vc[((size_t)j * Hkv + kvh) * D + d];
        out[h * D + d] = o * inv;
    }
    signal_done(sig, epoch);
}

// ---- copy-bandwidth probe (used by the bandwidth example): dst[i] = src[i] --------------------
__kernel void copy_u4(__global const uint4* src, __global uint4* dst, uint n,
                      __global volatile uint* sig, uint epoch) {
    uint i = get_global_id(0);
    if (i < n) dst[i] = src[i];
    signal_done(sig, epoch);
}

// ---- read-stream probe (bandwidth example): the ceiling for a kernel that reads `n` 16-byte
// words once, as a GEMV reads its weights, launch and ramp-up costs included. Each work-item
// XORs four words (grid-stride) and writes only if the result equals `never` (the caller's
// unlikely value), so the reads cannot be optimized away and almost nothing is written.
__kernel void stream_read(__global const uint4* src, __global uint* out, uint n, uint never,
                          __global volatile uint* sig, uint epoch) {
    uint i = get_global_id(0), g = get_global_size(0);
    uint4 a = (uint4)(0u);
    for (; i < n; i += g) a ^= src[i];
    uint v = a.x ^ a.y ^ a.z ^ a.w;
    if (v == never) out[get_global_id(0) & 15u] = v;
    signal_done(sig, epoch);
}
