// The device-resident decoder's kernels (built after common.cl and decoder_ops.cl). One launch
// per fused op:
//
//   embed            token ids -> hidden rows (dequantized embedding rows)
//   gemv2_* / gemm_* every matmul, with the RMSNorm of the activation fused into its load
//                    (`_norm` variants) and an epilogue chosen at run time (EPI_*):
//                      STORE   y = W x                       (logits, column reads)
//                      ADD     y += W x                      (o / down projection + residual)
//                      SWIGLU  y[j] = silu(W x)[2j] * (W x)[2j+1]   (gate/up rows interleaved)
//                      GATED   y = silu(y) * W x   (up, after a STORE of the gate into y: gate
//                              and up of different types)
//                      QKV     RoPE on the q and k columns, q -> y, k and v -> the KV cache
//                              (columns coff + c of [q; k; v]: a run of Q/K/V of one type)
//   attn_causal      attention of M query rows over the cache (row m sees positions <= pos0+m)
//   attn_decode      attention of one query row, split over heads x ranges of positions
//   argmax_rows      index of each row's largest logit
//
// Matmuls see the weight through (wrow0, wstride): logical output column c reads physical
// weight row wrow0 + c * wstride (a column range of a concatenated or interleaved weight).
// Epilogues work on column pairs (c, c+1), c even: a RoPE pair, or a gate/up pair.
// Norm: y = inv * sum_k W[k] (x[k] g[k]), inv = rsqrt(mean(x^2) + eps), the same value as
// W (x * inv * g) with inv factored out of the sum.
// Kernels never return early (some have barriers after their bounds checks).

// The eight nibbles of v as floats, lowest first (the GEMMs' and the decode blocks' T unit).
inline float8 nib8(uint v) {
    return convert_float8((uint8)(v, v >> 4, v >> 8, v >> 12, v >> 16, v >> 20, v >> 24, v >> 28) &
                          (uint8)(15u));
}

// The program is built in parts (src/decoder/mod.rs): embed and argmax always; the matmuls
// below only where a matmul runs on them (-DDEC_MATMULS: a format or shape the fast matmuls of
// mm.cl do not take), the decode blocks only for DecodePath::Blocks (-DDEC_BLOCKS). NVIDIA's
// compiler took 8.6 s for the whole file, most of a cold start.
#ifdef DEC_MATMULS
// ---- decode GEMV: one token row, two output columns (c, c+1) per team of tpr work-items -----
// Work-group (tpr, rows); global (tpr, ceil(ceil(N/2)/rows)*rows). The activation row is
// x + xoff4 float4s (e.g. the last row of a prefill chunk, for the output head).

// T layout (Q4_0, Q4_1; see common.cl): w0 = quant plane (uint4 units), w1 = scale plane.
// Activations of unit u: X[2s], X[2s+1] = x[8(u + s nb) ..][..8] (times g with the norm);
// X[8] (Q4_1) = their sums.
#define T_XLOAD(X, U, NB, SUMS, NORM)                                                           \
    for (uint s_ = 0; s_ < 4u; ++s_) {                                                          \
        uint o_ = 2u * ((U) + s_ * (NB));                                                       \
        X[2u * s_] = x[o_];                                                                     \
        X[2u * s_ + 1u] = x[o_ + 1u];                                                           \
        if (NORM) {                                                                             \
            X[2u * s_] *= g[o_];                                                                \
            X[2u * s_ + 1u] *= g[o_ + 1u];                                                      \
        }                                                                                       \
    }                                                                                           \
    if (SUMS) {                                                                                 \
        float4 one = (float4)(1.0f);                                                            \
        X[8] = (float4)(dot(X[0] + X[1], one), dot(X[2] + X[3], one), dot(X[4] + X[5], one),     \
                        dot(X[6] + X[7], one));                                                 \
    }

#define GEMV2_T(NAME, UNIT, SUMS, NORM)                                                         \
    __kernel void NAME(__global const uint4 *qs, __global const half *d,                        \
                       __global const float4 *x, uint xoff4, __global const float4 *g,          \
                       float eps, uint N, uint K, uint wrow0, uint wstride, EPI_PARAMS) {       \
        __local float red[2 * MAX_WG];                                                          \
        uint t = get_local_id(0), r = get_local_id(1);                                          \
        uint tpr = get_local_size(0), nr = get_local_size(1);                                   \
        uint c0 = 2u * (uint)get_global_id(1);                                                  \
        x += xoff4;                                                                             \
        float inv = NORM ? norm_inv(x, K, eps, red) : 1.0f;                                     \
        float a0 = 0.0f, a1 = 0.0f;                                                             \
        if (c0 < N) {                                                                           \
            uint nb = K >> 5;                                                                   \
            uint b0 = (wrow0 + c0 * wstride) * nb;                                              \
            uint b1 = (wrow0 + min(c0 + 1u, N - 1u) * wstride) * nb;                            \
            for (uint u = t; u < nb; u += tpr) {                                                \
                float4 X[9];                                                                    \
                T_XLOAD(X, u, nb, SUMS, NORM)                                                   \
                uint4 q0 = qs[b0 + u], q1 = qs[b1 + u];                                         \
                UNIT(a0, q0, b0, u, nb, X)                                                      \
                UNIT(a1, q1, b1, u, nb, X)                                                      \
            }                                                                                   \
        }                                                                                       \
        pair_sum(&a0, &a1, red, t, r, tpr, nr);                                                 \
        if (t == 0u && c0 < N) epi_pair(0u, c0, N, a0 * inv, a1 * inv, EPI_ARGS);              \
    }

