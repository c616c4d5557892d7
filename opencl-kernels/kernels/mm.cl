// The decoder's fast matmuls (built after common.cl and decoder_ops.cl, once per weight format
// of a model, with -DMM_FMT=<code> and -DMM_DOT=<0|1>):
//
//   mm_gemv       one activation row, f32 activations (exact to f32 rounding)
//   mm_gemv_i8    one row, activations quantized to int8 per 32 values in the work-item's
//                 registers, integer dot products
//   mm_gemm_m128, mm_gemm_m64   several rows: 2-D register-tiled GEMM
// The RMSNorm (y = W (x g) rsqrt(mean x^2 + eps)) is a run-time flag (NORM), so each kernel is
// one compilation (PoCL compiles a kernel per work-group size at its first launch).
//
// Both take the decoder's epilogues (decoder_ops.cl: EPI_PARAMS, epi_pair) and its view of a
// weight (wrow0, wstride: logical column c reads physical row wrow0 + c * wstride).
//
// MM_FMT (the device layout, see src/layout.rs and common.cl's T layout):
//   1 Q4_0 T, 2 Q4_1 T, 3 Q8_0 split, 4 Q5_0 split, 5 Q5_1 split, 6 Q4_K split, 7 Q5_K split,
//   8 Q6_K split, 9 F16.
// A 32-value "unit" is a work-item's share of a row: a T unit (words u, u + nb, u + 2nb,
// u + 3nb of the row), a split unit (one GGUF block or K-quant sub-block), or 32 halves.
// MM_DOT: 1 = the inline PTX dp4a instruction (only built where a probe kernel using it
// compiled and computed the right value: src/caps.rs), 0 = portable integer code (exact, the
// same results; slower than the f32 kernel, so the decoder uses it only in tests).

#ifndef MM_FMT
#error "MM_FMT must be defined"
#endif
#ifndef MM_DOT
#define MM_DOT 0
#endif

#define MM_T (MM_FMT == 1 || MM_FMT == 2)
#define MM_F16 (MM_FMT == 9)

