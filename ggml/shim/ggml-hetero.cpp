// hetero-ggml: a ggml backend that llama.cpp loads at run time (GGML_BACKEND_PATH) and that runs
// MUL_MAT on hetero-sme. This file only speaks ggml's backend interface; the work (repacking,
// activation quantization, the kernels, the thread pool) is behind the narrow C ABI of
// include/hetero_ggml.h, implemented in Rust (src/ffi.rs).
//
// It is compiled against the ggml headers of the llama.cpp it is loaded into (scripts/ggml.sh
// build, headers from the cached llama.cpp source), so every struct layout below is ggml's own.
// At load time it refuses a process whose libggml-base is another version or commit than the
// headers it was built with (ggml_backend_init returns NULL and says why).
//
// What it runs: MUL_MAT whose weight (src0) is a 2-D, contiguous F16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K or Q6_K tensor in this backend's buffer type (repacked there once, at upload)
// times F32 activations. Everything else is refused in supports_op, so the weights stay in the
// CPU backend's buffers and the CPU backend runs the op.

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-version.h"
#include "ggml.h"
#include "hetero_ggml.h"

#include <omp.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

// hetero-sme's GgmlType uses the GGUF type codes, which are ggml's enum values.
static_assert(GGML_TYPE_F16 == 1 && GGML_TYPE_Q4_0 == 2 && GGML_TYPE_Q4_1 == 3 &&
                  GGML_TYPE_Q5_0 == 6 && GGML_TYPE_Q5_1 == 7 && GGML_TYPE_Q8_0 == 8 &&
                  GGML_TYPE_Q4_K == 12 && GGML_TYPE_Q5_K == 13 && GGML_TYPE_Q6_K == 14,
              "ggml type codes differ from GGUF's");

// Test builds only: pretend another backend API version (the loader must refuse it).
#ifdef HETERO_GGML_TEST_API_VERSION
#define HETERO_API_VERSION HETERO_GGML_TEST_API_VERSION
#else
#define HETERO_API_VERSION GGML_BACKEND_API_VERSION
#endif
// Test builds only: pretend the headers were another ggml version (ggml_backend_init refuses).
#ifdef HETERO_GGML_TEST_BUILT_FOR
#define HETERO_BUILT_FOR_VERSION HETERO_GGML_TEST_BUILT_FOR
#else
#define HETERO_BUILT_FOR_VERSION GGML_VERSION
#endif

#define HETERO_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const char *const NAME = "HETERO";

// Through ggml's logger (llama.cpp's log callback), else stderr.
void hlog(enum ggml_log_level level, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ggml_log_callback cb = nullptr;
    void *ud = nullptr;
    ggml_log_get(&cb, &ud);
    if (cb) {
        cb(level, buf, ud);
    } else {
        fputs(buf, stderr);
    }
}

// ---- which tensors are repacked ---------------------------------------------------------------

// The packed size of `t` if it is a weight this backend repacks (2-D, contiguous, not a view, a
// type and shape the Rust side runs), else 0.
size_t packed_size(const ggml_tensor *t) {
    if (t->view_src != nullptr || t->ne[2] != 1 || t->ne[3] != 1 || !ggml_is_contiguous(t)) {
        return 0;
    }
    size_t size = 0;
    if (hetero_ggml_weight_size((uint32_t)t->type, (uint64_t)t->ne[1], (uint64_t)t->ne[0],
                                &size) != HETERO_GGML_OK) {
        return 0;
    }
    return size;
}

// ---- buffer -----------------------------------------------------------------------------------

struct buffer_ctx {
    void *base;
    size_t size;
};

void buffer_free(ggml_backend_buffer_t buffer) {
    auto *c = (buffer_ctx *)buffer->context;
    free(c->base);
    delete c;
}

void *buffer_get_base(ggml_backend_buffer_t buffer) { return ((buffer_ctx *)buffer->context)->base; }

