// Helpers of the device-resident decoder's kernels (built after common.cl, before decoder.cl
// or persistent.cl): the matmul epilogues, the fused RMSNorm's scale, row-pair reductions, the
// embedding gather of one element and the split-K decode attention.

#define EPI_STORE 0u
#define EPI_ADD 1u
#define EPI_SWIGLU 2u
#define EPI_QKV 3u
#define EPI_GATED 4u

// Set in an argmax index word when the row held a NaN or an infinity (vocabularies are far
// below 2^31).
#define ARGMAX_NONFINITE 0x80000000u

// The trailing arguments of every matmul kernel: the epilogue, its output and the RoPE/cache
// parameters (dq, dkv: q and k/v widths; hd: head width; npairs: rotated pairs per head;
// rope[pos * npairs + i] = (cos, sin) of position pos, pair i; coff: the QKV column offset).
#define EPI_PARAMS                                                                               \
    uint mode, __global float *y, uint ldy, __global KV_ET *kc, __global KV_ET *vc,             \
        __global const float2 *rope, uint pos0, uint dq, uint dkv, uint hd, uint npairs,        \
        uint coff
#define EPI_ARGS mode, y, ldy, kc, vc, rope, pos0, dq, dkv, hd, npairs, coff

// Stores the values v0, v1 of columns c, c+1 (c even) of output row m, as `mode` says. Two
// twins: epi_pair, and epi_pair_v whose output is volatile (the persistent step adds into
// rows other work-groups of the same launch wrote, so it must not read them from a stale
// non-coherent cache).
#define EPI_PAIR_FN(NAME, Q)                                                                     \
    inline void NAME(uint m, uint c, uint N, float v0, float v1, uint mode, Q __global float *y, \
                     uint ldy, __global KV_ET *kc, __global KV_ET *vc,                          \
                     __global const float2 *rope, uint pos0, uint dq, uint dkv, uint hd,        \
                     uint npairs, uint coff) {                                                   \
        if (mode == EPI_STORE) {                                                                 \
            Q __global float *p = y + (size_t)m * ldy + c;                                       \
            p[0] = v0;                                                                           \
            if (c + 1u < N) p[1] = v1;                                                           \
        } else if (mode == EPI_ADD) {                                                            \
            Q __global float *p = y + (size_t)m * ldy + c;                                       \
            p[0] += v0;                                                                          \
            if (c + 1u < N) p[1] += v1;                                                          \
        } else if (mode == EPI_SWIGLU) {                                                         \
            y[(size_t)m * ldy + (c >> 1)] = v0 / (1.0f + exp(-v0)) * v1;                         \
        } else if (mode == EPI_GATED) {                                                          \
            Q __global float *p = y + (size_t)m * ldy + c;                                       \
            float g0 = p[0];                                                                     \
            p[0] = g0 / (1.0f + exp(-g0)) * v0;                                                  \
            if (c + 1u < N) {                                                                    \
                float g1 = p[1];                                                                 \
                p[1] = g1 / (1.0f + exp(-g1)) * v1;                                              \
            }                                                                                    \
        } else {                                                                                 \
            uint pos = pos0 + m;                                                                 \
            c += coff;                                                                           \
            if (c < dq + dkv) {                                                                  \
                uint cc = c < dq ? c : c - dq;                                                   \
                uint i = (cc % hd) >> 1;                                                         \
                if (i < npairs) {                                                                \
                    float2 cs = rope[(size_t)pos * npairs + i];                                  \
                    float a = v0 * cs.x - v1 * cs.y;                                             \
                    v1 = v0 * cs.y + v1 * cs.x;                                                  \
                    v0 = a;                                                                      \
                }                                                                                \
                if (c < dq) {                                                                    \
                    Q __global float *p = y + (size_t)m * ldy + c;                               \
                    p[0] = v0;                                                                   \
                    p[1] = v1;                                                                   \
                } else {                                                                         \
                    kv_put2(kc, (size_t)kv_erow(pos, m) * dkv + cc, v0, v1);                     \
                }                                                                                \
            } else {                                                                             \
                kv_put2(vc, (size_t)kv_erow(pos, m) * dkv + (c - dq - dkv), v0, v1);             \
            }                                                                                    \
        }                                                                                        \
    }
EPI_PAIR_FN(epi_pair, )
EPI_PAIR_FN(epi_pair_v, volatile)

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