// ---- integer dot products of four byte lanes -------------------------------------------------
#if MM_DOT == 1
inline int dot4_us(uint a, int b, int c) {
    int r;
    __asm__("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
inline int dot4_ss(uint a, int b, int c) {
    int r;
    __asm__("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#else
// c + sum of the byte lanes of a (unsigned / signed) times those of b (signed).
inline int dot4_us(uint a, int b, int c) {
    int4 aa = convert_int4(as_uchar4(a)), bb = convert_int4(as_char4(b));
    return c + aa.x * bb.x + aa.y * bb.y + aa.z * bb.z + aa.w * bb.w;
}
inline int dot4_ss(uint a, int b, int c) {
    int4 aa = convert_int4(as_char4(a)), bb = convert_int4(as_char4(b));
    return c + aa.x * bb.x + aa.y * bb.y + aa.z * bb.z + aa.w * bb.w;
}
#endif

// The dp4a sums start from the bits of 2^23 + 2^22, so the integer result sits in a float's
// mantissa (|sum| < 2^22 for 32 products of |q| <= 63 or 127 and |x| <= 127) and
// as_float(..) - (2^23 + 2^22) is the exact integer, without an int-to-float conversion.
#define MM_I0 0x4B400000
#define MM_IF(v) (as_float(v) - 12582912.0f)

// The four byte lanes of v as floats, exactly (no conversion instruction: 2^23 + b 2^p).
inline float4 ub4(uint v) {
    uint h = v >> 16;
    return (float4)(as_float((v & 0xFFu) | 0x4B000000u) - 8388608.0f,
                    fma(as_float((v & 0xFF00u) | 0x4B000000u), 0.00390625f, -32768.0f),
                    as_float((h & 0xFFu) | 0x4B000000u) - 8388608.0f,
                    fma(as_float((h & 0xFF00u) | 0x4B000000u), 0.00390625f, -32768.0f));
}

// Group i (values 4i..4i+3 of a split unit) of a nibble unit q as bytes: low nibbles of word
// i for i < 4, high nibbles of word i - 4 otherwise.
#define MM_NIB(q, i) ((i) < 4u ? (q)[(i)] & 0x0F0F0F0Fu : ((q)[(i)-4u] >> 4) & 0x0F0F0F0Fu)

// ---- format access -------------------------------------------------------------------------
// Per format: MM_RAW (what one unit's loads bring: quants qv[], records), MM_LOAD(R, pr, u)
// (unit u of physical row pr), and MM_UNIT(ACC, R, u) (adds the unit's dot with the staged
// activations: xs = the 32 values as float4 X[8] (f32) or packed int8 P[8] with scale dx,
// fs = sums of x over the unit's value groups (fs[0..3]: T words; fs[0]: the unit; fs[0], fs[1]:
// its halves)). nb: units a row; rec: plane 1 as bytes.

#if MM_FMT == 1 || MM_FMT == 2
// T layout: plane 0 uint4 a unit, plane 1 f16 d (Q4_1: d, m) per block; word s of unit u is
// word u + s nb of the row, in block (u + s nb) / 4.
#define MM_W1T __global const half
#define MM_RAW uint4 qv; float4 sd; float4 sm;
#if MM_FMT == 1
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = (pr) * nb;                                                                    \
        (R).qv = w0[b_ + (u)];                                                                  \
        (R).sd = (float4)(vload_half(b_ + ((u) >> 2), w1),                                      \
                          vload_half(b_ + (((u) + nb) >> 2), w1),                               \
                          vload_half(b_ + (((u) + 2u * nb) >> 2), w1),                          \
                          vload_half(b_ + (((u) + 3u * nb) >> 2), w1));                         \
        (R).sm = (float4)(0.0f);                                                                \
    }
#else
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = (pr) * nb;                                                                    \
        (R).qv = w0[b_ + (u)];                                                                  \
        float2 a_ = vload_half2(b_ + ((u) >> 2), w1), b2_ = vload_half2(b_ + (((u) + nb) >> 2), w1); \
        float2 c_ = vload_half2(b_ + (((u) + 2u * nb) >> 2), w1);                               \
        float2 d_ = vload_half2(b_ + (((u) + 3u * nb) >> 2), w1);                               \
        (R).sd = (float4)(a_.x, b2_.x, c_.x, d_.x);                                             \
        (R).sm = (float4)(a_.y, b2_.y, c_.y, d_.y);                                             \
    }
#endif
// Offset of a T word's quants: Q4_0 q - 8, Q4_1 none (its minimum m is added as m sum x).
#define MM_TOFF (MM_FMT == 1 ? 8.0f : 0.0f)
inline float mm_tw_f(uint v, float4 xa, float4 xb) { return t_word(v, xa, xb, 0.0f); }
#endif

#if MM_FMT == 3
#define MM_W1T __global const half
#define MM_RAW uint qv[8]; float d;
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = (pr) * nb + (u);                                                              \
        uint4 a_ = w0[2u * b_], c_ = w0[2u * b_ + 1u];                                          \
        (R).qv[0] = a_.x; (R).qv[1] = a_.y; (R).qv[2] = a_.z; (R).qv[3] = a_.w;                 \
        (R).qv[4] = c_.x; (R).qv[5] = c_.y; (R).qv[6] = c_.z; (R).qv[7] = c_.w;                 \
        (R).d = vload_half(b_, w1);                                                             \
    }
#endif

#if MM_FMT == 4 || MM_FMT == 5
#define MM_W1T __global const uint
#define MM_RAW uint qv[4]; uint qh; float d; float m;
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = (pr) * nb + (u);                                                              \
        uint4 a_ = w0[b_];                                                                      \
        (R).qv[0] = a_.x; (R).qv[1] = a_.y; (R).qv[2] = a_.z; (R).qv[3] = a_.w;                 \
        uint2 r_ = vload2(b_, w1);                                                              \
        (R).qh = r_.x;                                                                          \
        float2 dm_ = vload_half2(0, (__global const half *)&w1[2u * b_ + 1u]);                  \
        (R).d = dm_.x;                                                                          \
        (R).m = dm_.y;                                                                          \
    }
#endif

#if MM_FMT == 6 || MM_FMT == 7 || MM_FMT == 8
#define MM_W1T __global const uchar
#if MM_FMT == 6
#define MM_REC 20u
#elif MM_FMT == 7
#define MM_REC 52u
#else
#define MM_REC 84u
#endif
#if MM_FMT == 8
#define MM_RAW uint qv[4]; uint h0; uint h1; float s0; float s1;
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = (pr) * nb + (u);                                                              \
        uint4 a_ = w0[b_];                                                                      \
        (R).qv[0] = a_.x; (R).qv[1] = a_.y; (R).qv[2] = a_.z; (R).qv[3] = a_.w;                 \
        __global const uchar *rc_ = w1 + (size_t)((pr) * (nb >> 3) + ((u) >> 3)) * MM_REC;     \
        uint j_ = (u) & 7u;                                                                     \
        uint2 h_ = vload2(0, (__global const uint *)(rc_ + 8u * j_));                           \
        (R).h0 = h_.x;                                                                          \
        (R).h1 = h_.y;                                                                          \
        float d_ = vload_half(0, (__global const half *)(rc_ + 80u));                           \
        char2 sc_ = vload2(0, (__global const char *)(rc_ + 64u + 2u * j_));                    \
        (R).s0 = d_ * (float)sc_.x;                                                             \
        (R).s1 = d_ * (float)sc_.y;                                                             \
    }