[[noreturn]] void refuse(const ggml_tensor *t, const char *what) {
    ggml_abort(__FILE__, __LINE__, "HETERO: %s (tensor %s, type %s)", what, t->name,
               ggml_type_name(t->type));
}

void buffer_memset_tensor(ggml_backend_buffer_t, ggml_tensor *t, uint8_t value, size_t offset,
                          size_t size) {
    if (packed_size(t) || (t->view_src && packed_size(t->view_src))) {
        refuse(t, "memset of a repacked weight is not supported");
    }
    memset((char *)t->data + offset, value, size);
}

void buffer_set_tensor(ggml_backend_buffer_t, ggml_tensor *t, const void *data, size_t offset,
                       size_t size) {
    if (t->view_src && packed_size(t->view_src)) {
        refuse(t, "writes into a view of a repacked weight are not supported");
    }
    const size_t psize = packed_size(t);
    if (!psize) {
        memcpy((char *)t->data + offset, data, size);
        return;
    }
    if (offset != 0 || size != ggml_nbytes(t)) {
        refuse(t, "a repacked weight must be uploaded whole (offset 0, all its bytes)");
    }
    if (hetero_ggml_weight_pack((uint32_t)t->type, (uint64_t)t->ne[1], (uint64_t)t->ne[0], data,
                                size, t->data, psize) != HETERO_GGML_OK) {
        ggml_abort(__FILE__, __LINE__, "HETERO: repacking %s failed: %s", t->name,
                   hetero_ggml_last_error());
    }
}

void buffer_get_tensor(ggml_backend_buffer_t, const ggml_tensor *t, void *data, size_t offset,
                       size_t size) {
    // A repacked weight (or a view of one) reads back as the GGUF bytes it was packed from.
    const ggml_tensor *src = t->view_src ? t->view_src : t;
    const size_t psize = packed_size(src);
    if (!psize) {
        memcpy(data, (const char *)t->data + offset, size);
        return;
    }
    const size_t at = offset + (t->view_src ? t->view_offs : 0);
    if (hetero_ggml_weight_unpack(src->data, psize, at, data, size) != HETERO_GGML_OK) {
        ggml_abort(__FILE__, __LINE__, "HETERO: reading back %s failed: %s", t->name,
                   hetero_ggml_last_error());
    }
}

void buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    auto *c = (buffer_ctx *)buffer->context;
    memset(c->base, value, c->size);
}

const ggml_backend_buffer_i buffer_iface = {
    /* .free_buffer   = */ buffer_free,
    /* .get_base      = */ buffer_get_base,
    /* .init_tensor   = */ nullptr,
    /* .memset_tensor = */ buffer_memset_tensor,
    /* .set_tensor    = */ buffer_set_tensor,
    /* .get_tensor    = */ buffer_get_tensor,
    /* .set_tensor_2d = */ nullptr,
    /* .get_tensor_2d = */ nullptr,
    /* .cpy_tensor    = */ nullptr,
    /* .clear         = */ buffer_clear,
    /* .reset         = */ nullptr,
};

// ---- buffer type ------------------------------------------------------------------------------

const char *buft_get_name(ggml_backend_buffer_type_t) { return NAME; }

ggml_backend_buffer_t buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    const size_t rounded = (size + HETERO_GGML_ALIGN - 1) / HETERO_GGML_ALIGN * HETERO_GGML_ALIGN;
    void *base = aligned_alloc(HETERO_GGML_ALIGN, rounded ? rounded : HETERO_GGML_ALIGN);
    if (!base) {
        hlog(GGML_LOG_LEVEL_ERROR, "HETERO: failed to allocate a buffer of %zu bytes\n", size);
        return nullptr;
    }
    auto *c = new (std::nothrow) buffer_ctx{base, size};
    if (!c) {
        free(base);
        return nullptr;
    }
    return ggml_backend_buffer_init(buft, buffer_iface, c, size);
}