GEMV2_T(gemv2_q4_0t, T_UNIT_Q4_0, 0, 0)
GEMV2_T(gemv2_q4_0t_norm, T_UNIT_Q4_0, 0, 1)
GEMV2_T(gemv2_q4_1t, T_UNIT_Q4_1, 1, 0)
GEMV2_T(gemv2_q4_1t_norm, T_UNIT_Q4_1, 1, 1)

// GGUF Q8_0 (w0 = the blocks; w1 unused): four work-items per 32-element block, one 8-element
// part each, so neighbouring work-items read neighbouring bytes and activations.
#define GEMV2_Q8(NAME, NORM)                                                                    \
    __kernel void NAME(__global const uchar *w, __global const uchar *w1_unused,                \
                       __global const float4 *x, uint xoff4, __global const float4 *g,          \
                       float eps, uint N, uint K, uint wrow0, uint wstride, EPI_PARAMS) {       \
        __local float red[2 * MAX_WG];                                                          \
        uint t = get_local_id(0), r = get_local_id(1);                                          \
        uint tpr = get_local_size(0), nr = get_local_size(1);                                   \
        uint c0 = 2u * (uint)get_global_id(1);                                                  \
        x += xoff4;                                                                             \
        float inv = NORM ? norm_inv(x, K, eps, red) : 1.0f;                                     \
        float a0 = 0.0f, a1 = 0.0f;                                                             \
        if (c0 < N) {                                                                           \
            uint nb = K >> 5, nw = K >> 3;                                                      \
            __global const uchar *w0 = w + (size_t)(wrow0 + c0 * wstride) * nb * 34u;          \
            __global const uchar *w1 =                                                          \
                w + (size_t)(wrow0 + min(c0 + 1u, N - 1u) * wstride) * nb * 34u;                \
            for (uint i = t; i < nw; i += tpr) {                                                \
                float4 xa = x[2u * i], xb = x[2u * i + 1u];                                     \
                if (NORM) {                                                                     \
                    xa *= g[2u * i];                                                            \
                    xb *= g[2u * i + 1u];                                                       \
                }                                                                               \
                a0 += q8_part(w0 + (size_t)(i >> 2) * 34u, i & 3u, xa, xb);                     \
                a1 += q8_part(w1 + (size_t)(i >> 2) * 34u, i & 3u, xa, xb);                     \
            }                                                                                   \
        }                                                                                       \
        pair_sum(&a0, &a1, red, t, r, tpr, nr);                                                 \
        if (t == 0u && c0 < N) epi_pair(0u, c0, N, a0 * inv, a1 * inv, EPI_ARGS);              \
    }

GEMV2_Q8(gemv2_q8_0, 0)
GEMV2_Q8(gemv2_q8_0_norm, 1)

// F16, K % 8 == 0 (w0 = the halves; w1 unused): one 16-byte load per work-item per step.
#define GEMV2_F16(NAME, NORM)                                                                   \
    __kernel void NAME(__global const uint4 *w, __global const uchar *w1_unused,                \
                       __global const float4 *x, uint xoff4, __global const float4 *g,          \
                       float eps, uint N, uint K, uint wrow0, uint wstride, EPI_PARAMS) {       \
        __local float red[2 * MAX_WG];                                                          \
        uint t = get_local_id(0), r = get_local_id(1);                                          \
        uint tpr = get_local_size(0), nr = get_local_size(1);                                   \
        uint c0 = 2u * (uint)get_global_id(1);                                                  \
        x += xoff4;                                                                             \
        float inv = NORM ? norm_inv(x, K, eps, red) : 1.0f;                                     \
        float a0 = 0.0f, a1 = 0.0f;                                                             \
        if (c0 < N) {                                                                           \
            uint k8 = K >> 3;                                                                   \
            __global const uint4 *w0 = w + (size_t)(wrow0 + c0 * wstride) * k8;                \
            __global const uint4 *w1 = w + (size_t)(wrow0 + min(c0 + 1u, N - 1u) * wstride) * k8; \
            for (uint i = t; i < k8; i += tpr) {                                                \
                float4 xa = x[2u * i], xb = x[2u * i + 1u];                                     \
                if (NORM) {                                                                     \
                    xa *= g[2u * i];                                                            \
                    xb *= g[2u * i + 1u];                                                       \
                }                                                                               \
                uint4 q0 = w0[i], q1 = w1[i];                                                   \
                float8 f0 = vload_half8(0, (const __private half *)&q0);                        \
                float8 f1 = vload_half8(0, (const __private half *)&q1);                        \
                a0 += dot(f0.lo, xa) + dot(f0.hi, xb);                                          \
                a1 += dot(f1.lo, xa) + dot(f1.hi, xb);                                          \
            }                                                                                   \
        }                                                                                       \
        pair_sum(&a0, &a1, red, t, r, tpr, nr);                                                 \
        if (t == 0u && c0 < N) epi_pair(0u, c0, N, a0 * inv, a1 * inv, EPI_ARGS);              \
    }

GEMV2_F16(gemv2_f16, 0)
GEMV2_F16(gemv2_f16_norm, 1)

