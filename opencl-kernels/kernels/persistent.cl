// The persistent decode step (built after common.cl and decoder_ops.cl; see
// src/decoder/persistent.rs): one launch runs one token through every layer, the final norm,
// the output head and the argmax. Its G work-groups of PK_WG work-items are all resident at
// once (G <= the compute units) and go through the step's phases together, separated by grid
// barriers:
//
//   gather       x = the token's embedding row
//   per layer    1 Q/K/V GEMV (attention norm fused), RoPE, k and v appended to the cache
//                2 attention, split over heads x ranges of positions; the last group of a
//                  head combines its parts (decoder_ops.cl)
//                3 O GEMV + residual
//                4 gate/up GEMV (FFN norm fused) + SwiGLU
//                5 down GEMV + residual
//   head         final norm + head GEMV (the logits) + each group's argmax; the last group
//                reduces them
//
// Why: on a GPU with cheap on-chip synchronization and costly launches (NVIDIA's OpenCL:
// several µs between dependent launches, no graphs), a decode step is ~150 small dependent
// ops whose gaps cost more than their work. A grid barrier costs about one round trip to L2.
//
// The grid barrier is CUDA's grid sync: a work-group barrier, then one work-item fences,
// increments the counter, polls it and fences again. Data other work-groups of the same
// launch wrote is read through volatile pointers, never from a multiprocessor's non-coherent
// L1 (CUDA's memory-fence example does the same). Each GEMV phase loads its first weights
// before it waits at the barrier (weights depend on nothing), then stages its activation row
// in local memory (times the norm weight, with the sum of squares), then each team of tpr
// work-items computes two output columns per pass, loading the next pass's weights before
// reducing this one's.
//
// A work-group that polls a barrier PK_SPIN times without seeing every group arrive (a group
// that never ran: the device cannot hold them all) stops, and so does every other; the step
// reports it in its status word instead of hanging.
//
// Build options: -DPK_QKV=<kind> -DPK_O= -DPK_GU= -DPK_DN= -DPK_HEAD= (f16, q8_0, q4_0t,
// q4_1t: how each matrix is stored), optional -DPK_U (weight units per work-item and row in
// flight, default 4).

#define PK_WG AP_WG
#ifndef PK_U
#define PK_U 4u
#endif
#ifndef PK_XS
#define PK_XS 16384u /* floats of the staged activation chunk (the host sets it) */
#endif
#define PK_SPIN (1u << 24)
#define PK_SMAX 16u /* position splits per head at most */
#define PK_NONE 0xffffffffu

// Words of the state buffer (zero between launches).
#define ST_BAR 0u    /* grid barrier arrivals */
#define ST_DONE 1u   /* groups finished */
#define ST_AMAX 2u   /* groups that wrote their argmax part */
#define ST_STATUS 3u /* nonzero: a group stopped at a barrier */
#define ST_NONFIN 4u /* nonzero: a logit was NaN or infinite */
#define ST_HEADS 5u  /* then one attention counter a head */

#define PK_CAT2(a, b) a##b
#define PK_CAT(a, b) PK_CAT2(a, b)

// Waits until every work-group has arrived here `target / G` times in this launch; 0 when
// this group gave up after PK_SPIN polls.
inline int pk_sync(volatile __global uint *bar, uint target, __local int *ok) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0u) {
        int good = 1;
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        atomic_inc(bar);
        uint n = 0;
        while (*bar < target) {
            if (++n > PK_SPIN) {
                good = 0;
                break;
            }
        }
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        *ok = good;
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    return *ok;
}