size_t buft_get_alignment(ggml_backend_buffer_type_t) { return HETERO_GGML_ALIGN; }

size_t buft_get_alloc_size(ggml_backend_buffer_type_t, const ggml_tensor *t) {
    const size_t p = packed_size(t);
    return p ? p : ggml_nbytes(t);
}

bool buft_is_host(ggml_backend_buffer_type_t) {
    // Not host: repacked weights are not in ggml's layout, so the CPU backend must never read
    // this buffer directly; the scheduler copies our outputs out through get_tensor instead.
    return false;
}

ggml_backend_buffer_type buft = {
    /* .iface   = */ {
        /* .get_name       = */ buft_get_name,
        /* .alloc_buffer   = */ buft_alloc_buffer,
        /* .get_alignment  = */ buft_get_alignment,
        /* .get_max_size   = */ nullptr,
        /* .get_alloc_size = */ buft_get_alloc_size,
        /* .is_host        = */ buft_is_host,
    },
    /* .device  = */ nullptr, // set in ggml_backend_init
    /* .context = */ nullptr,
};

// ---- backend (stream) -------------------------------------------------------------------------

// Whose threads run the matmuls. With a CPU backend built with OpenMP (llama.cpp's default),
// its OpenMP team: those threads spin between its parallel regions, so a second pool on the
// same cores would fight them (on 2 cores: 3 runnable threads, a descheduled worker holding up
// every join). Otherwise hetero-sme's ThreadPool. HETERO_GGML_THREADS=pool|openmp overrides.
enum class threads_mode { pool, openmp };

struct backend_ctx {
    hetero_ggml_ctx *rs;
    threads_mode mode;
    int n_threads;
};

// Whether ggml's CPU backend reports OpenMP among its features.
bool cpu_uses_openmp() {
    ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
    if (!cpu) {
        return false;
    }
    auto get = (ggml_backend_get_features_t)ggml_backend_reg_get_proc_address(
        cpu, "ggml_backend_get_features");
    for (ggml_backend_feature *f = get ? get(cpu) : nullptr; f && f->name; f++) {
        if (strcmp(f->name, "OPENMP") == 0) {
            return strcmp(f->value, "0") != 0;
        }
    }
    return false;
}

threads_mode pick_mode() {
    const char *env = getenv("HETERO_GGML_THREADS");
    if (env && strcmp(env, "pool") == 0) {
        return threads_mode::pool;
    }
    if (env && strcmp(env, "openmp") == 0) {
        return threads_mode::openmp;
    }
    return cpu_uses_openmp() ? threads_mode::openmp : threads_mode::pool;
}

// The OpenMP team as hetero-ggml's team callback (see hetero_ggml_mul_mat_team).
void omp_team(void *, uint32_t threads, hetero_ggml_work work, const void *job) {
#pragma omp parallel num_threads((int)threads)
    work(job, (uint32_t)omp_get_thread_num());
}

const char *backend_get_name(ggml_backend_t) { return NAME; }

void backend_free(ggml_backend_t backend) {
    auto *c = (backend_ctx *)backend->context;
    hetero_ggml_ctx_free(c->rs);
    delete c;
    delete backend;
}

bool rows_uniform(const ggml_tensor *t) {
    return (t->ne[2] == 1 || t->nb[2] == t->ne[1] * t->nb[1]) &&
           (t->ne[3] == 1 || t->nb[3] == t->ne[2] * t->nb[2]);
}

