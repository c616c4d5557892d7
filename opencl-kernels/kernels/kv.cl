// The KV cache's storage, shared by every program that writes or reads it (the decoder's
// matmul epilogues and decode blocks, the persistent step, the attention kernels). Built with
// -DKV_TYPE=0 (f32), 1 (f16, the decoder's default) or 2 (q8_0: blocks of 32 values, an
// f16 scale and 32 int8, as GGUF's Q8_0; rows are whole blocks). A cache is `[position][kvd]`
// per layer and per K or V; element (j, c) is at index j * kvd + c.
//
// Writers: the Q/K/V epilogue stores each k/v pair through kv_put2 into KV_ET memory: the
// cache itself for f32 and f16 (rounded to nearest even), an f32 staging row per chunk row for
// q8_0 (a block's scale needs all 32 values, which no epilogue work-item holds; attention.cl's
// kv_store_q8 quantizes the staged rows into the cache). kv_erow says which row a position
// writes.

// No default: a program that stores k/v (a matmul epilogue) must say which cache it writes, or
// an f32 store into an f16 cache would pass silently.
#ifndef KV_TYPE
#error "build with -DKV_TYPE=0 (f32), 1 (f16) or 2 (q8_0): the KV cache's storage"
#endif

#if KV_TYPE == 0
#define KV_T float
#define KV_ET float
#elif KV_TYPE == 1
#define KV_T half
#define KV_ET half
#elif KV_TYPE == 2
#define KV_T uchar
#define KV_ET float
#else
#error "KV_TYPE must be 0 (f32), 1 (f16) or 2 (q8_0)"
#endif

// The row the epilogue writes for position pos, chunk row m: the cache row (f32, f16) or the
// staging row (q8_0).
#if KV_TYPE == 2
#define kv_erow(pos, m) (m)
#else
#define kv_erow(pos, m) (pos)
#endif

// Two adjacent values at element index i (even) of an epilogue target.
inline void kv_put2(__global KV_ET *p, size_t i, float a, float b) {
#if KV_TYPE == 1
    vstore_half_rte(a, i, p);
    vstore_half_rte(b, i + 1u, p);
#else
    p[i] = a;
    p[i + 1u] = b;
#endif
}

// One value at element index i of a cache (decode block A's append; never q8_0, which the
// host refuses there).
inline void kv_put1(__global KV_T *p, size_t i, float a) {
#if KV_TYPE == 1
    vstore_half_rte(a, i, p);
#elif KV_TYPE == 0
    p[i] = a;
#endif
}

// The value at element index i of a cache.
inline float kv_ld(__global const KV_T *p, size_t i) {
#if KV_TYPE == 0
    return p[i];
#elif KV_TYPE == 1
    return vload_half(i, p);
#else
    __global const uchar *bp = p + (i >> 5) * 34u;
    return (float)((__global const char *)bp)[2u + (i & 31u)] *
           vload_half(0, (__global const half *)bp);
#endif
}

// The four values at element index i (a multiple of 4) of a cache.
inline float4 kv_ld4(__global const KV_T *p, size_t i) {
#if KV_TYPE == 0
    return vload4(0, p + i);
#elif KV_TYPE == 1
    return vload_half4(0, p + i);
#else
    __global const uchar *bp = p + (i >> 5) * 34u;
    char4 q = vload4(0, (__global const char *)bp + 2u + (i & 31u));
    return convert_float4(q) * vload_half(0, (__global const half *)bp);
#endif
}

// An f16 bit pattern as f32 (for volatile reads, which vload_half cannot take): normals,
// subnormals, zeros, infinities and NaNs.
inline float kv_half_bits(uint h) {
    uint s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    if (e == 0u) {
        float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24 */
        return s != 0u ? -v : v;
    }
    if (e == 31u) return as_float(s | 0x7f800000u | (m << 13));
    return as_float(s | ((e + 112u) << 23) | (m << 13));
}

// kv_ld through a volatile pointer (the persistent step reads rows other work-groups of the
// same launch wrote).
inline float kv_ldv(volatile __global const KV_T *p, size_t i) {
#if KV_TYPE == 0
    return p[i];
#elif KV_TYPE == 1
    return kv_half_bits(((volatile __global const ushort *)p)[i]);
#else
    volatile __global const uchar *bp = p + (i >> 5) * 34u;
    uint sb = (uint)bp[0] | ((uint)bp[1] << 8);
    return (float)(char)bp[2u + (i & 31u)] * kv_half_bits(sb);
#endif
}
