// hetero-perplexity: perplexity of a text under a model, on llama.cpp's public API (llama.h), by
// llama-perplexity's method: the text is cut into chunks of n_ctx tokens, each chunk is decoded
// from an empty cache with BOS as its first token (when the vocabulary adds one), and the
// second half of each chunk is scored (every token there predicted from at least n_ctx/2
// tokens of context). It exists so the ggml stage needs no llama-common (a third of
// llama.cpp's build time); ggml/README.md records that it agrees with llama-perplexity.
//
//   hetero-perplexity -m MODEL.gguf -f TEXT [-c N_CTX (512)] [--chunks N (all)] [-t THREADS]
//                     [-fa on|off|auto (auto)]
//
// Prints one line per chunk and then `PPL <value> +/- <standard error>` (the stage parses it).
// Backends: those ggml loads (GGML_BACKEND_PATH adds one built outside llama.cpp).

#include "ggml-backend.h"
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s -m MODEL.gguf -f TEXT [-c N_CTX] [--chunks N] [-t THREADS] [-fa on|off|auto]\n",
            argv0);
    return 2;
}

int main(int argc, char **argv) {
    std::string model_path, text_path;
    int n_ctx = 512, n_chunks = -1;
    llama_flash_attn_type fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
    int n_threads = (int)std::thread::hardware_concurrency();
    for (int i = 1; i < argc; i++) {
        const bool has = i + 1 < argc;
        if (!strcmp(argv[i], "-m") && has) {
            model_path = argv[++i];
        } else if (!strcmp(argv[i], "-f") && has) {
            text_path = argv[++i];
        } else if (!strcmp(argv[i], "-c") && has) {
            n_ctx = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--chunks") && has) {
            n_chunks = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-t") && has) {
            n_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-fa") && has) {
            const char *v = argv[++i];
            fa = !strcmp(v, "on")    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                 : !strcmp(v, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                     : LLAMA_FLASH_ATTN_TYPE_AUTO;
        } else {
            return usage(argv[0]);
        }
    }
    if (model_path.empty() || text_path.empty() || n_ctx < 4 || n_threads < 1) {
        return usage(argv[0]);
    }
    std::ifstream in(text_path, std::ios::binary);
    if (!in) {
        fprintf(stderr, "cannot read %s\n", text_path.c_str());
        return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();

    // Loads GGML_BACKEND_PATH also in builds whose CPU backend is linked in (llama_backend_init
    // only loads backends when none is registered).
    ggml_backend_load_all();
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    llama_model *model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", model_path.c_str());
        return 1;
    }
    const llama_vocab *vocab = llama_model_get_vocab(model);

    const int n_tok = -llama_tokenize(vocab, text.c_str(), (int32_t)text.size(), nullptr, 0, true, false);
    std::vector<llama_token> tokens(n_tok > 0 ? n_tok : 0);
    if (n_tok <= 0 || llama_tokenize(vocab, text.c_str(), (int32_t)text.size(), tokens.data(),
                                     (int32_t)tokens.size(), true, false) < 0) {
        fprintf(stderr, "tokenizing %s failed\n", text_path.c_str());
        return 1;
    }
    const int max_chunks = (int)tokens.size() / n_ctx;
    const int chunks = n_chunks < 0 ? max_chunks : std::min(n_chunks, max_chunks);
    if (chunks < 1) {
        fprintf(stderr, "%s has %zu tokens, fewer than one chunk of %d\n", text_path.c_str(),
                tokens.size(), n_ctx);
        return 1;
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_ctx;
    cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = fa;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }

    const bool add_bos = llama_vocab_get_add_bos(vocab);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int first = n_ctx / 2;
    llama_batch batch = llama_batch_init(n_ctx, 0, 1);
    double nll = 0.0, nll2 = 0.0;
    long count = 0;
    for (int c = 0; c < chunks; c++) {
        const int start = c * n_ctx;
        llama_memory_clear(llama_get_memory(ctx), true);
        batch.n_tokens = n_ctx;
        for (int k = 0; k < n_ctx; k++) {
            batch.token[k] = (k == 0 && add_bos) ? llama_vocab_bos(vocab) : tokens[start + k];
            batch.pos[k] = k;
            batch.n_seq_id[k] = 1;
            batch.seq_id[k][0] = 0;
            batch.logits[k] = k >= first;
        }
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "decode failed at chunk %d\n", c + 1);
            return 1;
        }
        for (int j = first; j < n_ctx - 1; j++) {
            const float *logits = llama_get_logits_ith(ctx, j);
            double mx = logits[0];
            for (int v = 1; v < n_vocab; v++) {
                mx = std::max(mx, (double)logits[v]);
            }
            double sum = 0.0;
            for (int v = 0; v < n_vocab; v++) {
                sum += std::exp((double)logits[v] - mx);
            }
            const double l = std::log(sum) + mx - (double)logits[tokens[start + j + 1]];
            nll += l;
            nll2 += l * l;
            count++;
        }
        printf("[%d] %.6f\n", c + 1, std::exp(nll / count));
        fflush(stdout);
    }
    const double mean = nll / count;
    const double var = nll2 / count - mean * mean;
    const double se = var > 0 ? std::sqrt(var / (count - 1)) * std::exp(mean) : 0.0;
    printf("PPL %.6f +/- %.6f (%d chunks of %d, %ld tokens scored)\n", std::exp(mean), se, chunks,
           n_ctx, count);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