enum ggml_status compute_mul_mat(backend_ctx *c, ggml_tensor *dst) {
    const ggml_tensor *w = dst->src[0];
    const ggml_tensor *x = dst->src[1];
    const size_t psize = packed_size(w);
    const uint64_t k = (uint64_t)w->ne[0];
    auto call = [&](const char *xp, uint64_t m, char *yp) {
        if (c->mode == threads_mode::openmp) {
            return hetero_ggml_mul_mat_team(c->rs, w->data, psize, k, (const float *)xp, m,
                                            x->nb[1], (float *)yp, dst->nb[1],
                                            (uint32_t)c->n_threads, omp_team, nullptr);
        }
        return hetero_ggml_mul_mat(c->rs, w->data, psize, k, (const float *)xp, m, x->nb[1],
                                   (float *)yp, dst->nb[1]);
    };
    int32_t st = HETERO_GGML_OK;
    if (rows_uniform(x) && rows_uniform(dst)) {
        // Every activation row is independent (a 2-D weight): one call over all of them.
        st = call((const char *)x->data, (uint64_t)(x->ne[1] * x->ne[2] * x->ne[3]),
                  (char *)dst->data);
    } else {
        for (int64_t i3 = 0; i3 < x->ne[3] && st == HETERO_GGML_OK; i3++) {
            for (int64_t i2 = 0; i2 < x->ne[2] && st == HETERO_GGML_OK; i2++) {
                st = call((const char *)x->data + i2 * x->nb[2] + i3 * x->nb[3],
                          (uint64_t)x->ne[1],
                          (char *)dst->data + i2 * dst->nb[2] + i3 * dst->nb[3]);
            }
        }
    }
    if (st != HETERO_GGML_OK) {
        hlog(GGML_LOG_LEVEL_ERROR, "HETERO: MUL_MAT %s failed: %s\n", dst->name,
             hetero_ggml_last_error());
        return GGML_STATUS_FAILED;
    }
    return GGML_STATUS_SUCCESS;
}

enum ggml_status backend_graph_compute(ggml_backend_t backend, ggml_cgraph *cgraph) {
    auto *c = (backend_ctx *)backend->context;
    for (int i = 0; i < ggml_graph_n_nodes(cgraph); i++) {
        ggml_tensor *node = ggml_graph_node(cgraph, i);
        if ((node->flags & GGML_TENSOR_FLAG_COMPUTE) == 0) {
            continue;
        }
        switch (node->op) {
            case GGML_OP_NONE:
            case GGML_OP_RESHAPE:
            case GGML_OP_VIEW:
            case GGML_OP_PERMUTE:
            case GGML_OP_TRANSPOSE:
                break;
            case GGML_OP_MUL_MAT: {
                const enum ggml_status st = compute_mul_mat(c, node);
                if (st != GGML_STATUS_SUCCESS) {
                    return st;
                }
                break;
            }
            default:
                hlog(GGML_LOG_LEVEL_ERROR, "HETERO: op %s (%s) is not run by this backend\n",
                     ggml_op_name(node->op), node->name);
                return GGML_STATUS_FAILED;
        }
    }
    return GGML_STATUS_SUCCESS;
}

const ggml_backend_i backend_iface = {
    /* .get_name            = */ backend_get_name,
    /* .free                = */ backend_free,
    /* .set_tensor_async    = */ nullptr,
    /* .get_tensor_async    = */ nullptr,
    /* .set_tensor_2d_async = */ nullptr,
    /* .get_tensor_2d_async = */ nullptr,
    /* .cpy_tensor_async    = */ nullptr,
    /* .synchronize         = */ nullptr,
    /* .graph_plan_create   = */ nullptr,
    /* .graph_plan_free     = */ nullptr,
    /* .graph_plan_update   = */ nullptr,
    /* .graph_plan_compute  = */ nullptr,
    /* .graph_compute       = */ backend_graph_compute,
    /* .event_record        = */ nullptr,
    /* .event_wait          = */ nullptr,
    /* .graph_optimize      = */ nullptr,
};

ggml_guid guid = {0x68, 0x65, 0x74, 0x65, 0x72, 0x6f, 0x2d, 0x73,
                  0x6d, 0x65, 0x2d, 0x67, 0x67, 0x6d, 0x6c, 0x01};

