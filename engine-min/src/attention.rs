//! Causal grouped-query attention on the CPU as tiled GEMMs (flash style): per tile of query
//! rows × the query heads of one KV head, the keys and values are read from the cache in
//! blocks of [`BK`] positions (converted to f32 once per tile and block, from f32, f16 or
//! q8_0), `S = Q·Kᵀ` and `O += P·V` run as register-blocked FMA kernels over the whole tile,
//! and the softmax is online (running max and sum per row), so scores never exist beyond one
//! tile × block; blocks past a tile's last position are never read (causal blocks skipped).
//!
//! **Every row's result depends only on its own query, its position and its sequence's
//! cache**, never on the other rows of its tile: each score is one FMA chain over the head
//! dimension, each output element one FMA chain over the block's positions, the blocks are
//! fixed at absolute positions (`0..BK`, `BK..2BK`, ...), and a row only ever reads positions
//! `≤ its own` (masked ones are not multiplied by zero: they are not visited). So prefill,
//! decode and the batched engine (whatever a sequence is batched with) give a row the same
//! bits — the batch invariance greedy speculative decoding relies on — and the tile shapes are
//! free to follow the work (few rows: one head a tile, many tasks; many rows: every head of a
//! KV head together, each block read once for up to [`RMAX`] query rows).
//!
//! Three implementations, all run by the tests against an f64 reference: AVX-512F and
//! AVX2+FMA (the same fused operations in the same order, so bit-identical to each other),
//! and portable (separate multiply and add).

use std::sync::OnceLock;

use crate::kv::KvCache;

/// Positions per KV block.
pub const BK: usize = 64;
/// Most (row, head) pairs in one tile.
pub const RMAX: usize = 256;

/// Scratch floats one thread needs for head width `hd`: the block's keys (transposed) and
/// values, the tile's scaled queries, scores, outputs, running max and sum, and the
/// conversion scratch.
pub fn scratch_len(hd: usize) -> usize {
    2 * hd * BK + 2 * RMAX * hd + RMAX * BK + 3 * RMAX + hd + 64
}

/// An implementation of the tile kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttKernel {
    /// Separate multiply and add, any CPU.
    Portable,
    /// Fused multiply-add, 8 lanes (AVX2 + FMA).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// Fused multiply-add, 16 lanes (AVX-512F).
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl AttKernel {
    /// Every implementation this CPU runs, best last.
    pub fn available() -> Vec<AttKernel> {
        let mut v = vec![AttKernel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                v.push(AttKernel::Avx2);
            }
            if std::is_x86_feature_detected!("avx512f") {
                v.push(AttKernel::Avx512);
            }
        }
        v
    }

    /// The best on this CPU (chosen once).
    pub fn best() -> AttKernel {
        static BEST: OnceLock<AttKernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            AttKernel::available()
                .last()
                .copied()
                .unwrap_or(AttKernel::Portable)
        })
    }

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            AttKernel::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            AttKernel::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            AttKernel::Avx512 => "avx512",
        }
    }
}

/// A tile: rows `r0..r1` of the step (one sequence's, consecutive), query heads `h0..h1` (all
/// of KV head `kvh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    /// First row.
    pub r0: usize,
    /// Past the last row.
    pub r1: usize,
    /// First query head.
    pub h0: usize,
    /// Past the last query head.
    pub h1: usize,
}

/// The shapes of one step's attention: heads, widths and scale.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv_head: usize,
    /// Head width.
    pub hd: usize,
}

impl Heads {
    fn group(&self) -> usize {
        self.n_head / self.n_kv_head.max(1)
    }
    fn d(&self) -> usize {
        self.n_head * self.hd
    }
}

/// Appends the tiles of rows `r0..r1` (one sequence) to `out` (which must have room: no
/// allocation), `m` being the step's total rows and `threads` the pool's: with few rows one
/// head a tile (enough tasks for the pool), else every head of a KV head and as many rows as
/// fit in [`RMAX`] — fewer when that would leave under two tiles a thread.
pub fn tiles_of(h: &Heads, r0: usize, r1: usize, m: usize, threads: usize, out: &mut Vec<Tile>) {
    let group = h.group().max(1);
    let per_head = m <= 4;
    let heads = if per_head { 1 } else { group.min(RMAX) };
    let want = (2 * threads.max(1)).div_ceil(h.n_kv_head.max(1));
    let rows = (RMAX / heads).min((r1 - r0).div_ceil(want)).max(1);
    let mut r = r0;
    while r < r1 {
        let e = (r + rows).min(r1);
        let mut h0 = 0;
        while h0 < h.n_head {
            // Never across a KV head's boundary.
            let end_of_kv = (h0 / group + 1) * group;
            let h1 = (h0 + heads).min(end_of_kv).min(h.n_head);
            if out.len() < out.capacity() {
                out.push(Tile {
                    r0: r,
                    r1: e,
                    h0,
                    h1,
                });
            }
            h0 = h1;
        }
        r = e;
    }
}

