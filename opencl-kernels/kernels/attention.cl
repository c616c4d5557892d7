// Attention over the KV cache (built after common.cl, kv.cl and decoder_ops.cl; see
// src/attention.rs). Layouts: q and out are [M][H * HD] f32 (query row m at position pos0 + m,
// RoPE applied); the caches are [S][Hkv * HD] in KV_T (kv.cl), already holding every position
// the rows attend to; query head h reads kv head h / GRP. Softmax scale: `scale` (1/sqrt(HD)).
//
// Build options (the host sets them per shape): -DHD= (head width, even, <= 256), -DGRP=
// (query heads per kv head), -DGG= (query heads a prefill work-group takes, divides GRP,
// <= RS), -DRS= (row slots of a prefill work-group: 32 or 16), -DBC= (keys a prefill tile:
// 8, 16, 32 or 64), -DDG= (query heads a decode work-group takes, divides GRP, <= 8), -DKV_TYPE=.
//
// Kernels:
//   attn_flash   prefill, tiled (flash-style): a work-group takes RS/GG query positions x GG
//                query heads of one kv head (the GQA group shares every K/V tile it loads),
//                walks the key tiles 0..(its last position) only (later, fully masked tiles
//                are never read), scores one BC-key tile at a time in local memory (never
//                more), online softmax (running max, rescaled sum and accumulators)
//   attn_dec     decode (one query row), split over ranges of positions: a work-group takes
//                DG query heads of one kv head over one range; the last group of a head group
//                to finish combines the ranges' partial results
//   attn_rowwise the previous prefill kernel (one work-group of 64 a head and row; each reads
//                every key it attends to), kept as a second implementation and a baseline
//   attn_decode  the previous split decode kernel (one head a work-group), likewise
//   kv_store_q8  quantizes staged f32 k/v rows into a q8_0 cache

#ifndef HD
#define HD 64
#endif
#ifndef GRP
#define GRP 1
#endif
#ifndef GG
#define GG GRP
#endif
#ifndef RS
#define RS 32
#endif
#ifndef BC
#define BC 32
#endif
#ifndef DG
#define DG 1
#endif

#define FA_WG 128                 /* work-items of the flash and decode work-groups */
#define HD4 ((HD + 3) / 4 * 4)    /* HD rounded up to whole float4s */
#define NV (HD4 / 4)              /* float4s a row */
#define QLD (HD4 + 4)             /* local row stride (floats) of q and k/v tiles */
#define BR (RS / GG)              /* query positions a prefill work-group takes */
#define RV (BR * GG)              /* row slots in use (<= RS) */
#define RPW (RS / 16)             /* score rows a work-item computes */
#define KPW (BC / 8)              /* score keys a work-item computes */
#define WPR (FA_WG / RS)          /* softmax work-items a row */
#define KPR (BC / WPR)            /* softmax keys a work-item */
#define PVW (FA_WG / NV)          /* row lanes of the P.V product (NV <= 64 for HD <= 256) */
#define RPV ((RS + PVW - 1) / PVW) /* P.V rows a work-item */
#define PLD (BC + 1)              /* local row stride of the probabilities */

// Four values of a kv row: dims 4v..4v+3 of the head at element index `base` (zero past HD).
inline float4 kv_row4(__global const KV_T *c, size_t base, uint v) {
#if HD % 4 == 0
    return kv_ld4(c, base + 4u * v);
#else
    float4 r = (float4)(0.0f);
    uint d = 4u * v;
    r.x = kv_ld(c, base + d);
    if (d + 1u < HD) r.y = kv_ld(c, base + d + 1u);
    if (d + 2u < HD) r.z = kv_ld(c, base + d + 2u);
    if (d + 3u < HD) r.w = kv_ld(c, base + d + 3u);
    return r;
#endif
}

// Keys (or values) j0..j0+nk of kv head column kcol into the local tile [BC][QLD] (f32, as
// float4s: QLD4 a row).
#define QLD4 (QLD / 4)
inline void fa_load(__global const KV_T *c, __local float4 *kv, uint j0, uint nk, uint kvd,
                    size_t kcol) {
    for (uint i = get_local_id(0); i < nk * NV; i += FA_WG) {
        uint k = i / NV, v = i % NV;
        kv[k * QLD4 + v] = kv_row4(c, (size_t)(j0 + k) * kvd + kcol, v);
    }
}