// Q5_0, Q5_1 and the K-quants, GGUF bytes as stored (w0 = the blocks; w1 unused): part i of a
// row (8 values, common.cl's dot8_*) per work-item step, so neighbouring work-items read
// neighbouring bytes and activations, as for Q8_0.
#define GEMV2_G(NAME, F, NORM)                                                                  \
    __kernel void NAME(__global const uchar *w, __global const uchar *w1_unused,                \
                       __global const float4 *x, uint xoff4, __global const float4 *g,          \
                       float eps, uint N, uint K, uint wrow0, uint wstride, EPI_PARAMS) {       \
        __local float red[2 * MAX_WG];                                                          \
        uint t = get_local_id(0), r = get_local_id(1);                                          \
        uint tpr = get_local_size(0), nr = get_local_size(1);                                   \
        uint c0 = 2u * (uint)get_global_id(1);                                                  \
        x += xoff4;                                                                             \
        float inv = NORM ? norm_inv(x, K, eps, red) : 1.0f;                                     \
        float a0 = 0.0f, a1 = 0.0f;                                                             \
        if (c0 < N) {                                                                           \
            uint nw = K >> 3;                                                                   \
            size_t rb = ROWB_##F(K);                                                            \
            __global const uchar *w0 = w + (size_t)(wrow0 + c0 * wstride) * rb;                 \
            __global const uchar *w1 = w + (size_t)(wrow0 + min(c0 + 1u, N - 1u) * wstride) * rb; \
            for (uint i = t; i < nw; i += tpr) {                                                \
                float4 xa = x[2u * i], xb = x[2u * i + 1u];                                     \
                if (NORM) {                                                                     \
                    xa *= g[2u * i];                                                            \
                    xb *= g[2u * i + 1u];                                                       \
                }                                                                               \
                a0 += dot8_##F(w0, i >> 2, i & 3u, xa, xb);                                     \
                a1 += dot8_##F(w1, i >> 2, i & 3u, xa, xb);                                     \
            }                                                                                   \
        }                                                                                       \
        pair_sum(&a0, &a1, red, t, r, tpr, nr);                                                 \
        if (t == 0u && c0 < N) epi_pair(0u, c0, N, a0 * inv, a1 * inv, EPI_ARGS);              \
    }

GEMV2_G(gemv2_q5_0, q5_0, 0)
GEMV2_G(gemv2_q5_0_norm, q5_0, 1)
GEMV2_G(gemv2_q5_1, q5_1, 0)
GEMV2_G(gemv2_q5_1_norm, q5_1, 1)
GEMV2_G(gemv2_q4_k, q4_k, 0)
GEMV2_G(gemv2_q4_k_norm, q4_k, 1)
GEMV2_G(gemv2_q5_k, q5_k, 0)
GEMV2_G(gemv2_q5_k_norm, q5_k, 1)
GEMV2_G(gemv2_q6_k, q6_k, 0)
GEMV2_G(gemv2_q6_k_norm, q6_k, 1)

// ---- prefill GEMM: Y[M][N] = X[M][K] W[N][K]^T, 64 x 64 tiles, 16 x 16 work-items ----------
// Each k-step stages a 32-wide slice of k: X[64 rows][32] and W[64 columns][32], dequantized,
// in local memory ([k][row] order), then every work-item accumulates a 4 x 4 block of outputs
// (rows 4ty.., columns 4tx..) with float4 loads. The slice is one T-layout unit (words u,
// u + nb, u + 2nb, u + 3nb) or one GGUF block (32 consecutive k); the loader work-item
// (row lr, part lp) brings 8 k of one X row and 8 weights of one W row. With the norm, the
// same loader sums x^2 of its row, and the epilogue scales each row by its inv.
#define GT 64u

// Dequantized weights of part lp (8 k) of slice kt of physical row pr (nb blocks a row).
inline float8 deq8_q4_0t(__global const uint *qs, __global const half *d, uint pr, uint kt,
                         uint lp, uint nb, uint K) {
    uint v = qs[(pr * nb + kt) * 4u + lp];
    float s = vload_half(pr * nb + ((kt + lp * nb) >> 2), d);
    return (nib8(v) - 8.0f) * s;
}
inline float8 deq8_q4_1t(__global const uint *qs, __global const half *d, uint pr, uint kt,
                         uint lp, uint nb, uint K) {
    uint v = qs[(pr * nb + kt) * 4u + lp];
    float2 s = vload_half2(pr * nb + ((kt + lp * nb) >> 2), d);
    return nib8(v) * s.x + s.y;
}
inline float8 deq8_q8_0(__global const uchar *w, __global const uchar *unused, uint pr, uint kt,
                        uint lp, uint nb, uint K) {
    __global const uchar *bp = w + ((size_t)pr * nb + kt) * 34u;
    float s = vload_half(0, (__global const half *)bp);
    return convert_float8(vload8(0, (__global const char *)(bp + 2u + 8u * lp))) * s;
}
inline float8 deq8_f16(__global const half *w, __global const uchar *unused, uint pr, uint kt,
                       uint lp, uint nb, uint K) {
    return vload_half8(0, w + (size_t)pr * K + kt * 32u + lp * 8u);
}
// Q5_0, Q5_1, K-quants: part lp of 32-value slice kt of physical row pr, as GGUF stores it.
#define DEQM8_G(F)                                                                              \
    inline float8 deqm8_##F(__global const uchar *w, __global const uchar *unused, uint pr,     \
                            uint kt, uint lp, uint nb, uint K) {                                \
        return deq8_##F(w + (size_t)pr * ROWB_##F(K), kt, lp);                                  \
    }
DEQM8_G(q5_0)
DEQM8_G(q5_1)
DEQM8_G(q4_k)
DEQM8_G(q5_k)
DEQM8_G(q6_k)
// First k of part lp of slice kt: T layout (word kt + lp nb) or GGUF (block kt).
#define XOFF_T(kt, lp, nb) (8u * ((kt) + (lp) * (nb)))
#define XOFF_G(kt, lp, nb) (32u * (kt) + 8u * (lp))