/// Most tiles [`tiles_of`] makes for a step of `m` rows.
pub fn max_tiles(h: &Heads, m: usize) -> usize {
    // Worst case: one head a tile, one row a tile (sequences of one row each).
    m.max(1) * h.n_head.max(1)
}

/// Computes one tile into `att` (rows of `d = n_head·hd` floats): for each row `r` and head
/// `h` of the tile, `softmax(q_rh · K_{0..=pos}ᵀ · scale) · V_{0..=pos}` over layer `l` of
/// `cache`, KV head `h / group`. `q`: the step's queries (rows of `d`, RoPE applied); `pos(r)`:
/// row `r`'s position (its own key and value already in the cache); `scratch`:
/// [`scratch_len`]`(hd)` floats.
///
/// # Safety
/// `att` must point to at least `r1 · d` writable floats, and no other thread may access
/// rows `r0..r1`, heads `h0..h1` of it during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run_tile(
    kernel: AttKernel,
    h: &Heads,
    tile: Tile,
    q: &[f32],
    pos: &dyn Fn(usize) -> usize,
    cache: &KvCache,
    l: usize,
    att: *mut f32,
    scratch: &mut [f32],
) {
    let (hd, d, group) = (h.hd, h.d(), h.group().max(1));
    let nh = tile.h1 - tile.h0;
    let nr = nh * (tile.r1 - tile.r0);
    if nr == 0 || nr > RMAX || scratch.len() < scratch_len(hd) {
        return;
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let kvh = tile.h0 / group;
    let (kt, rest) = scratch.split_at_mut(hd * BK);
    let (vb, rest) = rest.split_at_mut(BK * hd);
    let (qs, rest) = rest.split_at_mut(RMAX * hd);
    let (s, rest) = rest.split_at_mut(RMAX * BK);
    let (o, rest) = rest.split_at_mut(RMAX * hd);
    let (mx, rest) = rest.split_at_mut(RMAX);
    let (sum, rest) = rest.split_at_mut(RMAX);
    let (alpha, tmp) = rest.split_at_mut(RMAX);
    // Pair i = (row r0 + i / nh, head h0 + i % nh).
    let at = |i: usize| (tile.r0 + i / nh, tile.h0 + i % nh);
    let mut pmax = 0;
    for i in 0..nr {
        let (r, hh) = at(i);
        let src = &q[r * d + hh * hd..r * d + (hh + 1) * hd];
        for (dst, &x) in qs[i * hd..(i + 1) * hd].iter_mut().zip(src) {
            *dst = x * scale;
        }
        pmax = pmax.max(pos(r));
        mx[i] = f32::NEG_INFINITY;
        sum[i] = 0.0;
    }
    o[..nr * hd].fill(0.0);
    for kb in 0..=pmax / BK {
        let j0 = kb * BK;
        let n = BK.min(pmax + 1 - j0);
        cache.keys_t(l, j0, n, kvh * hd, hd, kt, BK, tmp);
        if n < BK {
            for row in kt.chunks_exact_mut(BK) {
                row[n..].fill(0.0);
            }
        }
        scores(kernel, &qs[..nr * hd], nr, hd, kt, &mut s[..nr * BK]);
        // The online softmax, row by row: only positions <= the row's own are visited.
        let mut valid = [0usize; RMAX];
        for i in 0..nr {
            let p = pos(at(i).0);
            if p < j0 {
                continue;
            }
            let nv = n.min(p + 1 - j0);
            valid[i] = nv;
            let (m_new, a, add) = softmax_block(kernel, &mut s[i * BK..i * BK + nv], mx[i]);
            sum[i] = sum[i] * a + add;
            mx[i] = m_new;
            alpha[i] = a;
        }
        cache.values(l, j0, n, kvh * hd, hd, vb, tmp);
        // O = O·alpha + P·V: four rows together when all four see the same positions of the
        // block (the whole block, or a row's heads on its diagonal block); each output element
        // is the same chain over the positions either way.
        let mut i = 0;
        while i < nr {
            if i + 4 <= nr && valid[i] > 0 && valid[i..i + 4].iter().all(|&v| v == valid[i]) {
                pv4(kernel, i, valid[i], hd, s, vb, alpha, o);
                i += 4;
                continue;
            }
            if valid[i] > 0 {
                pv1(kernel, i, valid[i], hd, s, vb, alpha[i], o);
            }
            i += 1;
        }
    }
    for i in 0..nr {
        let (r, hh) = at(i);
        let inv = sum[i];
        // SAFETY: row r < r1 and head hh < n_head: inside the caller's `r1 · d` floats, in the
        // tile's exclusive region.
        let dst = unsafe { std::slice::from_raw_parts_mut(att.add(r * d + hh * hd), hd) };
        for (dv, &ov) in dst.iter_mut().zip(&o[i * hd..(i + 1) * hd]) {
            *dv = ov / inv;
        }
    }
}

/// One row's block of scores `row` (the positions it sees) against its running max `m_old`:
/// the new max, the rescale `exp(m_old − m_new)` of what came before (0 on the first block)
/// and `Σ exp(s − m_new)`, each score replaced by its weight `exp(s − m_new)`.
fn softmax_block(kernel: AttKernel, row: &mut [f32], m_old: f32) -> (f32, f32, f32) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx512 => {
            // SAFETY: AVX-512F present (`available`).
            unsafe { softmax_avx512(row, m_old) }
        }
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx2 => {
            // SAFETY: AVX2 and FMA present.
            unsafe { softmax_avx2(row, m_old) }
        }
        AttKernel::Portable => softmax_body::<Plain>(row, m_old),
    }
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn softmax_avx512(row: &mut [f32], m_old: f32) -> (f32, f32, f32) {
    softmax_body::<Fused>(row, m_old)
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_avx2(row: &mut [f32], m_old: f32) -> (f32, f32, f32) {
    softmax_body::<Fused>(row, m_old)
}

/// See [`softmax_block`]: the max (exact in any order), then [`exp_poly`] over the row (a
/// loop the compiler vectorizes) and the sum in 16 fixed lanes reduced in a fixed order, so a
/// row's weights and sum do not depend on anything but the row.
#[inline(always)]
fn softmax_body<M: Madd>(row: &mut [f32], m_old: f32) -> (f32, f32, f32) {
    // The max in 16 lanes, then across them (one serial `max` chain over the row cost about
    // as much as the block's scores: 4 cycles a position).
    let mut ml = [f32::NEG_INFINITY; 16];
    let mut mc = row.chunks_exact(16);
    for c in &mut mc {
        for (l, &x) in ml.iter_mut().zip(c) {
            *l = l.max(x);
        }
    }
    for (l, &x) in ml.iter_mut().zip(mc.remainder()) {
        *l = l.max(x);
    }
    let bm = ml.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    let m_new = m_old.max(bm);
    let a = if m_old == f32::NEG_INFINITY {
        0.0
    } else {
        exp_poly::<M>(m_old - m_new)
    };
    for x in row.iter_mut() {
        *x = exp_poly::<M>(*x - m_new);
    }
    let mut lanes = [0f32; 16];
    let mut chunks = row.chunks_exact(16);
    for c in &mut chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l += x;
        }
    }
    for (l, &x) in lanes.iter_mut().zip(chunks.remainder()) {
        *l += x;
    }
    let mut add = 0f32;
    for l in lanes {
        add += l;
    }
    (m_new, a, add)
}

