// The device-resident decoder's kernels (built after common.cl). One launch per fused op:
//
//   embed            token ids -> hidden rows (dequantized embedding rows)
//   gemv2_* / gemm_* every matmul, with the RMSNorm of the activation fused into its load
//                    (`_norm` variants) and an epilogue chosen at run time (EPI_*):
//                      STORE   y = W x                       (logits, column reads)
//                      ADD     y += W x                      (o / down projection + residual)
//                      SWIGLU  y[j] = silu(W x)[2j] * (W x)[2j+1]   (gate/up rows interleaved)
//                      QKV     RoPE on the q and k columns, q -> y, k and v -> the KV cache
//   attn_causal      attention of M query rows over the cache (row m sees positions <= pos0+m)
//   argmax_rows      index of each row's largest logit
//
// Matmuls see the weight through (wrow0, wstride): logical output column c reads physical
// weight row wrow0 + c * wstride (a column range of a concatenated or interleaved weight).
// Epilogues work on column pairs (c, c+1), c even: a RoPE pair, or a gate/up pair.
// Norm: y = inv * sum_k W[k] (x[k] g[k]), inv = rsqrt(mean(x^2) + eps), the same value as
// W (x * inv * g) with inv factored out of the sum.
// Kernels never return early (some have barriers after their bounds checks).

#define EPI_STORE 0u
#define EPI_ADD 1u
#define EPI_SWIGLU 2u
#define EPI_QKV 3u

// The trailing arguments of every matmul kernel: the epilogue, its output and the RoPE/cache
// parameters (dq, dkv: q and k/v widths; hd: head width; npairs: rotated pairs per head;
// rope[pos * npairs + i] = (cos, sin) of position pos, pair i).
#define EPI_PARAMS                                                                               \
    uint mode, __global float *y, uint ldy, __global float *kc, __global float *vc,             \
        __global const float2 *rope, uint pos0, uint dq, uint dkv, uint hd, uint npairs
#define EPI_ARGS mode, y, ldy, kc, vc, rope, pos0, dq, dkv, hd, npairs

// Stores the values v0, v1 of columns c, c+1 (c even) of output row m, as `mode` says.
inline void epi_pair(uint m, uint c, uint N, float v0, float v1, EPI_PARAMS) {
    if (mode == EPI_STORE) {
        __global float *p = y + (size_t)m * ldy + c;
        p[0] = v0;
        if (c + 1u < N) p[1] = v1;
    } else if (mode == EPI_ADD) {
        __global float *p = y + (size_t)m * ldy + c;
        p[0] += v0;
        if (c + 1u < N) p[1] += v1;
    } else if (mode == EPI_SWIGLU) {
        y[(size_t)m * ldy + (c >> 1)] = v0 / (1.0f + exp(-v0)) * v1;
    } else {
        uint pos = pos0 + m;
        if (c < dq + dkv) {
            uint cc = c < dq ? c : c - dq;
            uint i = (cc % hd) >> 1;
            if (i < npairs) {
                float2 cs = rope[(size_t)pos * npairs + i];
                float a = v0 * cs.x - v1 * cs.y;
                v1 = v0 * cs.y + v1 * cs.x;
                v0 = a;
            }
            __global float *p = c < dq ? y + (size_t)m * ldy + c : kc + (size_t)pos * dkv + cc;
            p[0] = v0;
            p[1] = v1;
        } else {
            __global float *p = vc + (size_t)pos * dkv + (c - dq - dkv);
            p[0] = v0;
            p[1] = v1;
        }
    }
}