#define GEMM_F(NAME, T0, T1, DEQ8, XOFF, NORM)                                                  \
    __kernel __attribute__((reqd_work_group_size(16, 16, 1))) void NAME(                        \
        __global const T0 *w0, __global const T1 *w1, __global const float *x, uint ldx,        \
        __global const float *g, float eps, uint M, uint N, uint K, uint wrow0, uint wstride,   \
        EPI_PARAMS) {                                                                           \
        __local float xs[32u * GT];                                                             \
        __local float ws[32u * GT];                                                             \
        __local float ssl[4u * GT];                                                             \
        uint tx = get_local_id(0), ty = get_local_id(1);                                        \
        uint lid = ty * 16u + tx;                                                               \
        uint lr = lid & 63u, lp = lid >> 6;                                                     \
        uint m0 = (uint)get_group_id(1) * GT, n0 = (uint)get_group_id(0) * GT;                  \
        uint nb = K >> 5;                                                                       \
        /* Rows past M / columns past N load a valid row; their results are never stored. */    \
        __global const float *xr = x + (size_t)min(m0 + lr, M - 1u) * ldx;                      \
        uint pr = wrow0 + min(n0 + lr, N - 1u) * wstride;                                       \
        float4 acc[4];                                                                          \
        for (uint i = 0; i < 4u; ++i) acc[i] = (float4)(0.0f);                                  \
        float ss = 0.0f;                                                                        \
        for (uint kt = 0; kt < nb; ++kt) {                                                      \
            uint xo = XOFF(kt, lp, nb);                                                         \
            float4 xa = vload4(0, xr + xo), xb = vload4(1, xr + xo);                            \
            if (NORM) {                                                                         \
                ss += dot(xa, xa) + dot(xb, xb);                                                \
                xa *= vload4(0, g + xo);                                                        \
                xb *= vload4(1, g + xo);                                                        \
            }                                                                                   \
            float8 wv = DEQ8(w0, w1, pr, kt, lp, nb, K);                                        \
            __local float *xd = xs + lp * 8u * GT + lr;                                         \
            __local float *wd = ws + lp * 8u * GT + lr;                                         \
            xd[0] = xa.x; xd[GT] = xa.y; xd[2u * GT] = xa.z; xd[3u * GT] = xa.w;                \
            xd[4u * GT] = xb.x; xd[5u * GT] = xb.y; xd[6u * GT] = xb.z; xd[7u * GT] = xb.w;     \
            wd[0] = wv.s0; wd[GT] = wv.s1; wd[2u * GT] = wv.s2; wd[3u * GT] = wv.s3;            \
            wd[4u * GT] = wv.s4; wd[5u * GT] = wv.s5; wd[6u * GT] = wv.s6; wd[7u * GT] = wv.s7; \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
            for (uint kk = 0; kk < 32u; ++kk) {                                                 \
                float4 a = vload4(ty, xs + kk * GT);                                            \
                float4 b = vload4(tx, ws + kk * GT);                                            \
                acc[0] += a.x * b;                                                              \
                acc[1] += a.y * b;                                                              \
                acc[2] += a.z * b;                                                              \
                acc[3] += a.w * b;                                                              \
            }                                                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        }                                                                                       \
        float inv[4] = {1.0f, 1.0f, 1.0f, 1.0f};                                                \
        if (NORM) {                                                                             \
            ssl[lr * 4u + lp] = ss;                                                             \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
            for (uint i = 0; i < 4u; ++i) {                                                     \
                __local float *s4 = ssl + (ty * 4u + i) * 4u;                                   \
                inv[i] = rsqrt((s4[0] + s4[1] + s4[2] + s4[3]) / (float)K + eps);               \
            }                                                                                   \
        }                                                                                       \
        for (uint i = 0; i < 4u; ++i) {                                                         \
            uint m = m0 + ty * 4u + i;                                                          \
            uint c = n0 + tx * 4u;                                                              \
            if (m < M && c < N) epi_pair(m, c, N, acc[i].x * inv[i], acc[i].y * inv[i], EPI_ARGS); \
            if (m < M && c + 2u < N)                                                            \
                epi_pair(m, c + 2u, N, acc[i].z * inv[i], acc[i].w * inv[i], EPI_ARGS);          \
        }                                                                                       \
    }

GEMM_F(gemm_q4_0t, uint, half, deq8_q4_0t, XOFF_T, 0)
GEMM_F(gemm_q4_0t_norm, uint, half, deq8_q4_0t, XOFF_T, 1)
GEMM_F(gemm_q4_1t, uint, half, deq8_q4_1t, XOFF_T, 0)
GEMM_F(gemm_q4_1t_norm, uint, half, deq8_q4_1t, XOFF_T, 1)
GEMM_F(gemm_q8_0, uchar, uchar, deq8_q8_0, XOFF_G, 0)
GEMM_F(gemm_q8_0_norm, uchar, uchar, deq8_q8_0, XOFF_G, 1)
GEMM_F(gemm_f16, half, uchar, deq8_f16, XOFF_G, 0)
GEMM_F(gemm_f16_norm, half, uchar, deq8_f16, XOFF_G, 1)
GEMM_F(gemm_q5_0, uchar, uchar, deqm8_q5_0, XOFF_G, 0)
GEMM_F(gemm_q5_0_norm, uchar, uchar, deqm8_q5_0, XOFF_G, 1)
GEMM_F(gemm_q5_1, uchar, uchar, deqm8_q5_1, XOFF_G, 0)
GEMM_F(gemm_q5_1_norm, uchar, uchar, deqm8_q5_1, XOFF_G, 1)
GEMM_F(gemm_q4_k, uchar, uchar, deqm8_q4_k, XOFF_G, 0)
GEMM_F(gemm_q4_k_norm, uchar, uchar, deqm8_q4_k, XOFF_G, 1)
GEMM_F(gemm_q5_k, uchar, uchar, deqm8_q5_k, XOFF_G, 0)
GEMM_F(gemm_q5_k_norm, uchar, uchar, deqm8_q5_k, XOFF_G, 1)
GEMM_F(gemm_q6_k, uchar, uchar, deqm8_q6_k, XOFF_G, 0)
GEMM_F(gemm_q6_k_norm, uchar, uchar, deqm8_q6_k, XOFF_G, 1)

#endif // DEC_MATMULS

// Attention (prefill and decode) is in attention.cl, a program of its own.