#else
#define MM_RAW uint qv[4]; uint qh; float d; float m;
#endif
#endif

#if MM_FMT == 9
#define MM_W1T __global const uchar
#define MM_RAW uint4 qv[4];
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = 4u * ((pr) * nb + (u));                                                       \
        (R).qv[0] = w0[b_];                                                                     \
        (R).qv[1] = w0[b_ + 1u];                                                                \
        (R).qv[2] = w0[b_ + 2u];                                                                \
        (R).qv[3] = w0[b_ + 3u];                                                                \
    }
#endif

#if MM_FMT == 7
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = (pr) * nb + (u);                                                              \
        uint4 a_ = w0[b_];                                                                      \
        (R).qv[0] = a_.x; (R).qv[1] = a_.y; (R).qv[2] = a_.z; (R).qv[3] = a_.w;                 \
        __global const uchar *rc_ = w1 + (size_t)((pr) * (nb >> 3) + ((u) >> 3)) * MM_REC;     \
        uint j_ = (u) & 7u;                                                                     \
        float2 dm_ = vload_half2(0, (__global const half *)rc_);                                \
        uchar2 sm_ = vload2(0, rc_ + 4u + 2u * j_);                                             \
        (R).d = dm_.x * (float)sm_.x;                                                           \
        (R).m = -(dm_.y * (float)sm_.y);                                                        \
        (R).qh = *(__global const uint *)(rc_ + 20u + 4u * j_);                                 \
    }
#endif
#if MM_FMT == 6
#define MM_LOAD(R, pr, u)                                                                       \
    {                                                                                           \
        uint b_ = (pr) * nb + (u);                                                              \
        uint4 a_ = w0[b_];                                                                      \
        (R).qv[0] = a_.x; (R).qv[1] = a_.y; (R).qv[2] = a_.z; (R).qv[3] = a_.w;                 \
        __global const uchar *rc_ = w1 + (size_t)((pr) * (nb >> 3) + ((u) >> 3)) * MM_REC;     \
        uint j_ = (u) & 7u;                                                                     \
        float2 dm_ = vload_half2(0, (__global const half *)rc_);                                \
        uchar2 sm_ = vload2(0, rc_ + 4u + 2u * j_);                                             \
        (R).d = dm_.x * (float)sm_.x;                                                           \
        (R).m = -(dm_.y * (float)sm_.y);                                                        \
        (R).qh = 0u;                                                                            \
    }
#endif

// Group i of a split unit as bytes (unsigned; Q8_0 signed); MM_M: the unit's minimum term.
#if MM_FMT == 3
#define MM_M(R) 0.0f
#else
#define MM_M(R) (R).m
#endif
#if MM_FMT == 3
#define MM_G(R, i) ((R).qv[(i)])
#elif MM_FMT == 4 || MM_FMT == 5 || MM_FMT == 7
#define MM_G(R, i) (MM_NIB((R).qv, (i)) | ((((R).qh >> (i)) & 0x01010101u) << 4))
#elif MM_FMT == 6
#define MM_G(R, i) MM_NIB((R).qv, (i))
#elif MM_FMT == 8
#define MM_G(R, i)                                                                              \
    (MM_NIB((R).qv, (i)) |                                                                      \
     (((((i) < 4u ? (R).h0 : (R).h1) >> (2u * ((i) & 3u))) & 0x03030303u) << 4))
#endif

// ---- one unit's dot product ------------------------------------------------------------------
// Activation state of a work-item: the unit's 32 values X[8] (f32; times g with the norm),
// fs[4] sums (T: per word; split: fs[0] all, fs[1] values 0..15, fs[2] 16..31), and in the
// int8 kernels P[8] (packed int8: T: per word its even then odd values; split: group i) and
// the scale dx.

#if MM_T
#define MM_UNIT_F(ACC, R)                                                                       \
    {                                                                                           \
        ACC += (R).sd.x * (mm_tw_f((R).qv.x, X[0], X[1]) - MM_TOFF * fs[0]) +                   \
               (R).sd.y * (mm_tw_f((R).qv.y, X[2], X[3]) - MM_TOFF * fs[1]) +                   \
               (R).sd.z * (mm_tw_f((R).qv.z, X[4], X[5]) - MM_TOFF * fs[2]) +                   \
               (R).sd.w * (mm_tw_f((R).qv.w, X[6], X[7]) - MM_TOFF * fs[3]) +                   \
               dot((R).sm, (float4)(fs[0], fs[1], fs[2], fs[3]));                               \
    }
