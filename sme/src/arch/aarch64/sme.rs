//! The SME2 and SME1 tile kernels: one `asm!` block each, SMSTART to SMSTOP.
//!
//! Register plan inside the block (SVL = `VL` bytes, `vlw = VL / 4` FP32 lanes):
//! * za0.s–za3.s: the `vlw × 4·vlw` FP32 output tile (16×64 at SVL 512); one "chunk" of
//!   `4·vlw` columns = one column pass over a panel (1 pass per 64-column panel at SVL 512,
//!   2 at 256, 4 at 128).
//! * z24 / z25: LHS vectors of k-pairs q (set A) and q+1 (set B): `vlw` rows × 2 k FP16;
//! * z0–z3 / z4–z7: RHS vectors of the same k-pairs: `4·vlw` columns × 2 k FP16;
//! * z28–z31: bias (z28 = ones for the bias outer product, z29 tmp), p0 all-true .h,
//!   p1 all-true .s, p4–p7 column predicates of the four tiles, pn8 all-true counter (SME2).
//!
//! K loop: software pipelined, unrolled by two k-pairs: the loads of set B are issued before
//! the four FMOPAs of set A, and the loads of the next set A before the FMOPAs of set B. Per
//! k-pair: one LHS `ld1h` + one 4-vector `ld1h` (SME2) or four single `ld1h` (SME1) → 5 vectors,
//! 4 widening FMOPAs.
//!
//! Initial ZA: zero, then (accumulate) C rows loaded into ZA slices, then (bias) one FP32
//! outer product `ones ⊗ bias` per tile, so ZA = [C] + [bias] exactly before any product.
//! Store: horizontal ZA slices with column predicates, `rows` rows only.

use core::arch::asm;

/// Arguments of one block call, flattened for the asm (byte strides).
pub(super) struct BlockArgs {
    lhs: *const u16,
    panels: *const u16,
    kp: usize,
    c: *mut f32,
    ldc_bytes: usize,
    rows: usize,
    cols: usize,
    accumulate: usize,
    bias: *const f32,
    panel_stride_bytes: usize,
    passes: usize,
}

impl BlockArgs {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        svl_bytes: usize,
        lhs: *const u16,
        panels: *const u16,
        kp: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
        bias: *const f32,
    ) -> Self {
        Self {
            lhs,
            panels,
            kp,
            c,
            ldc_bytes: ldc * 4,
            rows,
            cols,
            accumulate: accumulate as usize,
            bias,
            panel_stride_bytes: kp * 256,
            // A chunk is 4 vectors of VL bytes = VL columns of the 64-column panel.
            passes: 64 / svl_bytes,
        }
    }

    /// Panels `panel_kp` k-pair rows apart (the whole weight's k-pairs) while the K loop reads
    /// only the first `kp` rows of each: one K chunk of consecutive panels.
    pub(super) fn with_panel_kp(self, panel_kp: usize) -> Self {
        Self {
            panel_stride_bytes: panel_kp * 256,
            ..self
        }
    }
}