// ---- embedding gather: x[m][i] = E[tok[tokoff + m]][i] ----------------------------------------
// fmt: see embed_value. Global (ceil(D/64)*64, M).
__kernel void embed(__global const uchar *w0, __global const half *w1, __global const uint *tok,
                    uint tokoff, __global float *x, uint M, uint D, uint fmt) {
    uint i = get_global_id(0), m = get_global_id(1);
    if (i < D && m < M) x[(size_t)m * D + i] = embed_value(w0, w1, tok[tokoff + m], i, D, fmt);
}

// ---- argmax of each of `rows` rows of N values (row stride ld): the lowest index of the
// largest value (NaN never wins; a row without a number gives 0), with ARGMAX_NONFINITE set
// when any value of the row is NaN or infinite (the host's non-finite guard reads it instead of
// the logits). One work-group of 256 a row.
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
argmax_rows(__global const float *v, uint N, uint ld, __global uint *out) {
    __local float bv[256];
    __local uint bi[256];
    __local uint bad;
    uint t = get_local_id(0), row = get_group_id(1);
    __global const float *vr = v + (size_t)row * ld;
    float best = -INFINITY;
    uint idx = 0xffffffffu;
    uint nf = 0u;
    if (t == 0u) bad = 0u;
    for (uint i = t; i < N; i += 256u) {
        float a = vr[i];
        nf |= (uint)!isfinite(a);
        if (a > best || (idx == 0xffffffffu && a == best)) {
            best = a;
            idx = i;
        }
    }
    bv[t] = best;
    bi[t] = idx;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (nf) atomic_or(&bad, 1u);
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) {
            float ob = bv[t + s];
            uint oi = bi[t + s];
            if (ob > bv[t] || (ob == bv[t] && oi < bi[t])) {
                bv[t] = ob;
                bi[t] = oi;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0u) out[row] = (bi[0] == 0xffffffffu ? 0u : bi[0]) | (bad ? ARGMAX_NONFINITE : 0u);
}