/// `e^x` for `x ≤ 0` (the softmax's arguments) to within a few f32 ulps: `x = n·ln 2 + r`
/// with `n` rounded to nearest (a magic-number add, no `floor`), `e^r` by Cephes' degree-6
/// polynomial, and `2^n` from the exponent bits. Below −87 it returns `e^−87` (≈ 1.6e-38,
/// nothing beside a weight of at least 1). Straight-line f32 code: vectorized by the callers'
/// loops, the same operations on every implementation of one kind.
#[inline(always)]
fn exp_poly<M: Madd>(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer.
    let x = x.clamp(-87.0, 0.0);
    let t = M::madd(x, std::f32::consts::LOG2_E, MAGIC);
    let n = t - MAGIC;
    // r = x − n·ln 2 in two steps (ln 2 = C1 + C2, C1 exact in few bits).
    let r = M::madd(n, -0.693_359_4, x);
    let r = M::madd(n, 2.121_944_4e-4, r);
    let mut y = 1.987_569_1e-4;
    y = M::madd(y, r, 1.398_199_9e-3);
    y = M::madd(y, r, 8.333_452e-3);
    y = M::madd(y, r, 4.166_579_6e-2);
    y = M::madd(y, r, 1.666_666_5e-1);
    y = M::madd(y, r, 0.5);
    let y = M::madd(y, r * r, r) + 1.0;
    // n is an integer in [-126, 0]: its bits are t's low bits.
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    y * f32::from_bits(((n + 127) as u32) << 23)
}

/// How a kernel body multiplies and adds.
trait Madd {
    fn madd(a: f32, b: f32, c: f32) -> f32;
}