// The online softmax step of one tile (probabilities ps[rows][pld] of `keys` keys; `wpr`
// work-items a row, rows * wpr <= FA_WG, each taking keys part, part + wpr, ...): the new
// running max of each row, ps turned into exp(score - max), the running sum rescaled and
// grown; crow gets each row's rescale factor for the accumulators. Called by every work-item
// (those past rows * wpr only meet the barriers); ends with a barrier.
inline void fa_softmax(__local float *ps, uint pld, uint rows, uint keys, uint wpr,
                       __local float *red, __local float *red2, __local float *mrow,
                       __local float *lrow, __local float *crow) {
    uint t = get_local_id(0), row = t / wpr, part = t % wpr;
    int in = row < rows;
    __local float *p = ps + row * pld;
    float mx = -INFINITY;
    if (in)
        for (uint k = part; k < keys; k += wpr) mx = fmax(mx, p[k]);
    red[t] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    float mo = -INFINITY, mn = -INFINITY, sum = 0.0f;
    if (in) {
        mo = mrow[row];
        mn = mo;
        for (uint i = 0; i < wpr; ++i) mn = fmax(mn, red[row * wpr + i]);
        for (uint k = part; k < keys; k += wpr) {
            // A row with no key so far (mn = -inf: a slot past the last row) gets zeros.
            float e = mn == -INFINITY ? 0.0f : exp(p[k] - mn);
            p[k] = e;
            sum += e;
        }
    }
    red2[t] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (in && part == 0u) {
        float tot = 0.0f;
        for (uint i = 0; i < wpr; ++i) tot += red2[row * wpr + i];
        float corr = mo == -INFINITY ? 0.0f : exp(mo - mn); // 0 before the first key
        lrow[row] = lrow[row] * corr + tot;
        mrow[row] = mn;
        crow[row] = corr;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

// ---- prefill, tiled ---------------------------------------------------------------------------
// Global (Hkv * GRP / GG * FA_WG, ceil(M / BR)): group (hg, tile) takes kv head hg / (GRP / GG),
// query heads (hg % (GRP / GG)) * GG + 0..GG of its group, rows tile * BR + 0..BR. Row slot r:
// row tile * BR + r / GG, head r % GG of the group.
__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void
attn_flash(__global const float *q, __global const KV_T *kc, __global const KV_T *vc,
           __global float *out, uint Hkv, uint pos0, float scale, uint M) {
    // float4 arrays: 16-byte aligned rows (QLD is a multiple of 4), so the vector loads below
    // are single 128-bit accesses; rows padded by one float4 against bank conflicts.
    __local float4 qs[RS * QLD4];
    __local float4 kv[BC * QLD4];
    __local float ps[RS * PLD];
    __local float red[FA_WG];
    __local float red2[FA_WG];
    __local float mrow[RS];
    __local float lrow[RS];
    __local float crow[RS];
    uint t = get_local_id(0), hg = get_group_id(0), tile = get_group_id(1);
    uint kvh = hg / (GRP / GG), h0 = kvh * GRP + (hg % (GRP / GG)) * GG;
    uint ldq = Hkv * GRP * HD, kvd = Hkv * HD;
    uint m0 = tile * BR, mend = min(M, m0 + BR);
    uint lmax = pos0 + mend; // keys 0..lmax-1: up to the tile's last position
    size_t kcol = (size_t)kvh * HD;
    __local float *qf = (__local float *)qs;
    for (uint i = t; i < RS * QLD; i += FA_WG) {
        uint r = i / QLD, d = i % QLD, m = m0 + r / GG;
        float v = 0.0f;
        if (r < RV && m < M && d < HD) v = q[(size_t)m * ldq + (h0 + r % GG) * HD + d] * scale;
        qf[i] = v;
    }
    // Rows past a tile's keys are never loaded: zero once (their scores are masked anyway).
    for (uint i = t; i < BC * QLD4; i += FA_WG) kv[i] = (float4)(0.0f);
    if (t < RS) {
        mrow[t] = -INFINITY;
        lrow[t] = 0.0f;
    }
    float4 acc[RPV];
    for (uint i = 0; i < RPV; ++i) acc[i] = (float4)(0.0f);
    uint rg = t >> 3, kg = t & 7u;     // scores: rows rg * RPW + i, keys kg + 8c
    uint pv = t % NV, pr = t / NV;     // P.V: float4 column pv, rows pr + PVW * i
    for (uint j0 = 0; j0 < lmax; j0 += BC) {
        uint nk = min((uint)BC, lmax - j0);
        barrier(CLK_LOCAL_MEM_FENCE); // the last tile's P.V is done with kv and ps
        fa_load(kc, kv, j0, nk, kvd, kcol);
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[RPW][KPW];
        for (uint i = 0; i < RPW; ++i)
            for (uint c = 0; c < KPW; ++c) s[i][c] = 0.0f;
        for (uint d4 = 0; d4 < NV; ++d4) {
            float4 kk[KPW];
            for (uint c = 0; c < KPW; ++c) kk[c] = kv[(kg + 8u * c) * QLD4 + d4];
            for (uint i = 0; i < RPW; ++i) {
                float4 qq = qs[(rg * RPW + i) * QLD4 + d4];
                for (uint c = 0; c < KPW; ++c) s[i][c] += dot(qq, kk[c]);
            }
        }
        for (uint i = 0; i < RPW; ++i) {
            uint r = rg * RPW + i, m = m0 + r / GG;
            for (uint c = 0; c < KPW; ++c) {
                uint k = kg + 8u * c;
                int ok = r < RV && m < M && k < nk && j0 + k <= pos0 + m; // causal
                ps[r * PLD + k] = ok ? s[i][c] : -INFINITY;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); // scores done: the keys are no longer needed
        fa_load(vc, kv, j0, nk, kvd, kcol);
        // The softmax's barriers would publish kv too, but PoCL 3.1 then let the P.V below
        // read the keys still (measured: outputs equal to k); one barrier of its own fixes it.
        barrier(CLK_LOCAL_MEM_FENCE);
        fa_softmax(ps, PLD, RS, BC, WPR, red, red2, mrow, lrow, crow);
        if (pr < PVW) {
            for (uint i = 0; i < RPV; ++i) {
                uint r = pr + PVW * i;
                if (r < RS) acc[i] *= crow[r];
            }
            for (uint k = 0; k < nk; ++k) {
                float4 vv = kv[k * QLD4 + pv];
                for (uint i = 0; i < RPV; ++i) {
                    uint r = pr + PVW * i;
                    if (r < RS) acc[i] += ps[r * PLD + k] * vv;
                }
            }
        }
    }
    if (pr < PVW) {
        for (uint i = 0; i < RPV; ++i) {
            uint r = pr + PVW * i, m = m0 + r / GG;
            if (r < RV && m < M) {
                float4 o = acc[i] / lrow[r];
                float ov[4];
                vstore4(o, 0, ov);
                __global float *op = out + (size_t)m * ldq + (h0 + r % GG) * HD;
                for (uint e = 0; e < 4u; ++e)
                    if (4u * pv + e < HD) op[4u * pv + e] = ov[e];
            }
        }
    }
}

// ---- decode, split over ranges of positions ---------------------------------------------------
#define DK FA_WG                     /* keys a pass: one a work-item */
#define DWPR (FA_WG / DG)            /* softmax work-items a head */
#define DPVW PVW                     /* P.V head lanes */
#define DRPV ((DG + DPVW - 1) / DPVW) /* P.V heads a work-item */
#define DPLD (DK + 1)
#define DVC (HD4 > 128 ? 16 : 32)        /* value rows staged at once */

// Global (S * Hkv * GRP / DG * FA_WG): group i takes range s = i / (Hkv * GRP / DG) of S of the
// positions 0..pos (range s: [s L / S, (s + 1) L / S), L = pos + 1, S <= L so none is empty),
// head group hg = i % (Hkv * GRP / DG): kv head hg / (GRP / DG), its query heads
// (hg % (GRP / DG)) * DG + 0..DG. With S > 1 each group writes its heads' partial results
// (m, l, acc[HD]) into parts[h][s] and the last of a head group's S groups (counter cnt[hg],
// zero between launches, reset by that group) combines them into out.
__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void
attn_dec(__global const float *q, __global const KV_T *kc, __global const KV_T *vc,
         __global float *out, uint Hkv, uint pos, float scale, uint S, __global float *parts,
         __global uint *cnt) {
    __local float4 qs[DG * QLD4];
    __local float4 vs[DVC * QLD4];
    __local float ps[DG * DPLD];
    __local float red[FA_WG];
    __local float red2[FA_WG];
    __local float mrow[DG];
    __local float lrow[DG];
    __local float crow[DG];
    __local int flag;
    uint t = get_local_id(0), ng = Hkv * (GRP / DG);
    uint s = get_group_id(0) / ng, hg = get_group_id(0) % ng;
    uint kvh = hg / (GRP / DG), h0 = kvh * GRP + (hg % (GRP / DG)) * DG, kvd = Hkv * HD;
    uint L = pos + 1u, js = s * L / S, je = (s + 1u) * L / S;
    size_t kcol = (size_t)kvh * HD;
    __local float *qf = (__local float *)qs;
    for (uint i = t; i < DG * QLD; i += FA_WG) {
        uint r = i / QLD, d = i % QLD;
        qf[i] = d < HD ? q[(h0 + r) * HD + d] * scale : 0.0f;
    }
    if (t < DG) {
        mrow[t] = -INFINITY;
        lrow[t] = 0.0f;
    }
    float4 acc[DRPV];
    for (uint i = 0; i < DRPV; ++i) acc[i] = (float4)(0.0f);
    uint pv = t % NV, pr = t / NV;
    for (uint j0 = js; j0 < je; j0 += DK) {
        uint nk = min((uint)DK, je - j0);
        barrier(CLK_LOCAL_MEM_FENCE); // q staged; the last pass's P.V is done with ps
        float sc[DG];
        for (uint g = 0; g < DG; ++g) sc[g] = 0.0f;
        if (t < nk) {
            size_t kr = (size_t)(j0 + t) * kvd + kcol;
            for (uint d4 = 0; d4 < NV; ++d4) {
                float4 kk = kv_row4(kc, kr, d4);
                for (uint g = 0; g < DG; ++g) sc[g] += dot(qs[g * QLD4 + d4], kk);
            }
        }
        for (uint g = 0; g < DG; ++g) ps[g * DPLD + t] = t < nk ? sc[g] : -INFINITY;
        barrier(CLK_LOCAL_MEM_FENCE);
        fa_softmax(ps, DPLD, DG, DK, DWPR, red, red2, mrow, lrow, crow);
        if (pr < DPVW)
            for (uint i = 0; i < DRPV; ++i) {
                uint r = pr + DPVW * i;
                if (r < DG) acc[i] *= crow[r];
            }
        // The values in chunks of DVC rows staged in local memory: every work-item's loads of
        // a chunk are in flight at once (read straight from global memory one key after the
        // other, each multiply-add waited for its load: ~16 us at 32 positions on the H200).
        for (uint c0 = 0; c0 < nk; c0 += DVC) {
            uint nc = min((uint)DVC, nk - c0);
            barrier(CLK_LOCAL_MEM_FENCE); // the last chunk's reads are done
            for (uint i = t; i < nc * NV; i += FA_WG) {
                uint k = i / NV, v = i % NV;
                vs[k * QLD4 + v] = kv_row4(vc, (size_t)(j0 + c0 + k) * kvd + kcol, v);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (pr < DPVW)
                for (uint k = 0; k < nc; ++k) {
                    float4 vv = vs[k * QLD4 + pv];
                    for (uint i = 0; i < DRPV; ++i) {
                        uint r = pr + DPVW * i;
                        if (r < DG) acc[i] += ps[r * DPLD + c0 + k] * vv;
                    }
                }
        }
    }
    // Each (head, float4 column) is held by one work-item.
    if (pr < DPVW) {
        for (uint i = 0; i < DRPV; ++i) {
            uint r = pr + DPVW * i;
            if (r < DG) {
                float ov[4];
                vstore4(S == 1u ? acc[i] / lrow[r] : acc[i], 0, ov);
                __global float *dst = S == 1u ? out + (h0 + r) * HD
                                              : parts + ((size_t)(h0 + r) * S + s) * (HD + 2u) + 2u;
                for (uint e = 0; e < 4u; ++e)
                    if (4u * pv + e < HD) dst[4u * pv + e] = ov[e];
                if (S != 1u && pv == 0u) {
                    __global float *p = parts + ((size_t)(h0 + r) * S + s) * (HD + 2u);
                    p[0] = mrow[r];
                    p[1] = lrow[r];
                }
            }
        }
    }
    if (S == 1u || !last_of(cnt + hg, S, &flag)) return;
    for (uint i = t; i < DG * HD; i += FA_WG) {
        uint r = i / HD, d = i % HD;
        volatile __global const float *hp = parts + (size_t)(h0 + r) * S * (HD + 2u);
        float mx = -INFINITY;
        for (uint k = 0; k < S; ++k) mx = fmax(mx, hp[k * (HD + 2u)]);
        float num = 0.0f, den = 0.0f;
        for (uint k = 0; k < S; ++k) {
            volatile __global const float *p = hp + k * (HD + 2u);
            float w = exp(p[0] - mx); // every range holds a key: m finite, l >= 1
            num += w * p[2u + d];
            den += w * p[1];
        }
        out[(h0 + r) * HD + d] = num / den;
    }
}

// ---- the previous kernels ---------------------------------------------------------------------
// attn_rowwise: one work-group of 64 per (head h, row m); keys in chunks of 64 (one a
// work-item), online softmax across chunks. Work-item t owns output dims t, t + 64, ... (D <=
// 256). Global (64 H, M).
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
attn_rowwise(__global const float *q, __global const KV_T *kc, __global const KV_T *vc,
             __global float *out, uint H, uint Hkv, uint D, uint pos0, float scale) {
    __local float qh[256];
    __local float p[64];
    __local float red[64];
    uint t = get_local_id(0), h = get_group_id(0), m = get_group_id(1);
    uint kvh = h / (H / Hkv);
    uint ld = H * D, kvd = Hkv * D;
    uint L = pos0 + m + 1u;
    size_t kcol = (size_t)kvh * D;
    for (uint d = t; d < D; d += 64u) qh[d] = q[(size_t)m * ld + h * D + d] * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    float mx = -INFINITY, l = 0.0f;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint j0 = 0; j0 < L; j0 += 64u) {
        uint j = j0 + t;
        float s = -INFINITY;
        if (j < L) {
            size_t kr = (size_t)j * kvd + kcol;
            s = 0.0f;
            for (uint d = 0; d < D; ++d) s += qh[d] * kv_ld(kc, kr + d);
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
                for (uint jj = 0; jj < cnt; ++jj)
                    a += p[jj] * kv_ld(vc, (size_t)(j0 + jj) * kvd + kcol + d);
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

// attn_decode: global H * S work-groups of AP_WG: group (h = i % H, s = i / H) attends head h
// over positions [s L / S, (s + 1) L / S) of 0..pos into parts[h][s] (D + 2 floats); the last
// group of each head combines its S parts into out. cnt: H counters, zero between launches.
__kernel __attribute__((reqd_work_group_size(AP_WG, 1, 1))) void
attn_decode(__global const float *q, __global const KV_T *kc, __global const KV_T *vc,
            __global float *out, uint H, uint Hkv, uint D, uint pos, float scale, uint S,
            __global float *parts, __global uint *cnt) {
    __local float qs[256];
    __local float sc[AP_KEYS];
    __local float rm[AP_KEYS];
    __local float rl[AP_KEYS];
    __local float red[AP_WG];
    __local int flag;
    uint i = get_group_id(0), h = i % H, s = i / H;
    uint L = pos + 1u, kvh = h / (H / Hkv), kvd = Hkv * D;
    __global float *hp = parts + (size_t)h * S * (D + 2u);
    attn_part(q + h * D, kc, vc, kvd, kvh * D, D, s * L / S, (s + 1u) * L / S, scale,
              hp + s * (D + 2u), qs, sc, rm, rl, red);
    if (last_of(cnt + h, S, &flag)) attn_combine(hp, S, D, out + h * D);
}

// ---- q8_0 cache append ------------------------------------------------------------------------
// ks, vs: staged rows [M][kvd] (f32) of positions pos0..pos0+M; each work-item quantizes one
// 32-value block (K blocks first, then V) as GGUF's Q8_0: d = max|x| / 127 (stored as f16,
// rounded to nearest even), q = round(x / d); a block holding a NaN or an infinity gets a NaN
// scale, so the cache reads back non-finite rather than a silent number. Global >= 2 M kvd/32.
__kernel void kv_store_q8(__global const float *ks, __global const float *vs, __global uchar *kc,
                          __global uchar *vc, uint kvd, uint pos0, uint M) {
    uint i = get_global_id(0), nb = kvd >> 5, per = M * nb;
    if (i >= 2u * per) return;
    int is_k = i < per;
    uint b = is_k ? i : i - per, m = b / nb, blk = b % nb;
    __global const float *x = (is_k ? ks : vs) + (size_t)m * kvd + blk * 32u;
    __global uchar *bp = (is_k ? kc : vc) + ((size_t)(pos0 + m) * nb + blk) * 34u;
    float amax = 0.0f;
    int finite = 1;
    for (uint e = 0; e < 32u; ++e) {
        float v = x[e];
        finite &= isfinite(v);
        amax = fmax(amax, fabs(v));
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    vstore_half_rte(finite ? d : NAN, 0, (__global half *)bp);
    for (uint e = 0; e < 32u; ++e)
        ((__global char *)bp)[2u + e] = finite ? (char)(int)round(x[e] * id) : (char)0;
}