#define MM_TW_I(v, s) dot4_us(((v) >> 4) & 0x0F0F0F0Fu, P[2u * (s) + 1u], dot4_us((v) & 0x0F0F0F0Fu, P[2u * (s)], MM_I0))
#define MM_UNIT_I(ACC, R)                                                                       \
    {                                                                                           \
        float4 si_ = (float4)(MM_IF(MM_TW_I((R).qv.x, 0u)), MM_IF(MM_TW_I((R).qv.y, 1u)),       \
                              MM_IF(MM_TW_I((R).qv.z, 2u)), MM_IF(MM_TW_I((R).qv.w, 3u)));      \
        float4 fs4_ = (float4)(fs[0], fs[1], fs[2], fs[3]);                                     \
        ACC += dot((R).sd, si_ * dx - MM_TOFF * fs4_) + dot((R).sm, fs4_);                      \
    }
#elif MM_F16
#define MM_UNIT_F(ACC, R)                                                                       \
    {                                                                                           \
        for (uint j_ = 0; j_ < 4u; ++j_) {                                                      \
            uint4 v_ = (R).qv[j_];                                                              \
            float8 f_ = vload_half8(0, (const __private half *)&v_);                            \
            ACC += dot(f_.lo, X[2u * j_]) + dot(f_.hi, X[2u * j_ + 1u]);                        \
        }                                                                                       \
    }
#define MM_UNIT_I(ACC, R) MM_UNIT_F(ACC, R)
#else
// Split units: one scale (d) and offset (m) per unit, except Q6_K (s0 for values 0..15, s1
// for 16..31, offset -32 s). Q8_0 bytes are signed: in f32, (b ^ 0x80) - 128.
#if MM_FMT == 3
#define MM_GF(R, i) ub4(MM_G(R, i) ^ 0x80808080u)
#define MM_GOFF 128.0f
#define MM_DOT4 dot4_ss
#elif MM_FMT == 4
#define MM_GF(R, i) ub4(MM_G(R, i))
#define MM_GOFF 16.0f
#define MM_DOT4 dot4_us
#elif MM_FMT == 8
#define MM_GF(R, i) ub4(MM_G(R, i))
#define MM_GOFF 32.0f
#define MM_DOT4 dot4_us
#else
#define MM_GF(R, i) ub4(MM_G(R, i))
#define MM_GOFF 0.0f
#define MM_DOT4 dot4_us
#endif
#if MM_FMT == 8
#define MM_UNIT_F(ACC, R)                                                                       \
    {                                                                                           \
        float a_ = dot(MM_GF(R, 0u), X[0]) + dot(MM_GF(R, 1u), X[1]) + dot(MM_GF(R, 2u), X[2]) + \
                   dot(MM_GF(R, 3u), X[3]);                                                     \
        float b_ = dot(MM_GF(R, 4u), X[4]) + dot(MM_GF(R, 5u), X[5]) + dot(MM_GF(R, 6u), X[6]) + \
                   dot(MM_GF(R, 7u), X[7]);                                                     \
        ACC += (R).s0 * (a_ - MM_GOFF * fs[1]) + (R).s1 * (b_ - MM_GOFF * fs[2]);               \
    }
#define MM_UNIT_I(ACC, R)                                                                       \
    {                                                                                           \
        int a_ = MM_I0, b_ = MM_I0;                                                             \
        for (uint i_ = 0; i_ < 4u; ++i_) {                                                      \
            a_ = MM_DOT4(MM_G(R, i_), P[i_], a_);                                               \
            b_ = MM_DOT4(MM_G(R, i_ + 4u), P[i_ + 4u], b_);                                     \
        }                                                                                       \
        ACC += (R).s0 * (MM_IF(a_) * dx - MM_GOFF * fs[1]) +                                    \
               (R).s1 * (MM_IF(b_) * dx - MM_GOFF * fs[2]);                                     \
    }
#else
#define MM_UNIT_F(ACC, R)                                                                       \
    {                                                                                           \
        float a_ = 0.0f;                                                                        \
        for (uint i_ = 0; i_ < 8u; ++i_) a_ += dot(MM_GF(R, i_), X[i_]);                        \
        ACC += (R).d * (a_ - MM_GOFF * fs[0]) + MM_M(R) * fs[0];                                \
    }
#define MM_UNIT_I(ACC, R)                                                                       \
    {                                                                                           \
        int a_ = MM_I0;                                                                         \
        for (uint i_ = 0; i_ < 8u; ++i_) a_ = MM_DOT4(MM_G(R, i_), P[i_], a_);                  \
        ACC += (R).d * (MM_IF(a_) * dx - (MM_FMT == 3 ? 0.0f : MM_GOFF) * fs[0]) + MM_M(R) * fs[0]; \
    }