/// Fused (one rounding): compiled only inside functions that enable FMA.
struct Fused;
impl Madd for Fused {
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// Separate multiply and add (two roundings): any CPU.
struct Plain;
impl Madd for Plain {
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// `s[i·BK + j] = Σ_d qs[i·hd + d] · kt[d·BK + j]` for `i < nr`, every `j < BK`: each element
/// one chain over `d` from 0, whatever rows it is computed with.
fn scores(kernel: AttKernel, qs: &[f32], nr: usize, hd: usize, kt: &[f32], s: &mut [f32]) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx512 => {
            // SAFETY: `Avx512` is only offered when the CPU has AVX-512F (`available`).
            unsafe { scores_avx512(qs, nr, hd, kt, s) }
        }
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx2 => {
            // SAFETY: `Avx2` is only offered when the CPU has AVX2 and FMA.
            unsafe { scores_avx2(qs, nr, hd, kt, s) }
        }
        AttKernel::Portable => scores_body::<Plain, 4>(qs, nr, hd, kt, s),
    }
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn scores_avx512(qs: &[f32], nr: usize, hd: usize, kt: &[f32], s: &mut [f32]) {
    use core::arch::x86_64::*;
    // Four rows at a time with the block's four key vectors of each `d` loaded once into
    // registers (the generic body's compiled loop re-read them for every row: 20 loads for 16
    // FMAs, load-bound); the same `fma(q, k, acc)` chain over `d` per element as
    // `scores_body`, so the same bits as the AVX2 kernel.
    let full = nr / 4 * 4;
    if qs.len() < nr * hd || kt.len() < hd * BK || s.len() < nr * BK {
        return scores_body::<Fused, 4>(qs, nr, hd, kt, s);
    }
    let (q, k, out) = (qs.as_ptr(), kt.as_ptr(), s.as_mut_ptr());
    let mut i = 0;
    while i < full {
        // SAFETY: rows i..i+4 < nr of qs (nr·hd floats, checked), kt's hd rows of BK = 64
        // floats (checked), s's rows i..i+4 of BK; AVX-512F/FMA are this function's features.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 4]; 4];
            for d in 0..hd {
                step4x64(&mut acc, k.add(d * BK), |r| *q.add((i + r) * hd + d));
            }
            store4x64(&acc, out.add(i * BK), BK);
        }
        i += 4;
    }
    if full < nr {
        scores_body::<Fused, 4>(&qs[full * hd..], nr - full, hd, kt, &mut s[full * BK..]);
    }
}

/// One step of the AVX-512 loops' 4 rows × 64 columns register block: the 64 floats at `w`
/// loaded once, `acc[r][c] = fma(x(r), w[16c..], acc[r][c])` for the four rows.
///
/// # Safety
/// AVX-512F and FMA (the callers' features); 64 floats readable at `w`; `x` reads what the
/// caller checked.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn step4x64(
    acc: &mut [[core::arch::x86_64::__m512; 4]; 4],
    w: *const f32,
    x: impl Fn(usize) -> f32,
) {
    use core::arch::x86_64::*;
    // SAFETY: 64 floats at w (the contract); register-only otherwise.
    unsafe {
        let wv = [
            _mm512_loadu_ps(w),
            _mm512_loadu_ps(w.add(16)),
            _mm512_loadu_ps(w.add(32)),
            _mm512_loadu_ps(w.add(48)),
        ];
        for (r, a) in acc.iter_mut().enumerate() {
            let b = _mm512_set1_ps(x(r));
            for c in 0..4 {
                a[c] = _mm512_fmadd_ps(b, wv[c], a[c]);
            }
        }
    }
}