/// Emits the whole kernel; `$ext` is the assembler extension (sme2 or sme), `$setup` extra
/// set-up, `$load_a`/`$load_b` the RHS loads of sets A (z0–z3, from `[r]`) and B (z4–z7, from
/// `[r + 256]`).
macro_rules! tile_kernel {
    ($a:expr, $ext:literal, $setup:literal, $load_a:literal, $load_b:literal) => {
        asm!(
            $ext,
            "smstart",
            "ptrue p0.h",
            "ptrue p1.s",
            $setup,
            "fmov z28.s, #1.0",
            "cntw {vlw}",
            "lsl {t2}, {vlw}, #1",
            "add {t3}, {t2}, {vlw}",
            // ---- chunk loop: col0 < cols on entry ----
            "10:",
            "zero {{za}}",
            "whilelt p4.s, {col0}, {cols}",
            "add {tmp}, {col0}, {vlw}",
            "whilelt p5.s, {tmp}, {cols}",
            "add {tmp}, {col0}, {t2}",
            "whilelt p6.s, {tmp}, {cols}",
            "add {tmp}, {col0}, {t3}",
            "whilelt p7.s, {tmp}, {cols}",
            // accumulate: ZA rows <- C rows
            "cbz {acc}, 20f",
            "mov {crow}, {c}",
            "mov w12, #0",
            "11:",
            "ld1w {{za0h.s[w12, 0]}}, p4/z, [{crow}]",
            "ld1w {{za1h.s[w12, 0]}}, p5/z, [{crow}, {vlw}, lsl #2]",
            "ld1w {{za2h.s[w12, 0]}}, p6/z, [{crow}, {t2}, lsl #2]",
            "ld1w {{za3h.s[w12, 0]}}, p7/z, [{crow}, {t3}, lsl #2]",
            "add {crow}, {crow}, {ldc}",
            "add w12, w12, #1",
            "cmp x12, {rows}",
            "b.lo 11b",
            // bias: ZA += ones ⊗ bias[col0..]
            "20:",
            "cbz {bias}, 30f",
            "add {tmp}, {bias}, {col0}, lsl #2",
            "ld1w z29.s, p4/z, [{tmp}]",
            "fmopa za0.s, p1/m, p4/m, z28.s, z29.s",
            "ld1w z29.s, p5/z, [{tmp}, {vlw}, lsl #2]",
            "fmopa za1.s, p1/m, p5/m, z28.s, z29.s",
            "ld1w z29.s, p6/z, [{tmp}, {t2}, lsl #2]",
            "fmopa za2.s, p1/m, p6/m, z28.s, z29.s",
            "ld1w z29.s, p7/z, [{tmp}, {t3}, lsl #2]",
            "fmopa za3.s, p1/m, p7/m, z28.s, z29.s",
            // ---- K loop ----
            "30:",
            "cbz {kp}, 70f",
            "mov {l}, {lhs}",
            "mov {r}, {rc}",
            // n = (k-pairs left after set A) - 2; C clear (kp < 3) → tail.
            "subs {n}, {kp}, #3",
            "ld1h z24.h, p0/z, [{l}]",
            $load_a,
            "b.lo 50f",
            "40:",
            "ld1h z25.h, p0/z, [{l}, #1, mul vl]",
            $load_b,
            "fmopa za0.s, p0/m, p0/m, z24.h, z0.h",
            "fmopa za1.s, p0/m, p0/m, z24.h, z1.h",
            "fmopa za2.s, p0/m, p0/m, z24.h, z2.h",
            "fmopa za3.s, p0/m, p0/m, z24.h, z3.h",
            "addvl {l}, {l}, #2",
            "add {r}, {r}, #512",
            "ld1h z24.h, p0/z, [{l}]",
            $load_a,
            "fmopa za0.s, p0/m, p0/m, z25.h, z4.h",
            "fmopa za1.s, p0/m, p0/m, z25.h, z5.h",
            "fmopa za2.s, p0/m, p0/m, z25.h, z6.h",
            "fmopa za3.s, p0/m, p0/m, z25.h, z7.h",
            "subs {n}, {n}, #2",
            "b.hs 40b",
            // n is -1 (one k-pair left after set A) or -2 (none).
            "50:",
            "cmn {n}, #1",
            "b.ne 60f",
            // one k-pair left after set A
            "ld1h z25.h, p0/z, [{l}, #1, mul vl]",
            $load_b,
            "fmopa za0.s, p0/m, p0/m, z24.h, z0.h",
            "fmopa za1.s, p0/m, p0/m, z24.h, z1.h",
            "fmopa za2.s, p0/m, p0/m, z24.h, z2.h",
            "fmopa za3.s, p0/m, p0/m, z24.h, z3.h",
            "fmopa za0.s, p0/m, p0/m, z25.h, z4.h",
            "fmopa za1.s, p0/m, p0/m, z25.h, z5.h",
            "fmopa za2.s, p0/m, p0/m, z25.h, z6.h",
            "fmopa za3.s, p0/m, p0/m, z25.h, z7.h",
            "b 70f",
            "60:",
            "fmopa za0.s, p0/m, p0/m, z24.h, z0.h",
            "fmopa za1.s, p0/m, p0/m, z24.h, z1.h",
            "fmopa za2.s, p0/m, p0/m, z24.h, z2.h",
            "fmopa za3.s, p0/m, p0/m, z24.h, z3.h",
            // ---- store rows [0, rows), predicated columns ----
            "70:",
            "mov {crow}, {c}",
            "mov w12, #0",
            "71:",
            "st1w {{za0h.s[w12, 0]}}, p4, [{crow}]",
            "st1w {{za1h.s[w12, 0]}}, p5, [{crow}, {vlw}, lsl #2]",
            "st1w {{za2h.s[w12, 0]}}, p6, [{crow}, {t2}, lsl #2]",
            "st1w {{za3h.s[w12, 0]}}, p7, [{crow}, {t3}, lsl #2]",
            "add {crow}, {crow}, {ldc}",
            "add w12, w12, #1",
            "cmp x12, {rows}",
            "b.lo 71b",
            // ---- next chunk: 4*vlw columns on; next pass or next panel ----
            "add {col0}, {col0}, {vlw}, lsl #2",
            "add {c}, {c}, {vlw}, lsl #4",
            "subs {pass}, {pass}, #1",
            "b.ne 80f",
            "add {panel}, {panel}, {pstride}",
            "mov {rc}, {panel}",
            "mov {pass}, {passes}",
            "b 81f",
            "80:",
            "add {rc}, {rc}, {vlw}, lsl #4",
            "81:",
            "cmp {col0}, {cols}",
            "b.lo 10b",
            "smstop",
            lhs = in(reg) $a.lhs,
            kp = in(reg) $a.kp,
            cols = in(reg) $a.cols,
            ldc = in(reg) $a.ldc_bytes,
            rows = in(reg) $a.rows,
            acc = in(reg) $a.accumulate,
            bias = in(reg) $a.bias,
            pstride = in(reg) $a.panel_stride_bytes,
            passes = in(reg) $a.passes,
            h128 = in(reg) 128usize,
            rc = inout(reg) $a.panels => _,
            panel = inout(reg) $a.panels => _,
            pass = inout(reg) $a.passes => _,
            col0 = inout(reg) 0usize => _,
            c = inout(reg) $a.c => _,
            vlw = out(reg) _,
            t2 = out(reg) _,
            t3 = out(reg) _,
            tmp = out(reg) _,
            crow = out(reg) _,
            l = out(reg) _,
            r = out(reg) _,
            n = out(reg) _,
            out("x12") _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
            out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v16") _, out("v17") _,
            out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
            out("v30") _, out("v31") _,
            out("p0") _, out("p1") _, out("p2") _, out("p3") _, out("p4") _, out("p5") _,
            out("p6") _, out("p7") _, out("p8") _, out("p9") _, out("p10") _, out("p11") _,
            out("p12") _, out("p13") _, out("p14") _, out("p15") _, out("ffr") _,
            options(nostack)
        )
    };
}