// Element i of row r (D wide) of a matrix in a split layout (src/layout.rs; fmt 11 Q8_0, 12
// Q5_0, 13 Q5_1, 14 Q4_K, 15 Q5_K, 16 Q6_K): plane 0 in w0, the records in w1.
inline float embed_split(__global const uchar *w0, __global const uchar *w1, uint r, uint i,
                         uint D, uint fmt) {
    uint nb = D >> 5, b = (uint)r * nb + (i >> 5), e = i & 31u, gi = e >> 2, bl = e & 3u;
    if (fmt == 11u)
        return (float)((__global const char *)w0)[(size_t)b * 32u + e] *
               vload_half(b, (__global const half *)w1);
    uchar byte = w0[(size_t)b * 16u + (e & 15u)];
    float q = (float)(e < 16u ? byte & 15u : byte >> 4);
    if (fmt == 12u || fmt == 13u) {
        __global const uchar *rc = w1 + (size_t)b * 8u;
        uint qh = *(__global const uint *)rc;
        float2 dm = vload_half2(1, (__global const half *)rc);
        q += 16.0f * (float)((qh >> (8u * bl + gi)) & 1u);
        return fmt == 12u ? (q - 16.0f) * dm.x : q * dm.x + dm.y;
    }
    uint j = (i >> 5) & 7u;
    if (fmt == 16u) {
        __global const uchar *rc = w1 + ((size_t)r * (nb >> 3) + (i >> 8)) * 84u;
        uint h = *(__global const uint *)(rc + 8u * j + 4u * (gi >> 2));
        q += 16.0f * (float)((h >> (8u * bl + 2u * (gi & 3u))) & 3u);
        float sc = (float)((__global const char *)rc)[64u + 2u * j + (e >> 4)];
        return (q - 32.0f) * sc * vload_half(40, (__global const half *)rc);
    }
    __global const uchar *rc = w1 + ((size_t)r * (nb >> 3) + (i >> 8)) * (fmt == 14u ? 20u : 52u);
    if (fmt == 15u) {
        uint qh = *(__global const uint *)(rc + 20u + 4u * j);
        q += 16.0f * (float)((qh >> (8u * bl + gi)) & 1u);
    }
    float2 dm = vload_half2(0, (__global const half *)rc);
    return dm.x * (float)rc[4u + 2u * j] * q - dm.y * (float)rc[5u + 2u * j];
}

// Element i of embedding row r (D wide). fmt: 0 F16, 1 Q4_0, 2 Q4_1, 3 Q8_0 (GGUF blocks in
// w0), 4 Q4_0 T, 5 Q4_1 T (quant plane w0, scale plane w1: the tied output head's own copy),
// 6 Q5_0, 7 Q5_1, 8 Q4_K, 9 Q5_K, 10 Q6_K (GGUF bytes in w0: the value's 8-value part is
// decoded and the one value kept).
inline float embed_value(__global const uchar *w0, __global const half *w1, uint r, uint i,
                         uint D, uint fmt) {
    uint nb = D >> 5, b = i >> 5, e = i & 31u;
    if (fmt == 0u) return vload_half((size_t)r * D + i, (__global const half *)w0);
    if (fmt == 1u || fmt == 2u) {
        uint bb = fmt == 1u ? 18u : 20u;
        __global const uchar *bp = w0 + ((size_t)r * nb + b) * bb;
        uchar byte = bp[bb - 16u + (e & 15u)];
        float q = (float)(e < 16u ? byte & 15u : byte >> 4);
        float dd = vload_half(0, (__global const half *)bp);
        return fmt == 1u ? (q - 8.0f) * dd : q * dd + vload_half(1, (__global const half *)bp);
    }
    if (fmt == 3u) {
        __global const uchar *bp = w0 + ((size_t)r * nb + b) * 34u;
        return (float)((__global const char *)bp)[2u + e] * vload_half(0, (__global const half *)bp);
    }
    if (fmt >= 11u) return embed_split(w0, (__global const uchar *)w1, r, i, D, fmt);
    if (fmt >= 6u) {
        uint kt = i >> 5, p = (i >> 3) & 3u;
        float8 v8;
        if (fmt == 6u) v8 = deq8_q5_0(w0 + (size_t)r * ROWB_q5_0(D), kt, p);
        else if (fmt == 7u) v8 = deq8_q5_1(w0 + (size_t)r * ROWB_q5_1(D), kt, p);
        else if (fmt == 8u) v8 = deq8_q4_k(w0 + (size_t)r * ROWB_q4_k(D), kt, p);
        else if (fmt == 9u) v8 = deq8_q5_k(w0 + (size_t)r * ROWB_q5_k(D), kt, p);
        else v8 = deq8_q6_k(w0 + (size_t)r * ROWB_q6_k(D), kt, p);
        float a[8];
        vstore8(v8, 0, a);
        return a[i & 7u];
    }
    uint wd = i >> 3, u = wd % nb, s = wd / nb;
    uint word = ((__global const uint *)w0)[((size_t)r * nb + u) * 4u + s];
    float q = (float)((word >> (4u * (i & 7u))) & 15u);
    if (fmt == 4u) return (q - 8.0f) * vload_half((size_t)r * nb + b, w1);
    float2 dm = vload_half2((size_t)r * nb + b, w1);
    return q * dm.x + dm.y;
}

// ---- split-K decode attention: one query row, its positions spread over work-groups --------
// Work-group (head h, split s) computes the softmax-weighted sum of the values over its range
// of positions as a partial (m = its largest score, l = sum exp(score - m), acc = sum
// exp(score - m) v); the last group of a head to finish combines the parts (scaled to the
// largest m). Two kinds of work-item teams: AP_TPP work-items a key for the scores (AP_KEYS
// keys a pass, an online softmax across passes), (dimension, group) for the values.
#ifndef AP_WG
#define AP_WG 256u /* work-group size (a power of two >= head_dim) */
#endif
#define AP_TPP 4u
#define AP_KEYS (AP_WG / AP_TPP)