/// Stores the 4 × 64 block to rows of `ld` floats from `out`.
///
/// # Safety
/// AVX-512F; rows `0..4` of 64 floats at stride `ld` writable from `out`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store4x64(acc: &[[core::arch::x86_64::__m512; 4]; 4], out: *mut f32, ld: usize) {
    use core::arch::x86_64::*;
    for (r, a) in acc.iter().enumerate() {
        for (c, v) in a.iter().enumerate() {
            // SAFETY: inside row r's 64 floats (the contract).
            unsafe { _mm512_storeu_ps(out.add(r * ld + 16 * c), *v) };
        }
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_avx2(qs: &[f32], nr: usize, hd: usize, kt: &[f32], s: &mut [f32]) {
    scores_body::<Fused, 2>(qs, nr, hd, kt, s);
}

/// `R` rows at a time over all `BK` columns (accumulators `R × BK` floats: 16 512-bit or 16
/// 256-bit registers for R = 4 / 2), then the remaining rows one by one.
#[inline(always)]
fn scores_body<M: Madd, const R: usize>(
    qs: &[f32],
    nr: usize,
    hd: usize,
    kt: &[f32],
    s: &mut [f32],
) {
    let mut i = 0;
    while i + R <= nr {
        let mut acc = [[0f32; BK]; R];
        for d in 0..hd {
            let k: &[f32; BK] = kt[d * BK..(d + 1) * BK].try_into().unwrap_or(&[0.0; BK]);
            for (r, a) in acc.iter_mut().enumerate() {
                let b = qs[(i + r) * hd + d];
                for j in 0..BK {
                    a[j] = M::madd(b, k[j], a[j]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            s[(i + r) * BK..(i + r + 1) * BK].copy_from_slice(a);
        }
        i += R;
    }
    while i < nr {
        let mut a = [0f32; BK];
        for d in 0..hd {
            let k: &[f32; BK] = kt[d * BK..(d + 1) * BK].try_into().unwrap_or(&[0.0; BK]);
            let b = qs[i * hd + d];
            for j in 0..BK {
                a[j] = M::madd(b, k[j], a[j]);
            }
        }
        s[i * BK..(i + 1) * BK].copy_from_slice(&a);
        i += 1;
    }
}

/// Rows `i..i + 4`: `o_r = o_r · alpha_r + Σ_{j < nv} p_rj · v_j`.
#[allow(clippy::too_many_arguments)]
fn pv4(
    kernel: AttKernel,
    i: usize,
    nv: usize,
    hd: usize,
    p: &[f32],
    v: &[f32],
    alpha: &[f32],
    o: &mut [f32],
) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx512 => {
            // SAFETY: AVX-512F present (`available`).
            unsafe { pv_avx512(i, 4, nv, hd, p, v, alpha, o) }
        }
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx2 => {
            // SAFETY: AVX2 and FMA present.
            unsafe { pv_avx2(i, 4, nv, hd, p, v, alpha, o) }
        }
        AttKernel::Portable => pv_body::<Plain, 32>(i, 4, nv, hd, p, v, alpha, o),
    }
}

/// Row `i` alone over its first `nv` positions of the block.
#[allow(clippy::too_many_arguments)]
fn pv1(
    kernel: AttKernel,
    i: usize,
    nv: usize,
    hd: usize,
    p: &[f32],
    v: &[f32],
    alpha: f32,
    o: &mut [f32],
) {
    // The kernels index alpha by row: this row's at `i`.
    let mut al = [0f32; RMAX];
    if let Some(a) = al.get_mut(i) {
        *a = alpha;
    }
    match kernel {
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx512 => {
            // SAFETY: AVX-512F present.
            unsafe { pv_avx512(i, 1, nv, hd, p, v, &al, o) }
        }
        #[cfg(target_arch = "x86_64")]
        AttKernel::Avx2 => {
            // SAFETY: AVX2 and FMA present.
            unsafe { pv_avx2(i, 1, nv, hd, p, v, &al, o) }
        }
        AttKernel::Portable => pv_body::<Plain, 32>(i, 1, nv, hd, p, v, &al, o),
    }
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pv_avx512(
    i: usize,
    rows: usize,
    nv: usize,
    hd: usize,
    p: &[f32],
    v: &[f32],
    alpha: &[f32],
    o: &mut [f32],
) {
    use core::arch::x86_64::*;
    // 4 rows × 4 vectors of 16: 16 accumulators, each position's four value vectors loaded
    // once for the four rows (as `scores_avx512`); the same `o·alpha` then `fma(p, v, acc)`
    // chain over the positions per element as `pv_rows`. Other shapes: the generic body.
    let ok = rows == 4
        && hd.is_multiple_of(64)
        && nv <= BK
        && p.len() >= (i + 4) * BK
        && v.len() >= nv * hd
        && alpha.len() >= i + 4
        && o.len() >= (i + 4) * hd;
    if !ok {
        return pv_body::<Fused, 64>(i, rows, nv, hd, p, v, alpha, o);
    }
    let (pp, vp, op) = (p.as_ptr(), v.as_ptr(), o.as_mut_ptr());
    let mut c0 = 0;
    while c0 < hd {
        // SAFETY: rows i..i+4 of p (BK each), o (hd each) and alpha, positions < nv ≤ BK of v
        // (hd each), columns c0..c0+64 ≤ hd: all checked above; AVX-512F/FMA enabled.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 4]; 4];
            for (r, a) in acc.iter_mut().enumerate() {
                let al = _mm512_set1_ps(*alpha.as_ptr().add(i + r));
                for (c, x) in a.iter_mut().enumerate() {
                    *x = _mm512_mul_ps(_mm512_loadu_ps(op.add((i + r) * hd + c0 + 16 * c)), al);
                }
            }
            for j in 0..nv {
                step4x64(&mut acc, vp.add(j * hd + c0), |r| *pp.add((i + r) * BK + j));
            }
            store4x64(&acc, op.add(i * hd + c0), hd);
        }
        c0 += 64;
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pv_avx2(
    i: usize,
    rows: usize,
    nv: usize,
    hd: usize,
    p: &[f32],
    v: &[f32],
    alpha: &[f32],
    o: &mut [f32],
) {
    // 4 rows × 4 vectors of 8 (AVX2 has 16 registers: 16 accumulators would spill less with
    // fewer rows, but the sums are the same either way).
    pv_body::<Fused, 32>(i, rows, nv, hd, p, v, alpha, o);
}

/// Rows `i..i + rows` (1 or 4), positions `0..nv` of the block: per output element
/// `acc = o · alpha`, then one chain over the positions in order (the same for any `rows`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pv_body<M: Madd, const OC: usize>(
    i: usize,
    rows: usize,
    nv: usize,
    hd: usize,
    p: &[f32],
    v: &[f32],
    alpha: &[f32],
    o: &mut [f32],
) {
    if rows == 4 {
        pv_rows::<M, OC, 4>(i, nv, hd, p, v, alpha, o);
    } else {
        for r in i..i + rows {
            pv_rows::<M, OC, 1>(r, nv, hd, p, v, alpha, o);
        }
    }
}

/// [`pv_body`] for `R` rows: `OC` output columns at a time held in `R × OC` accumulators
/// across the block's positions, then any last columns narrower than `OC`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pv_rows<M: Madd, const OC: usize, const R: usize>(
    i: usize,
    nv: usize,
    hd: usize,
    p: &[f32],
    v: &[f32],
    alpha: &[f32],
    o: &mut [f32],
) {
    let mut c0 = 0;
    while c0 + OC <= hd {
        let mut acc = [[0f32; OC]; R];
        for (r, a) in acc.iter_mut().enumerate() {
            let src = &o[(i + r) * hd + c0..(i + r) * hd + c0 + OC];
            for (x, &y) in a.iter_mut().zip(src) {
                *x = y * alpha[i + r];
            }
        }
        for j in 0..nv {
            let vv: &[f32; OC] = v[j * hd + c0..j * hd + c0 + OC]
                .try_into()
                .unwrap_or(&[0.0; OC]);
            for (r, a) in acc.iter_mut().enumerate() {
                let b = p[(i + r) * BK + j];
                for c in 0..OC {
                    a[c] = M::madd(b, vv[c], a[c]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            o[(i + r) * hd + c0..(i + r) * hd + c0 + OC].copy_from_slice(a);
        }
        c0 += OC;
    }
    if c0 < hd {
        let w = hd - c0;
        for r in 0..R {
            let mut acc = [0f32; OC];
            let src = &o[(i + r) * hd + c0..(i + r) * hd + hd];
            for (x, &y) in acc.iter_mut().zip(src) {
                *x = y * alpha[i + r];
            }
            for j in 0..nv {
                let b = p[(i + r) * BK + j];
                let vv = &v[j * hd + c0..j * hd + hd];
                for (a, &x) in acc.iter_mut().zip(vv) {
                    *a = M::madd(b, x, *a);
                }
            }
            o[(i + r) * hd + c0..(i + r) * hd + hd].copy_from_slice(&acc[..w]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvType;
    use crate::model::Config;

    fn config(n_head: usize, n_kv_head: usize, hd: usize) -> Config {
        Config {
            n_layer: 2,
            d_model: n_head * hd,
            n_head,
            n_kv_head,
            head_dim: hd,
            d_ff: 8,
            vocab: 8,
            context: 4096,
            rope_theta: 10_000.0,
            rope_dims: hd,
            eps: 1e-5,
        }
    }

    /// `exp_poly` (both kinds) within 2 f32 ulps of the f64 exponential over [-87, 0], and
    /// exactly 1 at 0.
    #[test]
    fn exp_poly_is_accurate() {
        for kind in 0..2 {
            let mut worst = 0f64;
            let mut x = 0f32;
            while x > -87.0 {
                let got = if kind == 0 {
                    exp_poly::<Plain>(x)
                } else {
                    exp_poly::<Fused>(x)
                } as f64;
                let want = (x as f64).exp();
                worst = worst.max((got - want).abs() / want);
                x -= 0.0137;
            }
            assert!(worst < 2.5e-7, "kind {kind}: relative error {worst:e}");
            assert_eq!(exp_poly::<Plain>(0.0), 1.0);
        }
    }

    /// Deterministic values in [-1, 1).
    fn noise(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// The step's attention output through `tiles_of` + `run_tile` (`shape_m`: the row count
    /// the tile shapes are chosen for), rows `0..m` at positions `pos0..`, NaN-poisoned first.
    #[allow(clippy::too_many_arguments)]
    fn run(
        kernel: AttKernel,
        h: &Heads,
        q: &[f32],
        m: usize,
        pos0: usize,
        cache: &KvCache,
        l: usize,
        shape_m: usize,
    ) -> Vec<f32> {
        let d = h.n_head * h.hd;
        let mut tiles = Vec::with_capacity(max_tiles(h, shape_m.max(m)));
        tiles_of(h, 0, m, shape_m, 2, &mut tiles);
        // Every (row, head) exactly once.
        let mut seen = vec![0u8; m * h.n_head];
        for t in &tiles {
            for r in t.r0..t.r1 {
                for hh in t.h0..t.h1 {
                    seen[r * h.n_head + hh] += 1;
                }
            }
            assert_eq!(
                t.h0 / (h.n_head / h.n_kv_head),
                (t.h1 - 1) / (h.n_head / h.n_kv_head)
            );
            assert!((t.r1 - t.r0) * (t.h1 - t.h0) <= RMAX);
        }
        assert!(seen.iter().all(|&c| c == 1), "tiles cover each pair once");
        let mut out = vec![f32::NAN; m * d];
        let mut scratch = vec![f32::NAN; scratch_len(h.hd)];
        for t in tiles {
            // SAFETY: `out` holds m·d floats; tiles run one at a time here.
            unsafe {
                run_tile(
                    kernel,
                    h,
                    t,
                    q,
                    &|r| pos0 + r,
                    cache,
                    l,
                    out.as_mut_ptr(),
                    &mut scratch,
                )
            };
        }
        out
    }

    /// The f64 reference over the values the cache holds (read back through the same reads
    /// the kernels use, so only the arithmetic is under test).
    fn reference(
        h: &Heads,
        q: &[f32],
        m: usize,
        pos0: usize,
        cache: &KvCache,
        l: usize,
    ) -> Vec<f64> {
        let (hd, d) = (h.hd, h.n_head * h.hd);
        let group = h.n_head / h.n_kv_head;
        let n = pos0 + m;
        let mut tmp = vec![0f32; hd + 64];
        let mut out = vec![0f64; m * d];
        for kvh in 0..h.n_kv_head {
            let mut kt = vec![0f32; hd * n];
            let mut v = vec![0f32; n * hd];
            cache.keys_t(l, 0, n, kvh * hd, hd, &mut kt, n, &mut tmp);
            cache.values(l, 0, n, kvh * hd, hd, &mut v, &mut tmp);
            for hh in kvh * group..(kvh + 1) * group {
                for r in 0..m {
                    let p = pos0 + r;
                    let qr = &q[r * d + hh * hd..r * d + (hh + 1) * hd];
                    let s: Vec<f64> = (0..=p)
                        .map(|j| {
                            (0..hd)
                                .map(|e| qr[e] as f64 * kt[e * n + j] as f64)
                                .sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                    let z: f64 = w.iter().sum();
                    for e in 0..hd {
                        out[r * d + hh * hd + e] =
                            (0..=p).map(|j| w[j] * v[j * hd + e] as f64).sum::<f64>() / z;
                    }
                }
            }
        }
        out
    }

    /// Every implementation against the f64 reference, for every KV type, over the head
    /// layouts of the supported models (GQA 1, 2, 3 (SmolLM2), 4 (Llama 3.2 1B / 3.1 8B) at
    /// head widths 16, 32, 64, 128) and row counts 1, 2, 17, 511, 513 (prefill from 0), a
    /// chunk after earlier positions and a decode row deep in the cache. Tolerance: with
    /// q, k, v in [-1, 1), a score is an f32 chain of `hd` products (q scaled by 1/sqrt(hd)
    /// first), a relative error of a few `hd · 2⁻²⁴` at worst, which exp turns into the same
    /// relative error of each weight; the running sums add `positions · 2⁻²⁴` relative. The
    /// measured worst over every case is 2.2e-7 (outputs are weighted means of |v| < 1);
    /// 5e-6 keeps a 20x margin while any real mistake (a wrong KV head or layer, an off-by-one
    /// mask, a block skipped or read twice, a missed rescale) moves outputs by 1e-3
    /// or more. Also: each row's bits do not depend on the tiling (few-row tiles of one head
    /// against many-row tiles of a KV head's every head), and the two fused implementations
    /// agree bit for bit.
    #[test]
    fn tiles_match_the_reference_and_each_other_over_edge_shapes() {
        let cases: &[(usize, usize, usize, usize, usize)] = &[
            // (n_head, n_kv_head, hd, m, pos0)
            (4, 2, 16, 1, 0),
            (4, 2, 16, 2, 0),
            (4, 4, 32, 17, 0),
            (9, 3, 64, 17, 0),
            (9, 3, 64, 70, 100),
            (8, 2, 64, 511, 0),
            (8, 2, 64, 513, 0),
            (8, 2, 128, 130, 0),
            (8, 2, 128, 1, 700),
            (9, 3, 64, 1, 300),
        ];
        for &(nh, nkv, hd, m, pos0) in cases {
            let c = config(nh, nkv, hd);
            let h = Heads {
                n_head: nh,
                n_kv_head: nkv,
                hd,
            };
            let d = nh * hd;
            let kv = nkv * hd;
            let n = pos0 + m;
            let q = noise(1 + m as u64, m * d);
            for ty in KvType::ALL {
                if ty.row_bytes(kv).is_none() {
                    continue;
                }
                let mut cache = KvCache::new(&c, n, ty).unwrap();
                {
                    let w = cache.writer();
                    let kr = noise(7 + hd as u64, n * kv);
                    let vr = noise(9 + nh as u64, n * kv);
                    for l in 0..2 {
                        for p in 0..n {
                            // Layer 0 holds other values: a wrong layer offset would show.
                            let f = if l == 0 { -0.5 } else { 1.0 };
                            let k: Vec<f32> =
                                kr[p * kv..(p + 1) * kv].iter().map(|x| x * f).collect();
                            let v: Vec<f32> =
                                vr[p * kv..(p + 1) * kv].iter().map(|x| x * f).collect();
                            // SAFETY: one call at a time, no reader.
                            unsafe { w.write(l, p, &k, &v) };
                        }
                    }
                }
                let want = reference(&h, &q, m, pos0, &cache, 1);
                let mut fused: Option<Vec<f32>> = None;
                for kernel in AttKernel::available() {
                    let got = run(kernel, &h, &q, m, pos0, &cache, 1, m);
                    let worst = got
                        .iter()
                        .zip(&want)
                        .map(|(g, w)| (*g as f64 - w).abs())
                        .fold(0f64, f64::max);
                    eprintln!(
                        "{} {ty} heads {nh}/{nkv} hd {hd} m {m} pos0 {pos0}: max error {worst:e}",
                        kernel.name()
                    );
                    assert!(
                        worst <= 5e-6,
                        "{} {ty} heads {nh}/{nkv} hd {hd} m {m} pos0 {pos0}: max error {worst:e}",
                        kernel.name()
                    );
                    // The other tiling: one head a tile.
                    let other = run(kernel, &h, &q, m, pos0, &cache, 1, 1);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&other),
                        "{} {ty} m {m}: tiling",
                        kernel.name()
                    );
                    if kernel != AttKernel::Portable {
                        if let Some(f) = &fused {
                            assert_eq!(
                                bits(f),
                                bits(&got),
                                "{} {ty} m {m}: fused kernels",
                                kernel.name()
                            );
                        }
                        fused = Some(got);
                    }
                }
            }
        }
    }

    /// Not a check: the throughput of the best kernel on 8B heads (32/8, hd 128), an f16
    /// cache, M prompt rows from position 0 on one thread (`ATT_M`, default 1024), in GFLOP/s
    /// of the visible positions (4·hd per (row, head, position)).
    /// `cargo test --release -p engine-min --lib attention::tests::throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn throughput() {
        let (nh, nkv, hd) = (32, 8, 128);
        let m: usize = std::env::var("ATT_M")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1024);
        let c = config(nh, nkv, hd);
        let h = Heads {
            n_head: nh,
            n_kv_head: nkv,
            hd,
        };
        let kv = nkv * hd;
        let mut cache = KvCache::new(&c, m, KvType::F16).unwrap();
        {
            let w = cache.writer();
            let kr = noise(7, m * kv);
            let vr = noise(9, m * kv);
            for p in 0..m {
                // SAFETY: one call at a time, no reader.
                unsafe { w.write(1, p, &kr[p * kv..(p + 1) * kv], &vr[p * kv..(p + 1) * kv]) };
            }
        }
        let q = noise(1, m * nh * hd);
        let kernel = AttKernel::best();
        let flops = 4.0 * hd as f64 * nh as f64 * (m * (m + 1) / 2) as f64;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let out = run(kernel, &h, &q, m, 0, &cache, 1, m);
            best = best.min(t.elapsed().as_secs_f64());
            assert!(out.iter().all(|v| v.is_finite()));
        }
        eprintln!(
            "{} m {m}: {:.1} ms, {:.1} GFLOP/s",
            kernel.name(),
            best * 1e3,
            flops / best / 1e9
        );
    }
}