// ---- argmax split over work-groups: the same result as argmax_rows, for long rows ----------
// Global (256 G, rows): group (g, row) reduces indices [g N / G, (g + 1) N / G) of its row into
// parts[row][g] (value, index, non-finite flag: 3 words); the last group of a row to finish
// (counter cnt[row], zero between launches) combines its G parts in order, so the lowest index
// of the largest value wins as in argmax_rows. One pass over 128k logits by one work-group took
// 62 us on the H200; G groups read the row in parallel.
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
argmax_split(__global const float *v, uint N, uint ld, __global uint *out, __global uint *parts,
             __global uint *cnt) {
    __local float bv[256];
    __local uint bi[256];
    __local uint bad;
    __local int flag;
    uint t = get_local_id(0), g = get_group_id(0), G = get_num_groups(0), row = get_group_id(1);
    __global const float *vr = v + (size_t)row * ld;
    uint i0 = (uint)((ulong)g * N / G), i1 = (uint)((ulong)(g + 1u) * N / G);
    float best = -INFINITY;
    uint idx = 0xffffffffu, nf = 0u;
    if (t == 0u) bad = 0u;
    for (uint i = i0 + t; i < i1; i += 256u) {
        float a = vr[i];
        nf |= (uint)!isfinite(a);
        if (a > best || (idx == 0xffffffffu && a == best)) {
            best = a;
            idx = i;
        }
    }
    bv[t] = best;
    bi[t] = idx;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (nf) atomic_or(&bad, 1u);
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) {
            float ob = bv[t + s];
            uint oi = bi[t + s];
            if (ob > bv[t] || (ob == bv[t] && oi < bi[t])) {
                bv[t] = ob;
                bi[t] = oi;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global uint *p = parts + ((size_t)row * G + g) * 3u;
    if (t == 0u) {
        p[0] = as_uint(bv[0]);
        p[1] = bi[0];
        p[2] = bad;
    }
    if (last_of(cnt + row, G, &flag) && t == 0u) {
        volatile __global const uint *q = parts + (size_t)row * G * 3u;
        float b = -INFINITY;
        uint bix = 0xffffffffu, anybad = 0u;
        for (uint k = 0; k < G; ++k) {
            float ob = as_float(q[3u * k]);
            uint oi = q[3u * k + 1u];
            anybad |= q[3u * k + 2u];
            if (oi != 0xffffffffu && (bix == 0xffffffffu || ob > b)) {
                b = ob;
                bix = oi;
            }
        }
        out[row] = (bix == 0xffffffffu ? 0u : bix) | (anybad ? ARGMAX_NONFINITE : 0u);
    }
}

#ifdef DEC_BLOCKS
// ---- decode blocks: a whole layer of one token in two launches -----------------------------
// Block A, one work-group of 256 per query head h:
//   x = xin + the sum of `nparts` partial rows (the previous block's split-K outputs); group 0
//   stores x to xout (the residual stream for block B); RMSNorm (attention norm); the 3D rows
//   q (head h), k and v (its kv head) of the concatenated Q/K/V matrix; RoPE; the kv head's first
//   query head appends k and v to the cache at `pos`; attention over positions 0..pos (the
//   current one from the group's own k/v); the head's share of the O projection,
//   po[h][n] = sum_j Wo[n][h D + j] att[j], as one partial row.
// Block B, one work-group of 256 per chunk g of C FFN columns:
//   x = xin + sum of the H partial rows of block A; group 0 stores it; RMSNorm (FFN norm); the
//   chunk's 2C interleaved gate/up rows; SwiGLU; pd[g][n] = sum_c Wd[n][g C + c] s[c].
// Block F (one work-group): x += sum of block B's partial rows, before the head.
// Every sum is in a fixed order, so the results are deterministic. Rows are reduced by teams
// of 8 work-items (partials in local memory, one barrier, one work-item sums a row).

#define BT 8u /* work-items per row in the block GEMVs */

// x[i] = xin[i] + sum_p parts[p][i] into local xs (and xout when `store`); returns sum x^2 of
// this work-item's elements.
inline float blk_load_x(__global const float *xin, __global const float *parts, uint nparts,
                        __global float *xout, uint store, uint d, __local float *xs) {
    float ss = 0.0f;
    for (uint i = get_local_id(0); i < d; i += 256u) {
        float v = xin[i];
        for (uint p = 0; p < nparts; ++p) v += parts[(size_t)p * d + i];
        xs[i] = v;
        if (store) xout[i] = v;
        ss += v * v;
    }
    return ss;
}

// RMSNorm of xs in place (g: the norm weight), from each work-item's sum of squares.
inline void blk_norm(float ss, __local float *xs, __global const float *g, float eps, uint d,
                     __local float *red) {
    float inv = rsqrt(group_sum(ss, red) / (float)d + eps);
    for (uint i = get_local_id(0); i < d; i += 256u) xs[i] *= inv * g[i];
    barrier(CLK_LOCAL_MEM_FENCE);
}

// Per-kind access to an 8-weight word w of physical row `row` (K columns, nb = K / 32 blocks)
// against 8 activations at xp (local), and a whole-row partial over units lane, lane + BT, ..
#define BLK_KIND_T(KIND, SUMS, UNIT)                                                            \
    inline float wdot_##KIND(__global const uint4 *qs, __global const half *d, uint row,        \
                             uint w, uint nb, __local const float *xp) {                        \
        uint v = ((__global const uint *)qs)[(row * nb + w % nb) * 4u + w / nb];               \
        float8 x = vload8(0, xp);                                                               \
        float8 q = nib8(v);                                                                     \
        if (SUMS) {                                                                             \
            float2 s = vload_half2(row * nb + (w >> 2), d);                                     \
            return s.x * (dot(q.lo, x.lo) + dot(q.hi, x.hi)) +                                  \
                   s.y * dot(x.lo + x.hi, (float4)(1.0f));                                      \
        }                                                                                       \
        float s = vload_half(row * nb + (w >> 2), d);                                           \
        q -= 8.0f;                                                                              \
        return s * (dot(q.lo, x.lo) + dot(q.hi, x.hi));                                         \
    }                                                                                           \
    inline float rowdot_##KIND(__global const uint4 *qs, __global const half *d, uint row,      \
                               uint lane, uint nb, __local const float *xs) {                   \
        float acc = 0.0f;                                                                       \
        uint b0 = row * nb;                                                                     \
        /* Four units' loads issued before any is used (clamped in range, used only below nb):  \
           with one work-group per SM, a block's speed is its loads in flight. */               \
        for (uint u0 = lane; u0 < nb; u0 += 4u * BT) {                                          \
            uint4 q[4];                                                                         \
            for (uint i = 0; i < 4u; ++i) q[i] = qs[b0 + min(u0 + i * BT, nb - 1u)];            \
            for (uint i = 0; i < 4u; ++i) {                                                     \
                uint u = u0 + i * BT;                                                           \
                if (u < nb) {                                                                   \
                    float4 X[9];                                                                \
                    for (uint s_ = 0; s_ < 4u; ++s_) {                                          \
                        X[2u * s_] = vload4(2u * (u + s_ * nb), xs);                            \
                        X[2u * s_ + 1u] = vload4(2u * (u + s_ * nb) + 1u, xs);                  \
                    }                                                                           \
                    if (SUMS) {                                                                 \
                        float4 one = (float4)(1.0f);                                            \
                        X[8] = (float4)(dot(X[0] + X[1], one), dot(X[2] + X[3], one),           \
                                        dot(X[4] + X[5], one), dot(X[6] + X[7], one));          \
                    }                                                                           \
                    UNIT(acc, q[i], b0, u, nb, X)                                               \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        return acc;                                                                             \
    }

BLK_KIND_T(q4_0t, 0, T_UNIT_Q4_0)
BLK_KIND_T(q4_1t, 1, T_UNIT_Q4_1)

inline float wdot_q8_0(__global const uchar *w, __global const uchar *unused, uint row, uint wd,
                       uint nb, __local const float *xp) {
    __global const uchar *bp = w + ((size_t)row * nb + (wd >> 2)) * 34u;
    return q8_part(bp, wd & 3u, vload4(0, xp), vload4(1, xp));
}
inline float rowdot_q8_0(__global const uchar *w, __global const uchar *unused, uint row,
                         uint lane, uint nb, __local const float *xs) {
    float acc = 0.0f;
    __global const uchar *wr = w + (size_t)row * nb * 34u;
    for (uint i = lane; i < 4u * nb; i += BT)
        acc += q8_part(wr + (size_t)(i >> 2) * 34u, i & 3u, vload4(2u * i, xs),
                       vload4(2u * i + 1u, xs));
    return acc;
}
inline float wdot_f16(__global const half *w, __global const uchar *unused, uint row, uint wd,
                      uint nb, __local const float *xp) {
    float8 f = vload_half8(0, w + (size_t)row * nb * 32u + wd * 8u);
    float8 x = vload8(0, xp);
    return dot(f.lo, x.lo) + dot(f.hi, x.hi);
}
inline float rowdot_f16(__global const half *w, __global const uchar *unused, uint row,
                        uint lane, uint nb, __local const float *xs) {
    float acc = 0.0f;
    __global const half *wr = w + (size_t)row * nb * 32u;
    for (uint i = lane; i < 4u * nb; i += BT) {
        float8 f = vload_half8(i, wr);
        float8 x = vload8(i, xs);
        acc += dot(f.lo, x.lo) + dot(f.hi, x.hi);
    }
    return acc;
}

// Q5_0, Q5_1, K-quants (GGUF bytes in w0): word wd of a row is part wd % 4 of slice wd / 4.
#define BLK_KIND_G(F)                                                                           \
    inline float wdot_##F(__global const uchar *w, __global const uchar *unused, uint row,      \
                          uint wd, uint nb, __local const float *xp) {                          \
        __global const uchar *wr = w + (size_t)row * ROWB_##F(nb << 5);                         \
        return dot8_##F(wr, wd >> 2, wd & 3u, vload4(0, xp), vload4(1, xp));                    \
    }                                                                                           \
    inline float rowdot_##F(__global const uchar *w, __global const uchar *unused, uint row,    \
                            uint lane, uint nb, __local const float *xs) {                      \
        float acc = 0.0f;                                                                       \
        __global const uchar *wr = w + (size_t)row * ROWB_##F(nb << 5);                         \
        for (uint i = lane; i < 4u * nb; i += BT)                                               \
            acc += dot8_##F(wr, i >> 2, i & 3u, vload4(2u * i, xs), vload4(2u * i + 1u, xs));   \
        return acc;                                                                             \
    }
BLK_KIND_G(q5_0)
BLK_KIND_G(q5_1)
BLK_KIND_G(q4_k)
BLK_KIND_G(q5_k)
BLK_KIND_G(q6_k)

// out[r] = row r of a matrix (physical row phys(r)) . xs, for r < R, into local `out`:
// teams of BT work-items, partials in red[r * BT + lane], one barrier, then one work-item a row.
#define BLK_GEMV(KIND, W0, W1, R, PHYS, NB, XS, RED, OUT)                                       \
    {                                                                                           \
        uint team_ = get_local_id(0) / BT, lane_ = get_local_id(0) % BT;                        \
        /* Two rows per pass (the second clamped, stored only when in range): twice the loads \
           in flight per work-item. */                                                          \
        for (uint r_ = team_; r_ < (R); r_ += 512u / BT) {                                      \
            uint r2_ = min(r_ + 256u / BT, (R) - 1u);                                           \
            float a_ = rowdot_##KIND(W0, W1, PHYS(r_), lane_, NB, XS);                          \
            float b_ = rowdot_##KIND(W0, W1, PHYS(r2_), lane_, NB, XS);                         \
            (RED)[r_ * BT + lane_] = a_;                                                        \
            if (r_ + 256u / BT < (R)) (RED)[r2_ * BT + lane_] = b_;                             \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        for (uint r_ = get_local_id(0); r_ < (R); r_ += 256u) {                                 \
            float s_ = 0.0f;                                                                    \
            for (uint l_ = 0; l_ < BT; ++l_) s_ += (RED)[r_ * BT + l_];                         \
            (OUT)[r_] = s_;                                                                     \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    }

// Partial rows: dst[n] = sum over words w0 .. w0 + nw of row n (n < N) against xp; rows n and
// n + 256 in one pass (the second clamped, stored only when in range).
#define BLK_PARTIAL(KIND, W0, W1, N, NB, W0RD, NW, XP, DST)                                     \
    for (uint n_ = get_local_id(0); n_ < (N); n_ += 512u) {                                     \
        uint n2_ = min(n_ + 256u, (N) - 1u);                                                    \
        float a_ = 0.0f, b_ = 0.0f;                                                             \
        for (uint w_ = 0; w_ < (NW); ++w_) {                                                    \
            a_ += wdot_##KIND(W0, W1, n_, (W0RD) + w_, NB, (XP) + 8u * w_);                     \
            b_ += wdot_##KIND(W0, W1, n2_, (W0RD) + w_, NB, (XP) + 8u * w_);                    \
        }                                                                                       \
        (DST)[n_] = a_;                                                                         \
        if (n_ + 256u < (N)) (DST)[n2_] = b_;                                                   \
    }

// Physical row of row r of block A's 3D rows (uses the kernel's h, D, dq, dkv, kvh).
#define BLK_A_ROW(r)                                                                            \
    ((r) < D ? h * D + (r)                                                                      \
             : ((r) < 2u * D ? dq + kvh * D + (r) - D : dq + dkv + kvh * D + (r) - 2u * D))

#define BLOCK_A(KIND, T0, T1)                                                                   \
    __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void attn_block_##KIND(           \
        __global const T0 *wq0, __global const T1 *wq1, __global const T0 *wo0,                 \
        __global const T1 *wo1, __global const float *xin, __global const float *parts,        \
        uint nparts, __global float *xout, __global const float *g, float eps,                  \
        __global KV_T *kc, __global KV_T *vc, __global const float2 *rope,                     \
        __global float *po, uint d, uint H, uint Hkv, uint D, uint npairs, uint pos,            \
        float scale, __local float *xs, __local float *qkv, __local float *red) {               \
        uint t = get_local_id(0), h = get_group_id(0);                                          \
        uint grp = H / Hkv, kvh = h / grp, dq = H * D, dkv = Hkv * D;                           \
        float ss = blk_load_x(xin, parts, nparts, xout, h == 0u, d, xs);                        \
        blk_norm(ss, xs, g, eps, d, red);                                                       \
        /* rows: q of head h, k and v of kv head kvh in the concatenated [q; k; v] */           \
        BLK_GEMV(KIND, wq0, wq1, 3u * D, BLK_A_ROW, d >> 5, xs, red, qkv)                       \
        /* RoPE: work-item t < D rotates pair t % (D/2) of q (t < D/2) or k */                  \
        if (t < D) {                                                                            \
            uint i = t % (D >> 1);                                                              \
            __local float *p = qkv + (t < (D >> 1) ? 0u : D) + 2u * i;                          \
            if (i < npairs) {                                                                   \
                float2 cs = rope[(size_t)pos * npairs + i];                                     \
                float a = p[0] * cs.x - p[1] * cs.y;                                            \
                p[1] = p[0] * cs.y + p[1] * cs.x;                                               \
                p[0] = a;                                                                       \
            }                                                                                   \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        if (h % grp == 0u && t < D) {                                                           \
            kv_put1(kc, (size_t)pos * dkv + kvh * D + t, qkv[D + t]);                           \
            kv_put1(vc, (size_t)pos * dkv + kvh * D + t, qkv[2u * D + t]);                      \
        }                                                                                       \
        /* attention over 0..pos: key j < pos from the cache, j == pos from qkv */              \
        uint L = pos + 1u, parts_v = 256u / D, dd = t % D, pv = t / D;                          \
        size_t kco = kvh * D;                                                                   \
        __local float *sc = red + 256u;                                                         \
        float mx = -INFINITY, l = 0.0f, acc = 0.0f;                                             \
        for (uint j0 = 0; j0 < L; j0 += 256u) {                                                 \
            uint j = j0 + t;                                                                    \
            float s = -INFINITY;                                                                \
            if (j < pos) {                                                                      \
                size_t kr = (size_t)j * dkv + kco;                                              \
                s = 0.0f;                                                                       \
                for (uint e = 0; e < D; ++e) s += qkv[e] * kv_ld(kc, kr + e);                   \
                s *= scale;                                                                     \
            } else if (j == pos) {                                                              \
                s = 0.0f;                                                                       \
                for (uint e = 0; e < D; ++e) s += qkv[e] * qkv[D + e];                          \
                s *= scale;                                                                     \
            }                                                                                   \
            float nm = fmax(mx, group_max(s, red));                                             \
            float e = exp(s - nm);                                                              \
            sc[t] = e;                                                                          \
            float cs = group_sum(e, red);                                                       \
            float corr = exp(mx - nm);                                                          \
            l = l * corr + cs;                                                                  \
            uint cnt = min(256u, L - j0);                                                       \
            float a = 0.0f;                                                                     \
            for (uint jj = pv; jj < cnt; jj += parts_v) {                                       \
                uint jv = j0 + jj;                                                              \
                float vv = jv == pos ? qkv[2u * D + dd] : kv_ld(vc, (size_t)jv * dkv + kco + dd); \
                a += sc[jj] * vv;                                                               \
            }                                                                                   \
            acc = acc * corr + a;                                                               \
            mx = nm;                                                                            \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        }                                                                                       \
        red[t] = acc;                                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        if (t < D) {                                                                            \
            float o = 0.0f;                                                                     \
            for (uint p = 0; p < parts_v; ++p) o += red[p * D + t];                             \
            xs[t] = o / l; /* att of head h, over the normed x (no longer needed) */           \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        BLK_PARTIAL(KIND, wo0, wo1, d, dq >> 5, h * D / 8u, D / 8u, xs, po + (size_t)h * d)    \
    }

// Physical row of row r of block B's 2C rows: the chunk's interleaved gate/up rows.
#define BLK_B_ROW(r) (2u * C * gi + (r))

#define BLOCK_B(KIND, T0, T1)                                                                   \
    __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void ffn_block_##KIND(            \
        __global const T0 *wu0, __global const T1 *wu1, __global const T0 *wd0,                \
        __global const T1 *wd1, __global const float *xin, __global const float *parts,        \
        uint nparts, __global float *xout, __global const float *g, float eps,                  \
        __global float *pd, uint d, uint ff, uint C, __local float *xs, __local float *hs,      \
        __local float *red) {                                                                   \
        uint t = get_local_id(0), gi = get_group_id(0);                                         \
        float ss = blk_load_x(xin, parts, nparts, xout, gi == 0u, d, xs);                       \
        blk_norm(ss, xs, g, eps, d, red);                                                       \
        BLK_GEMV(KIND, wu0, wu1, 2u * C, BLK_B_ROW, d >> 5, xs, red, hs)                        \
        if (t < C) {                                                                            \
            float gv = hs[2u * t], uv = hs[2u * t + 1u];                                        \
            xs[t] = gv / (1.0f + exp(-gv)) * uv; /* SwiGLU of the chunk, over the normed x */   \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        BLK_PARTIAL(KIND, wd0, wd1, d, ff >> 5, gi * C / 8u, C / 8u, xs, pd + (size_t)gi * d)   \
    }

BLOCK_A(q4_0t, uint4, half)
BLOCK_A(q4_1t, uint4, half)
BLOCK_A(q8_0, uchar, uchar)
BLOCK_A(f16, half, uchar)
BLOCK_B(q4_0t, uint4, half)
BLOCK_B(q4_1t, uint4, half)
BLOCK_B(q8_0, uchar, uchar)
BLOCK_B(f16, half, uchar)
BLOCK_A(q5_0, uchar, uchar)
BLOCK_A(q5_1, uchar, uchar)
BLOCK_A(q4_k, uchar, uchar)
BLOCK_A(q5_k, uchar, uchar)
BLOCK_A(q6_k, uchar, uchar)
BLOCK_B(q5_0, uchar, uchar)
BLOCK_B(q5_1, uchar, uchar)
BLOCK_B(q4_k, uchar, uchar)
BLOCK_B(q5_k, uchar, uchar)
BLOCK_B(q6_k, uchar, uchar)

// x += the sum of `nparts` partial rows (one work-group; each element read and written by one
// work-item).
__kernel void blk_finish(__global float *x, __global const float *parts, uint nparts, uint d) {
    for (uint i = get_local_id(0); i < d; i += get_local_size(0)) {
        float v = x[i];
        for (uint p = 0; p < nparts; ++p) v += parts[(size_t)p * d + i];
        x[i] = v;
    }
}
#endif // DEC_BLOCKS