bool is_hetero(ggml_backend_t backend) {
    return backend != nullptr && ggml_guid_matches(backend->guid, &guid);
}

void set_n_threads(ggml_backend_t backend, int n_threads) {
    if (!is_hetero(backend) || n_threads < 1) {
        return;
    }
    auto *c = (backend_ctx *)backend->context;
    c->n_threads = n_threads;
    if (c->mode == threads_mode::openmp) {
        return; // the team is OpenMP's; the pool stays at the calling thread alone
    }
    if (hetero_ggml_ctx_set_threads(c->rs, (uint32_t)n_threads) != HETERO_GGML_OK) {
        hlog(GGML_LOG_LEVEL_ERROR, "HETERO: setting %d threads failed: %s\n", n_threads,
             hetero_ggml_last_error());
    }
}

// ---- device -----------------------------------------------------------------------------------

char description[256];

const char *dev_get_name(ggml_backend_dev_t) { return NAME; }

const char *dev_get_description(ggml_backend_dev_t) { return description; }

void dev_get_memory(ggml_backend_dev_t, size_t *free_mem, size_t *total) {
    const long page = sysconf(_SC_PAGESIZE);
    const long av = sysconf(_SC_AVPHYS_PAGES);
    const long all = sysconf(_SC_PHYS_PAGES);
    *free_mem = page > 0 && av > 0 ? (size_t)page * (size_t)av : 0;
    *total = page > 0 && all > 0 ? (size_t)page * (size_t)all : 0;
}

enum ggml_backend_dev_type dev_get_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_ACCEL; }

void dev_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props *props) {
    props->name = dev_get_name(dev);
    props->description = dev_get_description(dev);
    props->type = dev_get_type(dev);
    props->device_id = nullptr;
    dev_get_memory(dev, &props->memory_free, &props->memory_total);
    // No async, no pinned host buffer, no buffers over host memory, no events, no mmap
    // loading: weights are uploaded (and repacked) through set_tensor.
    props->caps = {};
}

ggml_backend_t dev_init_backend(ggml_backend_dev_t dev, const char *) {
    const unsigned hw = std::thread::hardware_concurrency();
    const threads_mode mode = pick_mode();
    auto *c = new (std::nothrow) backend_ctx{nullptr, mode, hw ? (int)hw : 1};
    if (!c) {
        return nullptr;
    }
    // In OpenMP mode the pool is the calling thread alone (no workers started).
    const uint32_t pool = mode == threads_mode::openmp ? 1 : (uint32_t)c->n_threads;
    if (hetero_ggml_ctx_new(pool, &c->rs) != HETERO_GGML_OK) {
        hlog(GGML_LOG_LEVEL_ERROR, "HETERO: backend init failed: %s\n", hetero_ggml_last_error());
        delete c;
        return nullptr;
    }
    auto *b = new (std::nothrow) ggml_backend{&guid, backend_iface, dev, c};
    if (!b) {
        hetero_ggml_ctx_free(c->rs);
        delete c;
    }
    return b;
}

ggml_backend_buffer_type_t dev_get_buffer_type(ggml_backend_dev_t) { return &buft; }

bool dev_supports_op(ggml_backend_dev_t, const ggml_tensor *op) {
    switch (op->op) {
        case GGML_OP_NONE:
        case GGML_OP_RESHAPE:
        case GGML_OP_VIEW:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE:
            return true; // no computation (graph_compute skips them)
        case GGML_OP_MUL_MAT:
            break;
        default:
            return false;
    }
    const ggml_tensor *w = op->src[0];
    const ggml_tensor *x = op->src[1];
    // The weight must be (or become: no buffer yet) one of ours, repacked at upload.
    if (w->buffer != nullptr && w->buffer->buft != &buft) {
        return false;
    }
    if (!packed_size(w)) {
        return false;
    }
    return x->type == GGML_TYPE_F32 && x->ne[0] == w->ne[0] && x->nb[0] == sizeof(float) &&
           op->type == GGML_TYPE_F32 && op->nb[0] == sizeof(float);
}

