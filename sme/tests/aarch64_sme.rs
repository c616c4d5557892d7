//! Raw SME instruction sequences executed under QEMU: proves that the toolchain assembles SME2
//! (and SME1-only) code inside `asm!`, that the emulator runs it, and that the widening FP16→FP32
//! outer product lands in ZA the way the kernels assume. Independent of the crate's kernels.
//!
//! Gated through `hetero_tests::require`: `sme-emu` (a CPU with HWCAP2_SME2, e.g.
//! `qemu-aarch64 -cpu max,sme512=on`) and `sme1-emu` (HWCAP2_SME set, HWCAP2_SME2 clear, e.g.
//! QEMU 10.0 `-cpu max`).
#![cfg(target_arch = "aarch64")]

use std::arch::asm;

/// `AT_HWCAP2` from `<elf.h>`.
const AT_HWCAP2: libc::c_ulong = 26;
/// Linux uapi `arch/arm64/include/uapi/asm/hwcap.h`: `HWCAP2_SME (1 << 23)`.
const HWCAP2_SME: u64 = 1 << 23;
/// `HWCAP2_SME_F16F32 (1 << 27)`: widening FP16→FP32 FMOPA.
const HWCAP2_SME_F16F32: u64 = 1 << 27;
/// `HWCAP2_SME2 (1UL << 37)`.
const HWCAP2_SME2: u64 = 1 << 37;

fn hwcap2() -> u64 {
    // SAFETY: getauxval has no preconditions; it returns 0 for an absent entry.
    unsafe { libc::getauxval(AT_HWCAP2) as u64 }
}

/// Streaming vector length in bytes (`rdsvl` works outside streaming mode).
///
/// # Safety
/// The CPU must implement FEAT_SME.
unsafe fn svl_bytes() -> usize {
    let svl: usize;
    // SAFETY: the caller guarantees FEAT_SME, so RDSVL is defined; it only writes `svl`.
    unsafe {
        asm!(".arch_extension sme", "rdsvl {0}, #1", out(reg) svl, options(nomem, nostack, preserves_flags))
    };
    svl
}

/// Small exact values (multiples of 1/4 in [-8, 8)) so every product and sum is exact in FP32.
fn exact_values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            ((s % 64) as f32 - 32.0) / 4.0
        })
        .collect()
}

fn f16_bits(v: &[f32]) -> Vec<u16> {
    v.iter()
        .map(|&x| half::f16::from_f32(x).to_bits())
        .collect()
}

/// Scalar model of four widening FMOPAs: za_t[i][j] = sum_k lhs[2i+k] * rhs_t[2j+k], written as
/// rows of 4*vlw columns (tile t holds columns t*vlw..(t+1)*vlw).
fn expected(lhs: &[f32], rhs: &[f32], vlw: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; vlw * 4 * vlw];
    for i in 0..vlw {
        for t in 0..4 {
            for j in 0..vlw {
                let mut s = 0.0f64;
                for k in 0..2 {
                    s += lhs[2 * i + k] as f64 * rhs[t * 2 * vlw + 2 * j + k] as f64;
                }
                out[i * 4 * vlw + t * vlw + j] = s;
            }
        }
    }
    out
}

fn check(out: &[f32], want: &[f64]) {
    for (idx, (&o, &w)) in out.iter().zip(want).enumerate() {
        // Exact: inputs are multiples of 1/4 below 8, so each sum of two products is exact.
        assert_eq!(o as f64, w, "element {idx}");
    }
}

#[test]
fn sme2_ld1h_x4_widening_fmopa_into_four_tiles() {
    let caps = hwcap2();
    let probe = if caps & HWCAP2_SME2 == 0 {
        Err(format!("HWCAP2_SME2 clear (HWCAP2 = {caps:#x})"))
    } else if caps & HWCAP2_SME_F16F32 == 0 {
        Err(format!("HWCAP2_SME_F16F32 clear (HWCAP2 = {caps:#x})"))
    } else {
        Ok(())
    };
    if hetero_tests::require("sme-emu", probe).is_none() {
        return;
    }
    // SAFETY: HWCAP2_SME2 is set, which implies FEAT_SME.
    let svl = unsafe { svl_bytes() };
    let vlw = svl / 4; // FP32 lanes per vector = rows (and columns) of one ZA .s tile
    eprintln!("SVL = {} bits, tile {vlw}x{vlw}", svl * 8);
    let lhs = exact_values(2 * vlw, 0x1234_5678);
    let rhs = exact_values(4 * 2 * vlw, 0x9abc_def1);
    let (lhs16, rhs16) = (f16_bits(&lhs), f16_bits(&rhs));
    let mut out = vec![f32::NAN; vlw * 4 * vlw];
    // SAFETY: FEAT_SME2 and FEAT_SME_F16F32 are present (checked above). `lhs16` holds one vector
    // (svl bytes) and `rhs16` four consecutive vectors, which the loads read; `out` holds vlw rows
    // of 4*vlw f32, exactly what the store loop writes. SMSTART and SMSTOP are in this one block;
    // they zero every Z and P register and FFR, so all are declared clobbered (v8-v15 included,
    // so the compiler saves d8-d15); ZA is not live outside the block; x12 is declared clobbered.
    unsafe {
        asm!(
            ".arch_extension sme2",
            "smstart",
            "zero {{za}}",
            "ptrue p0.h",
            "ptrue pn8.h",
            "ld1h z0.h, p0/z, [{lhs}]",
            "ld1h {{z4.h-z7.h}}, pn8/z, [{rhs}]",
            "fmopa za0.s, p0/m, p0/m, z0.h, z4.h",
            "fmopa za1.s, p0/m, p0/m, z0.h, z5.h",
            "fmopa za2.s, p0/m, p0/m, z0.h, z6.h",
            "fmopa za3.s, p0/m, p0/m, z0.h, z7.h",
            "ptrue p1.s",
            "cntw {vlw}",
            "lsl {v2}, {vlw}, #1",
            "add {v3}, {v2}, {vlw}",
            "mov w12, #0",
            "2:",
            "st1w {{za0h.s[w12, 0]}}, p1, [{o}]",
            "st1w {{za1h.s[w12, 0]}}, p1, [{o}, {vlw}, lsl #2]",
            "st1w {{za2h.s[w12, 0]}}, p1, [{o}, {v2}, lsl #2]",
            "st1w {{za3h.s[w12, 0]}}, p1, [{o}, {v3}, lsl #2]",
            "add {o}, {o}, {vlw}, lsl #4",
            "add w12, w12, #1",
            "cmp x12, {vlw}",
            "b.lo 2b",
            "smstop",
            lhs = in(reg) lhs16.as_ptr(),
            rhs = in(reg) rhs16.as_ptr(),
            o = inout(reg) out.as_mut_ptr() => _,
            vlw = out(reg) _,
            v2 = out(reg) _,
            v3 = out(reg) _,
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
        );
    }
    check(&out, &expected(&lhs, &rhs, vlw));
}

