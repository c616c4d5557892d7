// The ggml stage's placement test: a MUL_MAT whose weight type or shape HETERO does not run is
// left to the CPU backend, and one it runs is computed by HETERO, when weights are placed the
// way llama.cpp places them and the graph runs under ggml's scheduler.
//
// For each case: the weight goes into the first buffer type of [HETERO, CPU] whose device
// accepts the MUL_MAT on it (llama.cpp's weight_buft_supported: a zero-size buffer of the type
// on the weight, then supports_op), the activations into a CPU buffer; the graph runs through
// ggml_backend_sched over [HETERO, CPU]. It checks where the weight landed, which backend ran the
// node, and the output against the same weight bytes run by the CPU backend alone (bit-identical
// where the CPU ran it; NMSE <= 5e-4, test-backend-ops' MUL_MAT bound, where HETERO ran it); and
// that a HETERO weight reads back (get_tensor) as the bytes uploaded.
//
//   fallback            # with GGML_BACKEND_PATH naming libggml-hetero.so; exit 0 = all passed

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

struct Case {
    ggml_type type;
    int64_t k, n, batch; // weight [k, n, batch]
    bool hetero;         // expected: placed in and run by HETERO
    const char *why;
};

static std::vector<uint8_t> weight_bytes(ggml_type t, int64_t k, int64_t rows, std::mt19937 &rng) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> f((size_t)(k * rows));
    for (auto &v : f) v = u(rng);
    std::vector<uint8_t> out(ggml_row_size(t, k) * (size_t)rows);
    if (t == GGML_TYPE_F32) {
        memcpy(out.data(), f.data(), out.size());
    } else if (t == GGML_TYPE_F16) {
        ggml_fp32_to_fp16_row(f.data(), (ggml_fp16_t *)out.data(), (int64_t)f.size());
    } else if (t == GGML_TYPE_BF16) {
        ggml_fp32_to_bf16_row(f.data(), (ggml_bf16_t *)out.data(), (int64_t)f.size());
    } else {
        ggml_quantize_chunk(t, f.data(), out.data(), 0, rows, k, nullptr);
    }
    return out;
}