// inv = rsqrt(mean(x[0..K)^2) + eps), reduced over the whole work-group (size a power of two,
// <= 2 * MAX_WG floats of `red`). Every work-item gets the same value.
inline float norm_inv(__global const float4 *x, uint K, float eps, __local float *red) {
    uint n = get_local_size(0) * get_local_size(1);
    uint lid = get_local_id(1) * get_local_size(0) + get_local_id(0);
    float s = 0.0f;
    for (uint i = lid; i < (K >> 2); i += n) {
        float4 v = x[i];
        s += dot(v, v);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint st = n >> 1; st > 0u; st >>= 1) {
        if (lid < st) red[lid] += red[lid + st];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float tot = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return rsqrt(tot / (float)K + eps);
}

// Sums a0 and a1 over the `tpr` work-items of row slot r (tpr a power of two); the sums land
// in work-item t == 0.
inline void pair_sum(float *a0, float *a1, __local float *red, uint t, uint r, uint tpr, uint nr) {
    __local float *r0 = red + r * tpr;
    __local float *r1 = red + (nr + r) * tpr;
    barrier(CLK_LOCAL_MEM_FENCE);
    r0[t] = *a0;
    r1[t] = *a1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = tpr >> 1; s > 0u; s >>= 1) {
        if (t < s) {
            r0[t] += r0[t + s];
            r1[t] += r1[t + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *a0 = r0[0];
    *a1 = r1[0];
}

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

// ---- prefill GEMM: Y[M][N] = X[M][K] W[N][K]^T, 64 x 64 tiles, 16 x 16 work-items ----------
// Each k-step stages a 32-wide slice of k: X[64 rows][32] and W[64 columns][32], dequantized,
// in local memory ([k][row] order), then every work-item accumulates a 4 x 4 block of outputs
// (rows 4ty.., columns 4tx..) with float4 loads. The slice is one T-layout unit (words u,
// u + nb, u + 2nb, u + 3nb) or one GGUF block (32 consecutive k); the loader work-item
// (row lr, part lp) brings 8 k of one X row and 8 weights of one W row. With the norm, the
// same loader sums x^2 of its row, and the epilogue scales each row by its inv.
#define GT 64u

// Dequantized weights of part lp (8 k) of slice kt of physical row pr (nb blocks a row).
inline float8 nib8(uint v) {
    return convert_float8((uint8)(v, v >> 4, v >> 8, v >> 12, v >> 16, v >> 20, v >> 24, v >> 28) &
                          (uint8)(15u));
}
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

// ---- causal attention -----------------------------------------------------------------------
// q, out: [M][H * D] (query row m at position pos0 + m); kc, vc: [S][Hkv * D] (FP32, one row
// per position, already holding positions <= pos0 + M - 1). One work-group of 64 per (head h,
// row m); query head h reads kv head h / (H / Hkv). Keys in chunks of 64 (one per work-item),
// online softmax across chunks (running max, rescaled sum and accumulators), so no scratch
// and any length. Work-item t owns output dims t, t + 64, t + 128, t + 192 (D <= 256).
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
attn_causal(__global const float *q, __global const float *kc, __global const float *vc,
            __global float *out, uint H, uint Hkv, uint D, uint pos0, float scale) {
    __local float qh[256];
    __local float p[64];
    __local float red[64];
    uint t = get_local_id(0), h = get_group_id(0), m = get_group_id(1);
    uint kvh = h / (H / Hkv);
    uint ld = H * D, kvd = Hkv * D;
    uint L = pos0 + m + 1u;
    __global const float *kb = kc + kvh * D;
    __global const float *vb = vc + kvh * D;
    for (uint d = t; d < D; d += 64u) qh[d] = q[(size_t)m * ld + h * D + d] * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    float mx = -INFINITY, l = 0.0f;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint j0 = 0; j0 < L; j0 += 64u) {
        uint j = j0 + t;
        float s = -INFINITY;
        if (j < L) {
            __global const float *kp = kb + (size_t)j * kvd;
            s = 0.0f;
            for (uint d = 0; d < D; ++d) s += qh[d] * kp[d];
        }
        float nm = fmax(mx, group_max(s, red));
        float e = exp(s - nm); // 0 for the padding keys (s = -inf)
        p[t] = e;
        float cs = group_sum(e, red); // its barriers also publish p
        float corr = exp(mx - nm);    // 0 on the first chunk (mx = -inf)
        l = l * corr + cs;
        uint cnt = min(64u, L - j0);
        for (uint i = 0; i < 4u; ++i) {
            uint d = t + 64u * i;
            if (d < D) {
                float a = acc[i] * corr;
                for (uint jj = 0; jj < cnt; ++jj) a += p[jj] * vb[(size_t)(j0 + jj) * kvd + d];
                acc[i] = a;
            }
        }
        mx = nm;
        barrier(CLK_LOCAL_MEM_FENCE); // p is rewritten by the next chunk
    }
    for (uint i = 0; i < 4u; ++i) {
        uint d = t + 64u * i;
        if (d < D) out[(size_t)m * ld + h * D + d] = acc[i] / l;
    }
}

// ---- embedding gather: x[m][i] = E[tok[tokoff + m]][i] ----------------------------------------
// fmt: 0 F16, 1 Q4_0, 2 Q4_1, 3 Q8_0 (GGUF blocks in w0), 4 Q4_0 T, 5 Q4_1 T (quant plane w0,
// scale plane w1: the tied output head's own copy). Global (ceil(D/64)*64, M).
__kernel void embed(__global const uchar *w0, __global const half *w1, __global const uint *tok,
                    uint tokoff, __global float *x, uint M, uint D, uint fmt) {
    uint i = get_global_id(0), m = get_global_id(1);
    if (i < D && m < M) {
        uint r = tok[tokoff + m];
        uint nb = D >> 5, b = i >> 5, e = i & 31u;
        float v;
        if (fmt == 0u) {
            v = vload_half((size_t)r * D + i, (__global const half *)w0);
        } else if (fmt == 1u || fmt == 2u) {
            uint bb = fmt == 1u ? 18u : 20u;
            __global const uchar *bp = w0 + ((size_t)r * nb + b) * bb;
            uchar byte = bp[bb - 16u + (e & 15u)];
            float q = (float)(e < 16u ? byte & 15u : byte >> 4);
            float dd = vload_half(0, (__global const half *)bp);
            v = fmt == 1u ? (q - 8.0f) * dd : q * dd + vload_half(1, (__global const half *)bp);
        } else if (fmt == 3u) {
            __global const uchar *bp = w0 + ((size_t)r * nb + b) * 34u;
            v = (float)((__global const char *)bp)[2u + e] * vload_half(0, (__global const half *)bp);
        } else {
            uint wd = i >> 3, u = wd % nb, s = wd / nb;
            uint word = ((__global const uint *)w0)[((size_t)r * nb + u) * 4u + s];
            float q = (float)((word >> (4u * (i & 7u))) & 15u);
            if (fmt == 4u) {
                v = (q - 8.0f) * vload_half((size_t)r * nb + b, w1);
            } else {
                float2 dm = vload_half2((size_t)r * nb + b, w1);
                v = q * dm.x + dm.y;
            }
        }
        x[(size_t)m * D + i] = v;
    }
}

// ---- argmax of each of `rows` rows of N values (row stride ld): the lowest index of the
// largest value (NaN never wins; a row without a number gives 0). One work-group of 256 a row.
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
argmax_rows(__global const float *v, uint N, uint ld, __global uint *out) {
    __local float bv[256];
    __local uint bi[256];
    uint t = get_local_id(0), row = get_group_id(1);
    __global const float *vr = v + (size_t)row * ld;
    float best = -INFINITY;
    uint idx = 0xffffffffu;
    for (uint i = t; i < N; i += 256u) {
        float a = vr[i];
        if (a > best || (idx == 0xffffffffu && a == best)) {
            best = a;
            idx = i;
        }
    }
    bv[t] = best;
    bi[t] = idx;
    barrier(CLK_LOCAL_MEM_FENCE);
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
    if (t == 0u) out[row] = bi[0] == 0xffffffffu ? 0u : bi[0];
}
