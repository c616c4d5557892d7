//! Prompt-lookup drafting: propose the tokens that followed the latest earlier occurrence of
//! the context's suffix (n-gram of length `max_ngram` down to `min_ngram`) in the agent's own
//! context. No draft model.

/// Longest suffix tried.
pub const MAX_NGRAM: usize = 3;
/// Shortest suffix tried.
pub const MIN_NGRAM: usize = 1;

/// Writes up to `out.len()` draft tokens for the continuation of `ctx` and returns how many.
///
/// For `n` from [`MAX_NGRAM`] down to [`MIN_NGRAM`], finds the latest position `j < len - n`
/// where `ctx[j..j + n]` equals the last `n` tokens, and copies the tokens that followed it
/// (up to the end of the context). The first `n` that matches wins. Does not allocate.
pub fn lookup(ctx: &[u32], out: &mut [u32]) -> usize {
    let len = ctx.len();
    if out.is_empty() {
        return 0;
    }
    for n in (MIN_NGRAM..=MAX_NGRAM).rev() {
        if len <= n {
            continue;
        }
        let suffix = &ctx[len - n..];
        // Latest earlier occurrence: candidates start at j <= len - n - 1.
        for j in (0..len - n).rev() {
            if &ctx[j..j + n] == suffix {
                let follow = &ctx[j + n..];
                let k = follow.len().min(out.len());
                out[..k].copy_from_slice(&follow[..k]);
                return k;
            }
        }
    }
    0
}