/// SME2 block kernel.
///
/// # Safety
/// The CPU has FEAT_SME2 and FEAT_SME_F16F32; `a` was built from arguments meeting the
/// obligations of `Sme2::gemm_block_f16` (valid extents, `1 <= rows <= vlw`, `1 <= cols <=
/// 64 * npanels`, SVL unchanged, ZA not dormant).
pub(super) unsafe fn sme2_block(a: &BlockArgs) {
    // SAFETY: the CPU features and every pointer extent are the caller's obligations; the block
    // reads `kp` LHS vectors from `lhs`, `kp` 256-byte rows per chunk from the panels, C rows
    // `[0, rows)` under column predicates `< cols`, and bias under the same predicates. SMSTART
    // and SMSTOP are both inside; all Z (so d8-d15 are saved by the compiler), P, FFR registers
    // and x12 are declared clobbered; nothing is called in streaming mode.
    unsafe {
        tile_kernel!(
            a,
            ".arch_extension sme2",
            "ptrue pn8.h",
            "ld1h {{z0.h-z3.h}}, pn8/z, [{r}]",
            "ld1h {{z4.h-z7.h}}, pn8/z, [{r}, {h128}, lsl #1]"
        )
    }
}

/// SME1 block kernel: single-vector loads only; assembled with `.arch_extension sme` alone, so
/// an SME2 instruction here would not assemble.
///
/// # Safety
/// The CPU has FEAT_SME and FEAT_SME_F16F32; otherwise as [`sme2_block`].
pub(super) unsafe fn sme1_block(a: &BlockArgs) {
    // SAFETY: as in `sme2_block`; the loads are the same bytes in four single-vector `ld1h`.
    unsafe {
        tile_kernel!(
            a,
            ".arch_extension sme",
            "",
            "ld1h z0.h, p0/z, [{r}]\n ld1h z1.h, p0/z, [{r}, #1, mul vl]\n ld1h z2.h, p0/z, [{r}, #2, mul vl]\n ld1h z3.h, p0/z, [{r}, #3, mul vl]",
            "add {tmp}, {r}, {h128}, lsl #1\n ld1h z4.h, p0/z, [{tmp}]\n ld1h z5.h, p0/z, [{tmp}, #1, mul vl]\n ld1h z6.h, p0/z, [{tmp}, #2, mul vl]\n ld1h z7.h, p0/z, [{tmp}, #3, mul vl]"
        )
    }
}