int main() {
    ggml_backend_load_all();
    ggml_backend_dev_t hdev = ggml_backend_dev_by_name("HETERO");
    ggml_backend_dev_t cdev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!hdev || !cdev) {
        fprintf(stderr, "fallback: %s backend not loaded (set GGML_BACKEND_PATH)\n",
                hdev ? "CPU" : "HETERO");
        return 1;
    }
    ggml_backend_t hb = ggml_backend_dev_init(hdev, nullptr);
    ggml_backend_t cb = ggml_backend_dev_init(cdev, nullptr);
    ggml_backend_buffer_type_t hbuft = ggml_backend_dev_buffer_type(hdev);
    ggml_backend_buffer_type_t cbuft = ggml_backend_dev_buffer_type(cdev);

    const Case cases[] = {
        {GGML_TYPE_Q4_0, 256, 64, 1, true, "a type HETERO runs"},
        {GGML_TYPE_Q4_K, 512, 48, 1, true, "a K-quant HETERO runs"},
        {GGML_TYPE_F16, 100, 70, 1, true, "F16 at K off any block"},
        {GGML_TYPE_Q3_K, 256, 64, 1, false, "Q3_K: not a type HETERO runs"},
        {GGML_TYPE_Q2_K, 256, 64, 1, false, "Q2_K: not a type HETERO runs"},
        {GGML_TYPE_IQ4_NL, 256, 64, 1, false, "IQ4_NL: not a type HETERO runs"},
        {GGML_TYPE_BF16, 256, 64, 1, false, "BF16: not a type HETERO runs"},
        {GGML_TYPE_F32, 256, 64, 1, false, "F32: not a type HETERO runs"},
        {GGML_TYPE_Q4_0, 256, 64, 3, false, "a 3-D (batched) weight: not a shape HETERO runs"},
    };
    const int64_t m = 7;
    std::mt19937 rng(42);
    int failed = 0;
    for (const Case &c : cases) {
        ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
        ggml_context *cw = ggml_init(ip), *ca = ggml_init(ip), *cg = ggml_init(ip);
        ggml_tensor *w = ggml_new_tensor_3d(cw, c.type, c.k, c.n, c.batch);
        ggml_tensor *x = ggml_new_tensor_3d(ca, GGML_TYPE_F32, c.k, m, c.batch);
        ggml_tensor *out = ggml_mul_mat(cg, w, x);

        // llama.cpp's placement.
        ggml_backend_buffer_type_t chosen = nullptr;
        for (auto [dev, buft] : {std::pair{hdev, hbuft}, std::pair{cdev, cbuft}}) {
            ggml_backend_buffer_t dummy = ggml_backend_buft_alloc_buffer(buft, 0);
            w->buffer = dummy;
            const bool ok = ggml_backend_dev_supports_op(dev, out);
            w->buffer = nullptr;
            ggml_backend_buffer_free(dummy);
            if (ok) {
                chosen = buft;
                break;
            }
        }
        if (!chosen) {
            fprintf(stderr, "fallback: no backend takes %s\n", ggml_type_name(c.type));
            return 1;
        }
        ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(cw, chosen);
        ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        ggml_backend_buffer_t abuf = ggml_backend_alloc_ctx_tensors_from_buft(ca, cbuft);
        const auto wb = weight_bytes(c.type, c.k, c.n * c.batch, rng);
        ggml_backend_tensor_set(w, wb.data(), 0, wb.size());
        std::vector<float> xv((size_t)(c.k * m * c.batch));
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (auto &v : xv) v = u(rng);
        ggml_backend_tensor_set(x, xv.data(), 0, xv.size() * sizeof(float));

        ggml_cgraph *gf = ggml_new_graph(cg);
        ggml_build_forward_expand(gf, out);
        ggml_backend_t backends[2] = {hb, cb};
        ggml_backend_sched_t sched =
            ggml_backend_sched_new(backends, nullptr, 2, GGML_DEFAULT_GRAPH_SIZE, false, true);
        const bool ran = ggml_backend_sched_graph_compute(sched, gf) == GGML_STATUS_SUCCESS;
        ggml_backend_t ran_on = ggml_backend_sched_get_tensor_backend(sched, out);
        std::vector<float> y((size_t)ggml_nelements(out));
        if (ran) ggml_backend_tensor_get(out, y.data(), 0, y.size() * sizeof(float));

        // The same bytes on the CPU backend alone.
        ggml_context *cw2 = ggml_init(ip), *cg2 = ggml_init(ip);
        ggml_tensor *w2 = ggml_new_tensor_3d(cw2, c.type, c.k, c.n, c.batch);
        ggml_tensor *x2 = ggml_new_tensor_3d(cw2, GGML_TYPE_F32, c.k, m, c.batch);
        ggml_backend_buffer_t buf2 = ggml_backend_alloc_ctx_tensors_from_buft(cw2, cbuft);
        ggml_backend_tensor_set(w2, wb.data(), 0, wb.size());
        ggml_backend_tensor_set(x2, xv.data(), 0, xv.size() * sizeof(float));
        ggml_tensor *out2 = ggml_mul_mat(cg2, w2, x2);
        ggml_cgraph *gf2 = ggml_new_graph(cg2);
        ggml_build_forward_expand(gf2, out2);
        ggml_gallocr_t ga = ggml_gallocr_new(cbuft);
        ggml_gallocr_alloc_graph(ga, gf2);
        ggml_backend_graph_compute(cb, gf2);
        std::vector<float> y2(y.size());
        ggml_backend_tensor_get(out2, y2.data(), 0, y2.size() * sizeof(float));

        double err = 0, ref = 0;
        bool same = true;
        for (size_t i = 0; i < y.size(); i++) {
            err += (double)(y[i] - y2[i]) * (y[i] - y2[i]);
            ref += (double)y2[i] * y2[i];
            same = same && memcmp(&y[i], &y2[i], sizeof(float)) == 0;
        }
        const double nmse = ref > 0 ? err / ref : err;
        const bool in_hetero = chosen == hbuft, on_hetero = ran_on == hb;
        std::vector<uint8_t> back(wb.size());
        ggml_backend_tensor_get(w, back.data(), 0, back.size());
        const bool readback = back == wb;
        char nmse_s[64];
        snprintf(nmse_s, sizeof nmse_s, "nmse %.2e against the CPU alone", nmse);
        const bool ok = ran && in_hetero == c.hetero && on_hetero == c.hetero && readback &&
                        (c.hetero ? nmse <= 5e-4 : same);
        printf("%s %-7s k=%-4lld n=%-3lld batch=%lld: weight in %s, run on %s, %s, read-back %s  (%s)\n",
               ok ? "ok  " : "FAIL", ggml_type_name(c.type), (long long)c.k, (long long)c.n,
               (long long)c.batch, in_hetero ? "HETERO" : "CPU", ggml_backend_name(ran_on),
               c.hetero ? nmse_s
                        : (same ? "bit-identical to the CPU alone" : "DIFFERS from the CPU alone"),
               readback ? "exact" : "DIFFERS", c.why);
        failed += !ok;

        ggml_gallocr_free(ga);
        ggml_backend_buffer_free(buf2);
        ggml_free(cw2);
        ggml_free(cg2);
        ggml_backend_sched_free(sched);
        ggml_backend_buffer_free(wbuf);
        ggml_backend_buffer_free(abuf);
        ggml_free(cw);
        ggml_free(ca);
        ggml_free(cg);
    }
    ggml_backend_free(hb);
    ggml_backend_free(cb);
    printf("fallback: %d of %zu cases failed\n", failed, sizeof cases / sizeof cases[0]);
    return failed ? 1 : 0;
}