#endif
#if MM_FMT == 3
// Q8_0 has no minimum; in f32 its bytes were biased by 128.
#undef MM_UNIT_F
#define MM_UNIT_F(ACC, R)                                                                       \
    {                                                                                           \
        float a_ = 0.0f;                                                                        \
        for (uint i_ = 0; i_ < 8u; ++i_) a_ += dot(MM_GF(R, i_), X[i_]);                        \
        ACC += (R).d * (a_ - MM_GOFF * fs[0]);                                                  \
    }
#endif
#endif

// Float4 index of the activations of group i (values 4i..4i+3, unit order) of unit u.
#if MM_T
#define MM_GOFF4(u, i) (2u * ((u) + ((i) >> 1) * nb) + ((i) & 1u))
#else
#define MM_GOFF4(u, i) (8u * (u) + (i))
#endif

// Sums over the unit's groups (see above) from X.
#if MM_T
#define MM_FSUMS                                                                                \
    {                                                                                           \
        float4 one_ = (float4)(1.0f);                                                           \
        fs[0] = dot(X[0] + X[1], one_);                                                         \
        fs[1] = dot(X[2] + X[3], one_);                                                         \
        fs[2] = dot(X[4] + X[5], one_);                                                         \
        fs[3] = dot(X[6] + X[7], one_);                                                         \
    }
#else
#define MM_FSUMS                                                                                \
    {                                                                                           \
        float4 one_ = (float4)(1.0f);                                                           \
        fs[1] = dot(X[0] + X[1] + X[2] + X[3], one_);                                           \
        fs[2] = dot(X[4] + X[5] + X[6] + X[7], one_);                                           \
        fs[0] = fs[1] + fs[2];                                                                  \
        fs[3] = 0.0f;                                                                           \
    }
#endif

// int8 activations: P (packed) and dx from X.
inline int mm_pack4(float a, float b, float c, float d, float inv) {
    int4 q = convert_int4_rte((float4)(a, b, c, d) * inv);
    return (q.x & 0xFF) | ((q.y & 0xFF) << 8) | ((q.z & 0xFF) << 16) | (q.w << 24);
}
#if MM_T
#define MM_PACK(inv)                                                                            \
    for (uint s_ = 0; s_ < 4u; ++s_) {                                                          \
        float4 a_ = X[2u * s_], b_ = X[2u * s_ + 1u];                                           \
        P[2u * s_] = mm_pack4(a_.x, a_.z, b_.x, b_.z, inv);                                     \
        P[2u * s_ + 1u] = mm_pack4(a_.y, a_.w, b_.y, b_.w, inv);                                \
    }
#else
#define MM_PACK(inv)                                                                            \
    for (uint i_ = 0; i_ < 8u; ++i_) P[i_] = mm_pack4(X[i_].x, X[i_].y, X[i_].z, X[i_].w, inv);
#endif