// One chunk of the activation row into local memory: xs[j] = x[i(j)] (times g[i(j)] when
// use_g) for j < n, where i(j) = (j / seg) * gstride + base + j % seg (a T-layout chunk is four
// segments, one from each quarter of the row; the other kinds one contiguous run). Returns
// this work-item's part of the sum of squares (the caller reduces it once the whole row is
// staged).
inline float pk_stage(volatile __global const float *x, __global const float *g, uint use_g,
                      uint n, uint seg, uint gstride, uint base, __local float *xs) {
    float ss = 0.0f;
    for (uint j = get_local_id(0); j < n; j += PK_WG) {
        uint s = j / seg, i = s * gstride + base + (j - s * seg);
        float v = x[i];
        ss += v * v;
        xs[j] = use_g ? v * g[i] : v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return ss;
}

// ---- per storage kind: PK_U units of one row held in registers (DECL), loaded (LOAD: units
// U0 + lane, U0 + lane + tpr, .. of row ROW, NB units a row), and dotted with the staged chunk
// XS of NU units from U0 (DOT); units past the chunk's end are neither loaded nor used. A unit: 16 bytes of the T layout (32 weights) or
// 8 weights (Q8_0, F16).
#define PK_UNITS_q4_0t(K) ((K) >> 5)
#define PK_UNITS_q4_1t(K) ((K) >> 5)
#define PK_UNITS_q8_0(K) ((K) >> 3)
#define PK_UNITS_f16(K) ((K) >> 3)
// Floats of the activation row one unit reads (the staged chunk holds PK_XS floats at most).
#define PK_UF_q4_0t 32u
#define PK_UF_q4_1t 32u
#define PK_UF_q8_0 8u
#define PK_UF_f16 8u
// Whether a unit's values lie in the four quarters of the row (the T layout).
#define PK_QUARTERS_q4_0t 1u
#define PK_QUARTERS_q4_1t 1u
#define PK_QUARTERS_q8_0 0u
#define PK_QUARTERS_f16 0u

#define PK_DECL_T(R)                                                                            \
    uint4 R##q[PK_U];                                                                           \
    float4 R##s[PK_U];                                                                          \
    float4 R##m[PK_U];
#define PK_LOAD_T(R, W0, W1, ROW, NB, U0, NU, LANE, TPR, HASM)                                  \
    for (uint i_ = 0; i_ < PK_U; ++i_) {                                                        \
        uint v_ = (LANE) + i_ * (TPR), u_ = (U0) + v_, b_ = (ROW) * (NB);                       \
        __global const half *d_ = (__global const half *)(W1);                                  \
        if (v_ < (NU)) {                                                                        \
            R##q[i_] = ((__global const uint4 *)(W0))[b_ + u_];                                 \
        }                                                                                       \
        if (v_ < (NU) && HASM) {                                                                \
            float2 s0_ = vload_half2(b_ + (u_ >> 2), d_);                                       \
            float2 s1_ = vload_half2(b_ + ((u_ + (NB)) >> 2), d_);                              \
            float2 s2_ = vload_half2(b_ + ((u_ + 2u * (NB)) >> 2), d_);                         \
            float2 s3_ = vload_half2(b_ + ((u_ + 3u * (NB)) >> 2), d_);                         \
            R##s[i_] = (float4)(s0_.x, s1_.x, s2_.x, s3_.x);                                    \
            R##m[i_] = (float4)(s0_.y, s1_.y, s2_.y, s3_.y);                                    \
        } else if (v_ < (NU)) {                                                                 \
            R##s[i_] = (float4)(vload_half(b_ + (u_ >> 2), d_),                                 \
                                vload_half(b_ + ((u_ + (NB)) >> 2), d_),                        \
                                vload_half(b_ + ((u_ + 2u * (NB)) >> 2), d_),                   \
                                vload_half(b_ + ((u_ + 3u * (NB)) >> 2), d_));                  \
            R##m[i_] = (float4)(0.0f);                                                          \
        }                                                                                       \
    }
#define PK_DOT_T(R, ACC, XS, NU, LANE, TPR, HASM)                                               \
    for (uint i_ = 0; i_ < PK_U; ++i_) {                                                        \
        uint u_ = (LANE) + i_ * (TPR);                                                          \
        if (u_ < (NU)) {                                                                        \
            float4 X_[8];                                                                       \
            for (uint s_ = 0; s_ < 4u; ++s_) {                                                  \
                X_[2u * s_] = vload4(2u * (u_ + s_ * (NU)), XS);                                \
                X_[2u * s_ + 1u] = vload4(2u * (u_ + s_ * (NU)) + 1u, XS);                      \
            }                                                                                   \
            float off_ = HASM ? 0.0f : 8.0f;                                                    \
            uint4 q_ = R##q[i_];                                                                \
            float4 s_ = R##s[i_];                                                               \
            ACC += s_.x * t_word(q_.x, X_[0], X_[1], off_) +                                    \
                   s_.y * t_word(q_.y, X_[2], X_[3], off_) +                                    \
                   s_.z * t_word(q_.z, X_[4], X_[5], off_) +                                    \
                   s_.w * t_word(q_.w, X_[6], X_[7], off_);                                     \
            if (HASM) {                                                                         \
                float4 one_ = (float4)(1.0f), m_ = R##m[i_];                                    \
                ACC += m_.x * dot(X_[0] + X_[1], one_) + m_.y * dot(X_[2] + X_[3], one_) +      \
                       m_.z * dot(X_[4] + X_[5], one_) + m_.w * dot(X_[6] + X_[7], one_);       \
            }                                                                                   \
        }                                                                                       \
    }
