/* hetero-ggml: the narrow C ABI between the ggml backend shim (shim/ggml-hetero.cpp) and the
 * Rust crate (src/ffi.rs) that repacks weights for hetero-sme and runs MUL_MAT on its thread
 * pool. Statuses: 0 = OK; on failure hetero_ggml_last_error() holds this thread's message.
 * Nothing here unwinds into C: a panic inside is reported as HETERO_GGML_PANIC. */
#ifndef HETERO_GGML_H
#define HETERO_GGML_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HETERO_GGML_ABI_VERSION 1u

#define HETERO_GGML_OK 0
#define HETERO_GGML_UNSUPPORTED 1 /* a type this backend does not run */
#define HETERO_GGML_INVALID 2     /* null, length, alignment, shape, foreign blob */
#define HETERO_GGML_FAILED 3      /* the thread pool or a kernel failed */
#define HETERO_GGML_PANIC 4       /* a panic caught at the boundary (a bug) */

/* Packed weights start 64-byte aligned (a 64-byte header, then the payload). */
#define HETERO_GGML_ALIGN 64u

typedef struct hetero_ggml_ctx hetero_ggml_ctx;

uint32_t hetero_ggml_abi_version(void);
/* This thread's last failure message; valid until its next failing call. */
const char *hetero_ggml_last_error(void);
/* The kernels this CPU runs, e.g. "int8 avx512-vnni, fp16 avx512" (static). */
const char *hetero_ggml_kernels(void);

/* Bytes of the packed form of n rows of k elements of ggml type `ggml_type` (the GGUF/ggml type
 * code); HETERO_GGML_UNSUPPORTED for a type not run here, HETERO_GGML_INVALID for a bad shape. */
int32_t hetero_ggml_weight_size(uint32_t ggml_type, uint64_t n, uint64_t k, size_t *size);
/* GGUF bytes (n rows of k elements) -> the packed form in dst (64-byte aligned, dst_len >= size). */
int32_t hetero_ggml_weight_pack(uint32_t ggml_type, uint64_t n, uint64_t k, const void *src,
                                size_t src_len, void *dst, size_t dst_len);
/* Bytes offset .. offset+dst_len of the GGUF tensor a packed blob came from (exact). */
int32_t hetero_ggml_weight_unpack(const void *blob, size_t blob_len, size_t offset, void *dst,
                                  size_t dst_len);

/* A compute context (hetero-sme's ThreadPool: the caller + threads-1 workers, and scratch). One
 * thread at a time per context. */
int32_t hetero_ggml_ctx_new(uint32_t threads, hetero_ggml_ctx **out);
void hetero_ggml_ctx_free(hetero_ggml_ctx *ctx);
int32_t hetero_ggml_ctx_set_threads(hetero_ggml_ctx *ctx, uint32_t threads);

/* y[m x n] = x[m x k] . W^T for the packed weight `blob`; rows x_row_bytes / y_row_bytes apart.
 * k must equal the blob's K. On error y is untouched. */
int32_t hetero_ggml_mul_mat(hetero_ggml_ctx *ctx, const void *blob, size_t blob_len, uint64_t k,
                            const float *x, uint64_t m, size_t x_row_bytes, float *y,
                            size_t y_row_bytes);

/* One thread's share of a team job (called by the team, once per thread). */
typedef void (*hetero_ggml_work)(const void *job, uint32_t thread);
/* Runs work(job, i) once on each of `threads` threads (i in 0..threads, concurrently) and returns
 * when every call has returned; e.g. an OpenMP parallel region. */
typedef void (*hetero_ggml_team)(void *user, uint32_t threads, hetero_ggml_work work, const void *job);

/* As hetero_ggml_mul_mat, on the caller's threads: team(user, t, work, job) with t <= threads
 * (fewer for a small decode matmul). Range work stealing: a thread that never starts only costs
 * time. For an engine that owns a team of threads already (ggml's OpenMP team). */
int32_t hetero_ggml_mul_mat_team(hetero_ggml_ctx *ctx, const void *blob, size_t blob_len,
                                 uint64_t k, const float *x, uint64_t m, size_t x_row_bytes,
                                 float *y, size_t y_row_bytes, uint32_t threads,
                                 hetero_ggml_team team, void *user);

#ifdef __cplusplus
}
#endif

#endif