bool dev_supports_buft(ggml_backend_dev_t, ggml_backend_buffer_type_t b) {
    // Ours, and any host buffer (the activations the CPU backend leaves in its buffers).
    return b == &buft || ggml_backend_buft_is_host(b);
}

const ggml_backend_device_i device_iface = {
    /* .get_name             = */ dev_get_name,
    /* .get_description      = */ dev_get_description,
    /* .get_memory           = */ dev_get_memory,
    /* .get_type             = */ dev_get_type,
    /* .get_props            = */ dev_get_props,
    /* .init_backend         = */ dev_init_backend,
    /* .get_buffer_type      = */ dev_get_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ nullptr,
    /* .supports_op          = */ dev_supports_op,
    /* .supports_buft        = */ dev_supports_buft,
    /* .offload_op           = */ nullptr,
    /* .event_new            = */ nullptr,
    /* .event_free           = */ nullptr,
    /* .event_synchronize    = */ nullptr,
};

// ---- registry ---------------------------------------------------------------------------------

ggml_backend_device device = {device_iface, nullptr, nullptr};

const char *reg_get_name(ggml_backend_reg_t) { return NAME; }

size_t reg_get_device_count(ggml_backend_reg_t) { return 1; }

ggml_backend_dev_t reg_get_device(ggml_backend_reg_t, size_t index) {
    return index == 0 ? &device : nullptr;
}

void *reg_get_proc_address(ggml_backend_reg_t, const char *name) {
    if (strcmp(name, "ggml_backend_set_n_threads") == 0) {
        return (void *)set_n_threads;
    }
    return nullptr;
}

const ggml_backend_reg_i reg_iface = {
    /* .get_name         = */ reg_get_name,
    /* .get_device_count = */ reg_get_device_count,
    /* .get_device       = */ reg_get_device,
    /* .get_proc_address = */ reg_get_proc_address,
};

ggml_backend_reg reg = {HETERO_API_VERSION, reg_iface, nullptr};

} // namespace

// The loader's entry point (ggml_backend_load / GGML_BACKEND_PATH).
HETERO_EXPORT ggml_backend_reg_t ggml_backend_init(void) {
    const char *running = ggml_version();
    const char *commit = ggml_commit();
    if (strcmp(running, HETERO_BUILT_FOR_VERSION) != 0 || strcmp(commit, GGML_COMMIT) != 0) {
        hlog(GGML_LOG_LEVEL_ERROR,
             "HETERO: this backend was built against ggml %s (commit %s) but the process runs "
             "ggml %s (commit %s); not loading it. Rebuild it against this llama.cpp "
             "(scripts/ggml.sh build, with HETERO_LLAMA_CPP_SRC and HETERO_LLAMA_CPP_BUILD naming it).\n",
             HETERO_BUILT_FOR_VERSION, GGML_COMMIT, running, commit);
        return nullptr;
    }
    if (hetero_ggml_abi_version() != HETERO_GGML_ABI_VERSION) {
        hlog(GGML_LOG_LEVEL_ERROR,
             "HETERO: the shim expects hetero-ggml ABI %u, the linked library has %u; rebuild\n",
             HETERO_GGML_ABI_VERSION, hetero_ggml_abi_version());
        return nullptr;
    }
    snprintf(description, sizeof description, "hetero-sme (%s; threads: %s)", hetero_ggml_kernels(),
             pick_mode() == threads_mode::openmp ? "the CPU backend's OpenMP team"
                                                 : "hetero-sme's ThreadPool");
    buft.device = &device;
    device.reg = &reg;
    return &reg;
}

// Any CPU runs it (hetero-sme falls back to portable kernels), so it always scores.
HETERO_EXPORT int ggml_backend_score(void) { return 1; }