#define PK_DECL_q4_0t(R) PK_DECL_T(R)
#define PK_DECL_q4_1t(R) PK_DECL_T(R)
#define PK_LOAD_q4_0t(R, W0, W1, ROW, NB, U0, NU, LANE, TPR)                                    \
    PK_LOAD_T(R, W0, W1, ROW, NB, U0, NU, LANE, TPR, 0)
#define PK_LOAD_q4_1t(R, W0, W1, ROW, NB, U0, NU, LANE, TPR)                                    \
    PK_LOAD_T(R, W0, W1, ROW, NB, U0, NU, LANE, TPR, 1)
#define PK_DOT_q4_0t(R, ACC, XS, U, LANE, TPR) PK_DOT_T(R, ACC, XS, U, LANE, TPR, 0)
#define PK_DOT_q4_1t(R, ACC, XS, U, LANE, TPR) PK_DOT_T(R, ACC, XS, U, LANE, TPR, 1)

// Q8_0 (GGUF blocks of 34 bytes, 2-byte aligned): unit u = part u & 3 of block u >> 2.
#define PK_DECL_q8_0(R)                                                                         \
    uint2 R##q[PK_U];                                                                           \
    float R##s[PK_U];
#define PK_LOAD_q8_0(R, W0, W1, ROW, NB, U0, NU, LANE, TPR)                                    \
    for (uint i_ = 0; i_ < PK_U; ++i_) {                                                        \
        uint v_ = (LANE) + i_ * (TPR), u_ = (U0) + v_;                                          \
        if (v_ < (NU)) {                                                                        \
            __global const uchar *bp_ = (W0) + ((size_t)(ROW) * ((NB) >> 2) + (u_ >> 2)) * 34u; \
            R##s[i_] = vload_half(0, (__global const half *)bp_);                               \
            R##q[i_] =                                                                          \
                as_uint2(vload4(0, (__global const ushort *)(bp_ + 2u + 8u * (u_ & 3u))));      \
        }                                                                                       \
    }