#[test]
fn sme1_cpu_has_sme_without_sme2_and_runs_sme1_code() {
    let caps = hwcap2();
    let probe = if caps & HWCAP2_SME == 0 {
        Err(format!("HWCAP2_SME clear (HWCAP2 = {caps:#x})"))
    } else if caps & HWCAP2_SME2 != 0 {
        Err(format!(
            "HWCAP2_SME2 set: not an SME1-only CPU (HWCAP2 = {caps:#x})"
        ))
    } else {
        Ok(())
    };
    if hetero_tests::require("sme1-emu", probe).is_none() {
        return;
    }
    assert_ne!(caps & HWCAP2_SME, 0);
    assert_eq!(caps & HWCAP2_SME2, 0);
    assert_ne!(
        caps & HWCAP2_SME_F16F32,
        0,
        "SME1 CPU without widening FP16 FMOPA"
    );
    // The crate's own detection must agree: SME1 token yes, SME2 token no.
    assert!(hetero_sme::arch::aarch64::Sme2::try_new().is_none());
    assert!(hetero_sme::arch::aarch64::Sme1::try_new().is_some());

    // SAFETY: HWCAP2_SME is set.
    let svl = unsafe { svl_bytes() };
    let vlw = svl / 4;
    eprintln!("SME1-only CPU, SVL = {} bits", svl * 8);
    let lhs = exact_values(2 * vlw, 0x0bad_cafe);
    let rhs = exact_values(4 * 2 * vlw, 0x5eed_1234);
    let (lhs16, rhs16) = (f16_bits(&lhs), f16_bits(&rhs));
    let mut out = vec![f32::NAN; vlw * 4 * vlw];
    // SAFETY: FEAT_SME with FEAT_SME_F16F32 present (checked above); the block assembles with
    // only `sme` enabled, so it holds no SME2 instruction. `lhs16` holds one vector and `rhs16`
    // four (single-vector loads at #0..#3 mul vl); `out` holds vlw rows of 4*vlw f32. SMSTART and
    // SMSTOP zero every Z and P register and FFR: all are declared clobbered, as is x12; ZA is
    // not live outside the block.
    unsafe {
        asm!(
            ".arch_extension sme",
            "smstart",
            "zero {{za}}",
            "ptrue p0.h",
            "ld1h z0.h, p0/z, [{lhs}]",
            "ld1h z4.h, p0/z, [{rhs}]",
            "ld1h z5.h, p0/z, [{rhs}, #1, mul vl]",
            "ld1h z6.h, p0/z, [{rhs}, #2, mul vl]",
            "ld1h z7.h, p0/z, [{rhs}, #3, mul vl]",
            "fmopa za0.s, p0/m, p0/m, z0.h, z4.h",
            "fmopa za1.s, p0/m, p0/m, z0.h, z5.h",
            "fmopa za2.s, p0/m, p0/m, z0.h, z6.h",
            "fmopa za3.s, p0/m, p0/m, z0.h, z7.h",
            "ptrue p1.s",
            "cntw {vlw}",
            "lsl {v2}, {vlw}, #1",
            "add {v3}, {v2}, {vlw}",
            "mov w12, #0",
            "2:",
            "st1w {{za0h.s[w12, 0]}}, p1, [{o}]",
            "st1w {{za1h.s[w12, 0]}}, p1, [{o}, {vlw}, lsl #2]",
            "st1w {{za2h.s[w12, 0]}}, p1, [{o}, {v2}, lsl #2]",
            "st1w {{za3h.s[w12, 0]}}, p1, [{o}, {v3}, lsl #2]",
            "add {o}, {o}, {vlw}, lsl #4",
            "add w12, w12, #1",
            "cmp x12, {vlw}",
            "b.lo 2b",
            "smstop",
            lhs = in(reg) lhs16.as_ptr(),
            rhs = in(reg) rhs16.as_ptr(),
            o = inout(reg) out.as_mut_ptr() => _,
            vlw = out(reg) _,
            v2 = out(reg) _,
            v3 = out(reg) _,
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
        );
    }
    check(&out, &expected(&lhs, &rhs, vlw));
}