// The part of one query head over positions [j0, j1) into part[0] = m, part[1] = l,
// part[2 + d] = acc[d]. qg: the head's query (D floats, times `scale` here); kb/vb: the K and
// V caches (kv.cl; row stride kvd values), the kv head's values at columns coff.. of each
// row. Inputs are volatile: in the
// persistent step other work-groups of the same launch wrote them. Locals: qs[D],
// sc/rm/rl[AP_KEYS], red[AP_WG].
inline void attn_part(volatile __global const float *qg, volatile __global const KV_T *kb,
                      volatile __global const KV_T *vb, uint kvd, uint coff, uint D, uint j0,
                      uint j1,
                      float scale, __global float *part, __local float *qs, __local float *sc,
                      __local float *rm, __local float *rl, __local float *red) {
    uint t = get_local_id(0);
    for (uint e = t; e < D; e += AP_WG) qs[e] = qg[e] * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint ng = AP_WG / D, dd = t % D, grp = t / D, jp = t / AP_TPP, sub = t % AP_TPP;
    float mx = -INFINITY, l = 0.0f, acc = 0.0f;
    for (uint c0 = j0; c0 < j1; c0 += AP_KEYS) {
        uint n = min(AP_KEYS, j1 - c0);
        float s = 0.0f;
        if (jp < n) {
            size_t kr = (size_t)(c0 + jp) * kvd + coff;
            for (uint e = sub; e < D; e += AP_TPP) s += qs[e] * kv_ldv(kb, kr + e);
        }
        red[t] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t < AP_KEYS) {
            float v = -INFINITY;
            if (t < n) {
                v = 0.0f;
                for (uint i = 0; i < AP_TPP; ++i) v += red[t * AP_TPP + i];
            }
            sc[t] = v;
            rm[t] = v;
            rl[t] = t < n ? 1.0f : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // (max, sum of exp) of the pass's scores: a tree of (m, l) pairs; empty slots have
        // l = 0 and are skipped (their m is -inf, and -inf - -inf is NaN).
        for (uint st = AP_KEYS >> 1; st > 0u; st >>= 1) {
            if (t < st) {
                float ma = rm[t], mb = rm[t + st], la = rl[t], lb = rl[t + st];
                float m2 = fmax(ma, mb);
                rl[t] = (la == 0.0f ? 0.0f : la * exp(ma - m2)) +
                        (lb == 0.0f ? 0.0f : lb * exp(mb - m2));
                rm[t] = m2;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        float nm = fmax(mx, rm[0]);
        float corr = l == 0.0f ? 0.0f : exp(mx - nm); // 0 before the first pass
        l = l * corr + rl[0] * exp(rm[0] - nm);
        if (t < AP_KEYS) sc[t] = exp(sc[t] - nm); // 0 for the empty slots
        barrier(CLK_LOCAL_MEM_FENCE);
        float a = 0.0f;
        if (grp < ng)
            for (uint jj = grp; jj < n; jj += ng) a += sc[jj] * kv_ldv(vb, (size_t)(c0 + jj) * kvd + coff + dd);
        acc = acc * corr + a;
        mx = nm;
        barrier(CLK_LOCAL_MEM_FENCE); // sc, rm, rl, red are rewritten by the next pass
    }
    red[t] = grp < ng ? acc : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t < D) {
        float o = 0.0f;
        for (uint g = 0; g < ng; ++g) o += red[g * D + t];
        part[2u + t] = o;
    }
    if (t == 0u) {
        part[0] = mx;
        part[1] = l;
    }
}

// After a work-group wrote its share of a split result: whether it is the last of `parts`
// groups to do so on counter `cnt` (it then resets the counter for the next use). The
// protocol of the completion flag: the group's writes, a barrier, one work-item fences and
// increments; the last one fences again before the group reads the others' shares (through
// volatile pointers).
inline int last_of(volatile __global uint *cnt, uint parts, __local int *flag) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0u) {
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        int last = atomic_inc(cnt) == parts - 1u;
        if (last) {
            atomic_xchg(cnt, 0u);
            mem_fence(CLK_GLOBAL_MEM_FENCE);
        }
        *flag = last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return *flag;
}

// out[d] = the combination of S parts (D + 2 floats each) of one head, d < D.
inline void attn_combine(volatile __global const float *parts, uint S, uint D,
                         __global float *out) {
    for (uint d = get_local_id(0); d < D; d += AP_WG) {
        float M = -INFINITY;
        for (uint s = 0; s < S; ++s) M = fmax(M, parts[s * (D + 2u)]);
        float num = 0.0f, den = 0.0f;
        for (uint s = 0; s < S; ++s) {
            volatile __global const float *p = parts + s * (D + 2u);
            float lw = p[1];
            float w = lw == 0.0f ? 0.0f : exp(p[0] - M);
            num += w * p[2u + d];
            den += w * lw;
        }
        out[d] = num / den;
    }
}