#define PK_DOT_q8_0(R, ACC, XS, U, LANE, TPR)                                                   \
    for (uint i_ = 0; i_ < PK_U; ++i_) {                                                        \
        uint u_ = (LANE) + i_ * (TPR);                                                          \
        if (u_ < (U)) {                                                                         \
            float8 q_ = convert_float8(as_char8(R##q[i_]));                                     \
            float8 x_ = vload8(u_, XS);                                                         \
            ACC += R##s[i_] * (dot(q_.lo, x_.lo) + dot(q_.hi, x_.hi));                          \
        }                                                                                       \
    }

// F16: unit u = halves 8u..8u+7 of the row.
#define PK_DECL_f16(R) uint4 R##q[PK_U];
#define PK_LOAD_f16(R, W0, W1, ROW, NB, U0, NU, LANE, TPR)                                     \
    for (uint i_ = 0; i_ < PK_U; ++i_) {                                                        \
        uint v_ = (LANE) + i_ * (TPR), u_ = (U0) + v_;                                          \
        if (v_ < (NU)) R##q[i_] = ((__global const uint4 *)(W0))[(size_t)(ROW) * (NB) + u_];    \
    }
#define PK_DOT_f16(R, ACC, XS, U, LANE, TPR)                                                    \
    for (uint i_ = 0; i_ < PK_U; ++i_) {                                                        \
        uint u_ = (LANE) + i_ * (TPR);                                                          \
        if (u_ < (U)) {                                                                         \
            uint4 q_ = R##q[i_];                                                                \
            float8 f_ = vload_half8(0, (const __private half *)&q_);                            \
            float8 x_ = vload8(u_, XS);                                                         \
            ACC += dot(f_.lo, x_.lo) + dot(f_.hi, x_.hi);                                       \
        }                                                                                       \
    }

// Work-items per row for `units` units a row: the smallest power of two that covers the row
// with PK_U units each (the host checks that PK_WG does).
inline uint pk_tpr(uint units) {
    uint t = 1u;
    while (t * PK_U < units && t < PK_WG) t <<= 1;
    return t;
}

// What a GEMV phase does with its outputs: the epilogue (decoder_ops.cl) and, for the head,
// each team's running argmax.
typedef struct {
    uint mode;
    volatile __global float *y;
    uint ldy;
    __global KV_ET *kc;
    __global KV_ET *vc;
    __global const float2 *rope;
    uint pos;
    uint dq, dkv, hd, npairs;
    volatile __global uint *nonfin; /* the state's ST_NONFIN word */
} pk_epi;

// One GEMV phase spread over the grid: N outputs of a K-wide matrix (planes w0, w1) from the
// activation row xg (normalized with g when use_g); pair p of outputs goes to work-group
// p % G, team (p / G) % nt (nt teams a group, T = nt G in the grid), so that consecutive
// pairs land on different work-groups. The row is staged in local memory in chunks of at
// most PK_XS floats (one chunk where it fits; the device's local memory bounds PK_XS, e.g.
// 48 KiB against Llama-3-8B's 14336-wide down projection): each chunk's partial sums of a
// pair are kept in acc (written and read back by the same work-item, so no barrier is
// needed), the last chunk's epilogue adds them. Returns 0 when the grid barrier failed.
// `nsync` counts this launch's barriers; best/bidx: the running argmax of the columns this
// work-item stored (track).
#define PK_GEMV(KIND)                                                                           \
    inline int pk_gemv_##KIND(__global const uchar *w0, __global const uchar *w1, uint N,      \
                              uint K, volatile __global const float *xg,                       \
                              __global const float *g, uint use_g, float eps,                  \
                              volatile __global uint *bar, uint *nsync, __local float *xs,     \
                              __local float *red, __local int *flag, pk_epi e, uint track,     \
                              float *best, uint *bidx, __global float *acc) {                  \
        uint lid = get_local_id(0), gid = get_group_id(0), G = get_num_groups(0);              \
        uint units = PK_UNITS_##KIND(K), most = max(PK_XS / PK_UF_##KIND, 1u);                 \
        uint chunks = (units + most - 1u) / most, cu = (units + chunks - 1u) / chunks;         \
        uint tpr = pk_tpr(cu);                                                                 \
        uint nt = PK_WG / tpr, team = lid / tpr, lane = lid % tpr;                             \
        uint T = nt * G, pairs = (N + 1u) >> 1, iters = (pairs + T - 1u) / T;                  \
        uint c00 = 2u * (team * G + gid);                                                      \
        PK_DECL_##KIND(a) PK_DECL_##KIND(b)                                                    \
        if (c00 < N) {                                                                         \
            uint nu_ = min(cu, units);                                                         \
            PK_LOAD_##KIND(a, w0, w1, c00, units, 0u, nu_, lane, tpr)                          \
            PK_LOAD_##KIND(b, w0, w1, min(c00 + 1u, N - 1u), units, 0u, nu_, lane, tpr)        \
        }                                                                                      \
        *nsync += 1u;                                                                          \
        if (!pk_sync(bar, *nsync * G, flag)) return 0;                                         \
        float ss = 0.0f, inv = 1.0f;                                                           \
        for (uint ch = 0; ch < chunks; ++ch) {                                                 \
            uint u0 = ch * cu, nu = min(cu, units - u0), last = ch + 1u == chunks;             \
            uint uf = PK_UF_##KIND, seg = PK_QUARTERS_##KIND ? nu * (uf >> 2) : nu * uf;       \
            uint gs = PK_QUARTERS_##KIND ? units * (uf >> 2) : 0u;                             \
            if (ch > 0u) barrier(CLK_LOCAL_MEM_FENCE); /* every team done with the last chunk */ \
            ss += pk_stage(xg, g, use_g, nu * uf, seg, gs, u0 * (PK_QUARTERS_##KIND ? uf >> 2 : uf), xs); \
            if (last && use_g) inv = rsqrt(group_sum(ss, red) / (float)K + eps);              \
            uint c0 = c00;                                                                     \
            for (uint it = 0; it < iters; ++it) {                                              \
                float a0 = 0.0f, a1 = 0.0f;                                                    \
                if (c0 < N) {                                                                  \
                    PK_DOT_##KIND(a, a0, xs, nu, lane, tpr)                                    \
                    PK_DOT_##KIND(b, a1, xs, nu, lane, tpr)                                    \
                }                                                                              \
                /* the next loads: this chunk's next pair, else the next chunk's first */     \
                uint cn = c0 + 2u * T;                                                         \
                if (it + 1u < iters && cn < N) {                                               \
                    PK_LOAD_##KIND(a, w0, w1, cn, units, u0, nu, lane, tpr)                    \
                    PK_LOAD_##KIND(b, w0, w1, min(cn + 1u, N - 1u), units, u0, nu, lane, tpr)  \
                } else if (it + 1u == iters && !last && c00 < N) {                             \
                    uint nn_ = min(cu, units - u0 - cu);                                       \
                    PK_LOAD_##KIND(a, w0, w1, c00, units, u0 + cu, nn_, lane, tpr)             \
                    PK_LOAD_##KIND(b, w0, w1, min(c00 + 1u, N - 1u), units, u0 + cu, nn_,     \
                                   lane, tpr)                                                  \
                }                                                                              \
                pair_sum(&a0, &a1, red, lane, team, tpr, nt);                                  \
                if (lane == 0u && c0 < N) {                                                    \
                    if (ch > 0u) {                                                             \
                        a0 += acc[c0];                                                         \
                        if (c0 + 1u < N) a1 += acc[c0 + 1u];                                   \
                    }                                                                          \
                    if (!last) {                                                               \
                        acc[c0] = a0;                                                          \
                        if (c0 + 1u < N) acc[c0 + 1u] = a1;                                    \
                    } else {                                                                   \
                        a0 *= inv;                                                             \
                        a1 *= inv;                                                             \
                        epi_pair_v(0u, c0, N, a0, a1, e.mode, e.y, e.ldy, e.kc, e.vc, e.rope,  \
                                   e.pos, e.dq, e.dkv, e.hd, e.npairs, 0u);                    \
                        if (track) {                                                           \
                            if (!isfinite(a0) || (c0 + 1u < N && !isfinite(a1)))               \
                                atomic_or(e.nonfin, 1u);                                       \
                            if (a0 > *best || (*bidx == PK_NONE && a0 == *best)) {             \
                                *best = a0;                                                    \
                                *bidx = c0;                                                    \
                            }                                                                  \
                            if (c0 + 1u < N &&                                                 \
                                (a1 > *best || (*bidx == PK_NONE && a1 == *best))) {           \
                                *best = a1;                                                    \
                                *bidx = c0 + 1u;                                               \
                            }                                                                  \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
                c0 = cn;                                                                       \
            }                                                                                  \
        }                                                                                      \
        return 1;                                                                              \
    }
PK_GEMV(q4_0t)
PK_GEMV(q4_1t)
PK_GEMV(q8_0)
PK_GEMV(f16)

#define PK_GEMV_QKV PK_CAT(pk_gemv_, PK_QKV)
#define PK_GEMV_O PK_CAT(pk_gemv_, PK_O)
#define PK_GEMV_GU PK_CAT(pk_gemv_, PK_GU)
#define PK_GEMV_DN PK_CAT(pk_gemv_, PK_DN)
#define PK_GEMV_HEAD PK_CAT(pk_gemv_, PK_HEAD)

// Offsets (in bytes, into warena) of a layer's planes and norms, 10 a layer.
#define LO_QKV0 0u
#define LO_QKV1 1u
#define LO_O0 2u
#define LO_O1 3u
#define LO_GU0 4u
#define LO_GU1 5u
#define LO_DN0 6u
#define LO_DN1 7u
#define LO_ANORM 8u
#define LO_FNORM 9u
#define LO_N 10u

// One token at position pos through layers [l0, l1) (l0 = 0: from the token tok[0]; else from
// the hidden row x), then, when readout > 0, the head: logits into logits[0..vocab), and for
// readout 2 the argmax into ids[0]. The status word (0: every barrier completed) goes to
// ids[1] and logits[vocab]. Global G * PK_WG, local PK_WG. Local xs: max(d, dq, ff) floats.
// barriers_only: run the barriers and no work (a measurement of their cost; outputs garbage).
__kernel __attribute__((reqd_work_group_size(PK_WG, 1, 1))) void
pk_decode(__global const uchar *warena, __global const ulong *lofs, __global const uchar *head0,
          __global const uchar *head1, __global const float *onorm, __global const uchar *emb0,
          __global const half *emb1, uint emb_fmt, __global KV_T *kvarena,
          __global const ulong *kvofs, __global const float2 *rope, __global const uint *tok,
          __global float *x, __global float *qb, __global float *att, __global float *hb,
          __global float *parts, __global float *logits, __global uint *ids,
          __global uint *state, uint l0, uint l1, uint pos, uint readout, uint d, uint dq,
          uint dkv, uint ff, uint H, uint Hkv, uint D, uint npairs, uint vocab, float eps,
          float scale, uint barriers_only, __global float *acc, __local float *xs) {
    __local float red[2u * PK_WG];
    __local uint bi[PK_WG];
    __local float qs[256];
    __local float sc[AP_KEYS];
    __local float rm[AP_KEYS];
    __local float rl[AP_KEYS];
    __local int flag;
    uint lid = get_local_id(0), gid = get_group_id(0), G = get_num_groups(0);
    volatile __global uint *bar = state + ST_BAR;
    uint nsync = 0u;
    int ok = 1;
    float best = -INFINITY;
    uint bidx = PK_NONE;
    uint work = barriers_only == 0u;
    pk_epi e;
    e.rope = rope;
    e.pos = pos;
    e.dq = dq;
    e.dkv = dkv;
    e.hd = D;
    e.npairs = npairs;
    e.kc = (__global KV_ET *)x;
    e.vc = (__global KV_ET *)x;
    e.nonfin = state + ST_NONFIN;
    if (l0 == 0u && work)
        for (uint i = gid * PK_WG + lid; i < d; i += G * PK_WG)
            x[i] = embed_value(emb0, emb1, tok[0], i, d, emb_fmt);
    for (uint l = l0; l < l1 && ok; ++l) {
        __global const ulong *lo = lofs + (size_t)l * LO_N;
        __global KV_T *kc = kvarena + kvofs[2u * l], *vc = kvarena + kvofs[2u * l + 1u];
        e.kc = (__global KV_ET *)kc;
        e.vc = (__global KV_ET *)vc;
        // 1: q/k/v
        e.mode = EPI_QKV;
        e.y = qb;
        e.ldy = dq;
        if (work)
            ok = PK_GEMV_QKV(warena + lo[LO_QKV0], warena + lo[LO_QKV1], dq + 2u * dkv, d, x,
                             (__global const float *)(warena + lo[LO_ANORM]), 1u, eps, bar,
                             &nsync, xs, red, &flag, e, 0u, &best, &bidx, acc);
        else
            ok = pk_sync(bar, ++nsync * G, &flag);
        if (!ok) break;
        // 2: attention, items (head, split) over the groups
        ok = pk_sync(bar, ++nsync * G, &flag);
        if (!ok) break;
        if (work) {
            uint L = pos + 1u;
            uint S = clamp(min(G / H, (L + 15u) >> 4), 1u, min(PK_SMAX, L));
            for (uint it = gid; it < H * S; it += G) {
                uint h = it % H, s = it / H, kvh = h / (H / Hkv);
                __global float *hp = parts + (size_t)h * S * (D + 2u);
                attn_part(qb + h * D, kc, vc, dkv, kvh * D, D, s * L / S,
                          (s + 1u) * L / S, scale, hp + s * (D + 2u), qs, sc, rm, rl, red);
                if (last_of(state + ST_HEADS + h, S, &flag)) attn_combine(hp, S, D, att + h * D);
            }
        }
        // 3: o + residual
        e.mode = EPI_ADD;
        e.y = x;
        e.ldy = d;
        if (work)
            ok = PK_GEMV_O(warena + lo[LO_O0], warena + lo[LO_O1], d, dq, att, onorm, 0u, eps,
                           bar, &nsync, xs, red, &flag, e, 0u, &best, &bidx, acc);
        else
            ok = pk_sync(bar, ++nsync * G, &flag);
        if (!ok) break;
        // 4: gate/up + SwiGLU
        e.mode = EPI_SWIGLU;
        e.y = hb;
        e.ldy = ff;
        if (work)
            ok = PK_GEMV_GU(warena + lo[LO_GU0], warena + lo[LO_GU1], 2u * ff, d, x,
                            (__global const float *)(warena + lo[LO_FNORM]), 1u, eps, bar,
                            &nsync, xs, red, &flag, e, 0u, &best, &bidx, acc);
        else
            ok = pk_sync(bar, ++nsync * G, &flag);
        if (!ok) break;
        // 5: down + residual
        e.mode = EPI_ADD;
        e.y = x;
        e.ldy = d;
        if (work)
            ok = PK_GEMV_DN(warena + lo[LO_DN0], warena + lo[LO_DN1], d, ff, hb, onorm, 0u, eps,
                            bar, &nsync, xs, red, &flag, e, 0u, &best, &bidx, acc);
        else
            ok = pk_sync(bar, ++nsync * G, &flag);
    }
    if (ok && readout > 0u) {
        e.mode = EPI_STORE;
        e.y = logits;
        e.ldy = vocab;
        if (work)
            ok = PK_GEMV_HEAD(head0, head1, vocab, d, x, onorm, 1u, eps, bar, &nsync, xs, red,
                              &flag, e, readout == 2u, &best, &bidx, acc);
        else
            ok = pk_sync(bar, ++nsync * G, &flag);
    }
    if (ok && readout == 2u && work) {
        // This group's argmax (lowest index of the largest value; NaN never wins), then the
        // last group's over every group's.
        __global uint *part = state + ST_HEADS + H + 2u * gid;
        barrier(CLK_LOCAL_MEM_FENCE);
        red[lid] = best;
        bi[lid] = bidx;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint s = PK_WG >> 1; s > 0u; s >>= 1) {
            if (lid < s) {
                float ob = red[lid + s];
                uint oi = bi[lid + s];
                if (ob > red[lid] || (ob == red[lid] && oi < bi[lid])) {
                    red[lid] = ob;
                    bi[lid] = oi;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid == 0u) {
            part[0] = as_uint(red[0]);
            part[1] = bi[0];
        }
        if (last_of(state + ST_AMAX, G, &flag)) {
            volatile __global const uint *all = state + ST_HEADS + H;
            float b = -INFINITY;
            uint bx = PK_NONE;
            for (uint i = lid; i < G; i += PK_WG) {
                float v = as_float(all[2u * i]);
                uint vi = all[2u * i + 1u];
                if (v > b || (v == b && vi < bx)) {
                    b = v;
                    bx = vi;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            red[lid] = b;
            bi[lid] = bx;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint s = PK_WG >> 1; s > 0u; s >>= 1) {
                if (lid < s) {
                    float ob = red[lid + s];
                    uint oi = bi[lid + s];
                    if (ob > red[lid] || (ob == red[lid] && oi < bi[lid])) {
                        red[lid] = ob;
                        bi[lid] = oi;
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            // Every group's non-finite logits were flagged before it counted itself in
            // (last_of fences), so the word is complete here; reset for the next launch.
            if (lid == 0u) {
                uint nf = atomic_xchg((volatile __global uint *)(state + ST_NONFIN), 0u);
                ids[0] = (bi[0] == PK_NONE ? 0u : bi[0]) | (nf ? ARGMAX_NONFINITE : 0u);
            }
        }
    }
    // The last group to finish resets the counters for the next launch and reports.
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (lid == 0u) {
        volatile __global uint *st = state;
        if (!ok) atomic_or(st + ST_STATUS, 1u);
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        if (atomic_inc(st + ST_DONE) == G - 1u) {
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            uint status = atomic_xchg(st + ST_STATUS, 0u);
            atomic_xchg(st + ST_BAR, 0u);
            atomic_xchg(st + ST_DONE, 0u);
            ids[1] = status;
            logits[vocab] = as_float(status);
        }
    }
}