// ---- x-stationary GEMV ----------------------------------------------------------------------
// 1-D work-group of nt work-items in G = nt / T teams of T (nb = K / 32 <= T; the rest idle):
// work-item t of team r holds unit t of the activation row (work-items t >= nb hold none) in
// registers for the whole launch, so activations are read and normalized once per
// work-group, not once per row. Team r computes rows
// c0 = (group * G + r) * 4 * steps .. + 4 * steps, four rows a step with their loads issued
// together. Partial sums go to local memory ([row][t]); then segments of each row are summed
// by all work-items, and work-item p < R / 2 finishes column pair (2p, 2p + 1) (the norm's
// inv = rsqrt(mean x^2 + eps) from team 0's sums of squares) through the epilogue.
// Columns past N load a valid row; their results are never stored. red: (R + 1) T floats of
// local memory (R = G * 4 * steps rows a group), sized by the host.
#define MM_GEMV(NAME, I8)                                                                       \
    __kernel void NAME(__global const uint4 *w0, MM_W1T *w1, __global const float4 *x,         \
                       uint xoff4, __global const float4 *g, float eps, uint N, uint K,        \
                       uint wrow0, uint wstride, uint T, uint steps, uint NORM, EPI_PARAMS,   \
                       __local float *red) {                                                    \
        uint lid = get_local_id(0), nt = get_local_size(0);                                     \
        uint G = nt / T, t = lid % T, r = min(lid / T, G);                                      \
        uint nb = K >> 5, rpt = 4u * steps, R = G * rpt;                                        \
        uint c0 = get_group_id(0) * R + min(r, G - 1u) * rpt;                                   \
        x += xoff4;                                                                             \
        float4 X[8];                                                                            \
        float fs[4];                                                                            \
        int P[8];                                                                               \
        float dx = 0.0f, ss = 0.0f;                                                             \
        uint u = min(t, nb - 1u);                                                               \
        for (uint i = 0; i < 8u; ++i) {                                                         \
            X[i] = x[MM_GOFF4(u, i)];                                                           \
            ss += dot(X[i], X[i]);                                                              \
            if (NORM) X[i] *= g[MM_GOFF4(u, i)];                                                \
        }                                                                                       \
        if (t >= nb || r != 0u) ss = 0.0f;                                                      \
        MM_FSUMS                                                                                \
        if (I8) {                                                                               \
            float amax = 0.0f;                                                                  \
            for (uint i = 0; i < 8u; ++i) {                                                     \
                float4 a = fabs(X[i]);                                                          \
                amax = fmax(amax, fmax(fmax(a.x, a.y), fmax(a.z, a.w)));                        \
            }                                                                                   \
            dx = amax / 127.0f;                                                                 \
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;                                     \
            MM_PACK(inv)                                                                        \
        }                                                                                       \
        for (uint st = 0; st < steps; ++st) {                                                   \
            struct { MM_RAW } raw[4];                                                           \
            for (uint j = 0; j < 4u; ++j) {                                                     \
                uint c = min(c0 + 4u * st + j, N - 1u);                                         \
                MM_LOAD(raw[j], wrow0 + c * wstride, u)                                         \
            }                                                                                   \
            for (uint j = 0; j < 4u; ++j) {                                                     \
                float acc = 0.0f;                                                               \
                if (I8) MM_UNIT_I(acc, raw[j]) else MM_UNIT_F(acc, raw[j])                      \
                if (r < G) red[(r * rpt + 4u * st + j) * T + t] = t < nb ? acc : 0.0f;          \
            }                                                                                   \
        }                                                                                       \
        if (r == 0u) red[R * T + t] = ss;                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        /* Segments: S work-items a row (R rows and the sums of squares), each summing len   \
           partials into the segment's first slot. */                                          \
        uint S = max(1u, nt / (R + 1u)), len = (T + S - 1u) / S;                                \
        uint seg = lid % S;                                                                     \
        for (uint row = lid / S; row <= R && lid < S * (nt / S); row += nt / S) {               \
            if (seg * len < T) {                                                                \
                __local float *p = red + row * T + seg * len;                                   \
                uint n = min(len, T - seg * len);                                               \
                float v = 0.0f;                                                                 \
                for (uint i = 0; i < n; ++i) v += p[i];                                         \
                p[0] = v;                                                                       \
            }                                                                                   \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        for (uint pp = lid; pp < R / 2u; pp += nt) {                                            \
            uint rr = 2u * pp;                                                                  \
            uint cc = get_group_id(0) * R + rr;                                                 \
            float a0 = 0.0f, a1 = 0.0f, tot = 0.0f;                                             \
            for (uint sg = 0; sg * len < T; ++sg) {                                             \
                a0 += red[rr * T + sg * len];                                                   \
                a1 += red[(rr + 1u) * T + sg * len];                                            \
                if (NORM) tot += red[R * T + sg * len];                                         \
            }                                                                                   \
            float inv = NORM ? rsqrt(tot / (float)K + eps) : 1.0f;                              \
            if (cc < N) epi_pair(0u, cc, N, a0 * inv, a1 * inv, EPI_ARGS);                      \
        }                                                                                       \
    }

MM_GEMV(mm_gemv, 0)
#if !MM_F16
MM_GEMV(mm_gemv_i8, 1)
#endif

// ---- register-tiled GEMM: Y[M][N] = X[M][K] W[N][K]^T -----------------------------------------
// Work-group 16 x 16 over a tile of MT (128 or 64) rows x 128 columns; work-item (tx, ty) owns
// rows ty*4 + i (and 64 + ty*4 + i when MT = 128) and columns tx*4 + j, 64 + tx*4 + j: 8 x 8
// (4 x 8) outputs in registers. K runs in tiles of one unit (32 values): each tile's W panel
// (128 rows) is dequantized once into local memory (loader lid: row lid % 128, half lid / 128 of
// the unit, values 16h..16h+15 in unit order) and its X panel (MT rows, MT / 8 values each,
// times g with the norm) staged beside it; the next tile's global loads are issued before the
// current tile's 32 k-steps of 64 (32) FMAs a work-item, so they are in flight while it computes
// (one local buffer, two barriers a tile). Rows past M / columns past N load valid rows; their
// results are never stored. With the norm, the X loaders sum x^2 of their rows and the epilogue
// scales each row by its inv.

// Dequantized values 16h .. 16h + 15 (unit order) of unit R into v[16].
#if MM_T
#define MM_DEQ16(R, h, v)                                                                       \
    for (uint w_ = 0; w_ < 2u; ++w_) {                                                          \
        uint s_ = 2u * (h) + w_;                                                                \
        uint q_ = s_ == 0u ? (R).qv.x : s_ == 1u ? (R).qv.y : s_ == 2u ? (R).qv.z : (R).qv.w;   \
        float d_ = s_ == 0u ? (R).sd.x : s_ == 1u ? (R).sd.y : s_ == 2u ? (R).sd.z : (R).sd.w;   \
        float m_ = s_ == 0u ? (R).sm.x : s_ == 1u ? (R).sm.y : s_ == 2u ? (R).sm.z : (R).sm.w;   \
        float4 lo_ = convert_float4((uint4)(q_, q_ >> 4, q_ >> 8, q_ >> 12) & (uint4)(15u));    \
        float4 hi_ = convert_float4((uint4)(q_ >> 16, q_ >> 20, q_ >> 24, q_ >> 28) & (uint4)(15u)); \
        vstore4((lo_ - MM_TOFF) * d_ + m_, 2u * w_, v);                                         \
        vstore4((hi_ - MM_TOFF) * d_ + m_, 2u * w_ + 1u, v);                                    \
    }
#elif MM_F16
#define MM_DEQ16(R, h, v)                                                                       \
    {                                                                                           \
        uint4 a_ = (R).qv[2u * (h)], b_ = (R).qv[2u * (h) + 1u];                                \
        vstore8(vload_half8(0, (const __private half *)&a_), 0, v);                             \
        vstore8(vload_half8(0, (const __private half *)&b_), 1, v);                             \
    }
#else
#if MM_FMT == 3
#define MM_GV(R, i) convert_float4(as_char4(MM_G(R, i)))
#elif MM_FMT == 8
#define MM_GV(R, i) (ub4(MM_G(R, i)) - MM_GOFF)
#else
#define MM_GV(R, i) (ub4(MM_G(R, i)) - MM_GOFF)
#endif
#if MM_FMT == 8
#define MM_GS(R, i) ((i) < 4u ? (R).s0 : (R).s1)
#else
#define MM_GS(R, i) ((R).d)
#endif
#define MM_DEQ16(R, h, v)                                                                       \
    for (uint g_ = 0; g_ < 4u; ++g_) {                                                          \
        uint i_ = 4u * (h) + g_;                                                                \
        vstore4(MM_GV(R, i_) * MM_GS(R, i_) + MM_M(R), g_, v);                                  \
    }
#endif
#if MM_FMT == 8
#undef MM_M
#define MM_M(R) 0.0f
#endif

// Float index of activation value v (a multiple of 4, unit order) of unit kt.
#if MM_T
#define MM_XK(kt, v) (8u * ((kt) + ((v) >> 3) * nb) + ((v) & 7u))
#else
#define MM_XK(kt, v) (32u * (kt) + (v))
#endif

#define MM_GEMM(NAME, MT)                                                                       \
    __kernel __attribute__((reqd_work_group_size(16, 16, 1))) void NAME(                        \
        __global const uint4 *w0, MM_W1T *w1, __global const float *x, uint ldx,               \
        __global const float *g, float eps, uint M, uint N, uint K, uint wrow0, uint wstride,   \
        uint NORM, EPI_PARAMS) {                                                                \
        __local float4 xs4[8u * (MT)];                                                          \
        __local float4 ws4[32u * 32u];                                                          \
        __local float *xs = (__local float *)xs4, *ws = (__local float *)ws4;                   \
        uint tx = get_local_id(0), ty = get_local_id(1), lid = ty * 16u + tx;                   \
        uint m0 = (uint)get_group_id(1) * (MT), n0 = (uint)get_group_id(0) * 128u;              \
        uint nb = K >> 5;                                                                       \
        /* W loader: row lr, half lh; X loader: row lm, values xv0 .. xv0 + VP (unit order) */ \
        uint lr = lid & 127u, lh = lid >> 7;                                                    \
        uint pr = wrow0 + min(n0 + lr, N - 1u) * wstride;                                       \
        const uint VP = (MT) / 8u;                                                              \
        uint lm = lid % (MT), xv0 = (lid / (MT)) * VP;                                          \
        __global const float *xr = x + (size_t)min(m0 + lm, M - 1u) * ldx;                      \
        float4 acc0[(MT) / 16u], acc1[(MT) / 16u];                                              \
        for (uint i = 0; i < (MT) / 16u; ++i) {                                                 \
            acc0[i] = (float4)(0.0f);                                                           \
            acc1[i] = (float4)(0.0f);                                                           \
        }                                                                                       \
        float ss = 0.0f;                                                                        \
        struct { MM_RAW } rw;                                                                   \
        float4 xq[(MT) / 32u];                                                                  \
        MM_LOAD(rw, pr, 0u)                                                                     \
        for (uint i = 0; i < VP / 4u; ++i) xq[i] = vload4(0, xr + MM_XK(0u, xv0 + 4u * i));     \
        for (uint kt = 0; kt < nb; ++kt) {                                                      \
            float wv[16];                                                                       \
            MM_DEQ16(rw, lh, wv)                                                                \
            for (uint j = 0; j < 16u; ++j) ws[(16u * lh + j) * 128u + lr] = wv[j];              \
            for (uint i = 0; i < VP / 4u; ++i) {                                                \
                float4 a = xq[i];                                                               \
                if (NORM) {                                                                     \
                    ss += dot(a, a);                                                            \
                    a *= vload4(0, g + MM_XK(kt, xv0 + 4u * i));                                \
                }                                                                               \
                uint v = xv0 + 4u * i;                                                          \
                xs[v * (MT) + lm] = a.x;                                                        \
                xs[(v + 1u) * (MT) + lm] = a.y;                                                 \
                xs[(v + 2u) * (MT) + lm] = a.z;                                                 \
                xs[(v + 3u) * (MT) + lm] = a.w;                                                 \
            }                                                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
            if (kt + 1u < nb) {                                                                 \
                MM_LOAD(rw, pr, kt + 1u)                                                        \
                for (uint i = 0; i < VP / 4u; ++i)                                              \
                    xq[i] = vload4(0, xr + MM_XK(kt + 1u, xv0 + 4u * i));                       \
            }                                                                                   \
            for (uint kk = 0; kk < 32u; ++kk) {                                                 \
                float4 b0 = ws4[kk * 32u + tx];                                                 \
                float4 b1 = ws4[kk * 32u + 16u + tx];                                           \
                for (uint i = 0; i < (MT) / 64u; ++i) {                                         \
                    float4 a = xs4[kk * ((MT) / 4u) + 16u * i + ty];                            \
                    acc0[4u * i] = fma((float4)(a.x), b0, acc0[4u * i]);                        \
                    acc0[4u * i + 1u] = fma((float4)(a.y), b0, acc0[4u * i + 1u]);              \
                    acc0[4u * i + 2u] = fma((float4)(a.z), b0, acc0[4u * i + 2u]);              \
                    acc0[4u * i + 3u] = fma((float4)(a.w), b0, acc0[4u * i + 3u]);              \
                    acc1[4u * i] = fma((float4)(a.x), b1, acc1[4u * i]);                        \
                    acc1[4u * i + 1u] = fma((float4)(a.y), b1, acc1[4u * i + 1u]);              \
                    acc1[4u * i + 2u] = fma((float4)(a.z), b1, acc1[4u * i + 2u]);              \
                    acc1[4u * i + 3u] = fma((float4)(a.w), b1, acc1[4u * i + 3u]);              \
                }                                                                               \
            }                                                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        }                                                                                       \
        if (NORM) {                                                                             \
            xs[(lid / (MT)) * (MT) + lm] = ss;                                                  \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        }                                                                                       \
        for (uint i = 0; i < (MT) / 16u; ++i) {                                                 \
            uint ml = 64u * (i >> 2) + 4u * ty + (i & 3u);                                      \
            uint m = m0 + ml;                                                                   \
            float inv = 1.0f;                                                                   \
            if (NORM) {                                                                         \
                float tot = 0.0f;                                                               \
                for (uint p = 0; p < 256u / (MT); ++p) tot += xs[p * (MT) + ml];                \
                inv = rsqrt(tot / (float)K + eps);                                              \
            }                                                                                   \
            float4 v0 = acc0[i] * inv, v1 = acc1[i] * inv;                                      \
            uint c = n0 + 4u * tx;                                                              \
            if (m < M) {                                                                        \
                if (c < N) epi_pair(m, c, N, v0.x, v0.y, EPI_ARGS);                             \
                if (c + 2u < N) epi_pair(m, c + 2u, N, v0.z, v0.w, EPI_ARGS);                   \
                if (c + 64u < N) epi_pair(m, c + 64u, N, v1.x, v1.y, EPI_ARGS);                 \
                if (c + 66u < N) epi_pair(m, c + 66u, N, v1.z, v1.w, EPI_ARGS);                 \
            }                                                                                   \
        }                                                                                       \
    }

// MM_NO_GEMM: the GEMVs alone (examples/program_builds.rs times what each part costs the
// compiler; the decoder always builds both).
#ifndef MM_NO_GEMM
MM_GEMM(mm_gemm_m128, 128u)
MM_GEMM(mm_gemm_m64, 64u)
#endif
