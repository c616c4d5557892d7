//! ABI test: the tile kernels preserve the AAPCS64 callee-saved registers (x19–x28, d8–d15)
//! although SMSTART/SMSTOP zero every Z register, leave streaming mode and ZA off (SVCR = 0),
//! and keep ordinary Rust state intact.
//!
//! An `asm!` wrapper saves the real x19–x28/d8–d15, loads canaries into them, calls the kernel
//! through an `extern "C"` trampoline, records the registers after the call, and restores the
//! originals; the test then compares the record with the canaries.
#![cfg(target_arch = "aarch64")]

mod aarch64_common;

use aarch64_common::*;
use core::arch::asm;
use hetero_sme::arch::aarch64::{lhs_block_len, pack_lhs_f32, Sme1, Sme2};

/// Everything the trampoline needs for one kernel call.
struct Call {
    tile: Tile,
    lhs: Vec<u16>,
    packed: Vec<u16>,
    kp: usize,
    npanels: usize,
    c: Vec<f32>,
    ldc: usize,
    rows: usize,
    cols: usize,
    bias: Vec<f32>,
}

extern "C" fn trampoline(call: *mut Call) {
    // SAFETY: `call` points to the live `Call` that `call_with_canaries` received exclusively.
    let call = unsafe { &mut *call };
    // SAFETY: lhs holds lhs_block_len(tile_rows, 2*kp); packed holds npanels*kp*128; c holds
    // rows rows of ldc >= cols; bias holds cols; rows <= tile_rows; cols <= 64*npanels
    // (established by `setup`).
    unsafe {
        call.tile.block(
            call.lhs.as_ptr(),
            call.packed.as_ptr(),
            call.kp,
            call.npanels,
            call.c.as_mut_ptr(),
            call.ldc,
            call.rows,
            call.cols,
            false,
            call.bias.as_ptr(),
        )
    }
}

/// x19..x28 then d8..d15.
const NREGS: usize = 18;

fn canaries() -> [u64; NREGS] {
    let mut c = [0u64; NREGS];
    for (i, v) in c.iter_mut().enumerate() {
        *v = 0xc0de_0000_0000_0000 | ((i as u64) << 32) | (0x1234_5678 ^ (i as u64 * 0x1111));
    }
    c
}

/// Calls `trampoline(call)` with canaries in x19–x28/d8–d15; returns their values after it.
fn call_with_canaries(call: &mut Call) -> [u64; NREGS] {
    let canary = canaries();
    let mut save = [0u64; NREGS];
    let mut after = [0u64; NREGS];
    let f: extern "C" fn(*mut Call) = trampoline;
    // The four pointers travel in fixed caller-saved registers, never in `in(reg)` operands: the
    // block overwrites x19–x28 with canaries before its last use of them, and a `reg` operand
    // may be allocated to any of those (a plain `--release` build put `after` in x23, so the
    // record was stored through a canary value: SIGSEGV). x9–x12 are not touched before the
    // call; clobber_abi("C") declares them, x0 and x30 clobbered by it.
    // SAFETY: the block saves x19–x28 and d8–d15 to `save` before loading canaries and restores
    // them from `save` before it ends, so it leaves every register it does not declare exactly
    // as it found it. The call follows the C ABI (clobber_abi("C")); sp stays 16-byte aligned
    // (`save` and `after` are pushed as a pair across the call and popped into x9/x10 again).
    // `save`, `after` and `canary` are NREGS u64 each; `call` is exclusively borrowed.
    unsafe {
        asm!(
            "stp x19, x20, [x9, #0]",
            "stp x21, x22, [x9, #16]",
            "stp x23, x24, [x9, #32]",
            "stp x25, x26, [x9, #48]",
            "stp x27, x28, [x9, #64]",
            "stp d8, d9, [x9, #80]",
            "stp d10, d11, [x9, #96]",
            "stp d12, d13, [x9, #112]",
            "stp d14, d15, [x9, #128]",
            "ldp x19, x20, [x11, #0]",
            "ldp x21, x22, [x11, #16]",
            "ldp x23, x24, [x11, #32]",
            "ldp x25, x26, [x11, #48]",
            "ldp x27, x28, [x11, #64]",
            "ldp d8, d9, [x11, #80]",
            "ldp d10, d11, [x11, #96]",
            "ldp d12, d13, [x11, #112]",
            "ldp d14, d15, [x11, #128]",
            "stp x9, x10, [sp, #-16]!",
            "blr x12",
            "ldp x9, x10, [sp], #16",
            "stp x19, x20, [x10, #0]",
            "stp x21, x22, [x10, #16]",
            "stp x23, x24, [x10, #32]",
            "stp x25, x26, [x10, #48]",
            "stp x27, x28, [x10, #64]",
            "stp d8, d9, [x10, #80]",
            "stp d10, d11, [x10, #96]",
            "stp d12, d13, [x10, #112]",
            "stp d14, d15, [x10, #128]",
            "ldp x19, x20, [x9, #0]",
            "ldp x21, x22, [x9, #16]",
            "ldp x23, x24, [x9, #32]",
            "ldp x25, x26, [x9, #48]",
            "ldp x27, x28, [x9, #64]",
            "ldp d8, d9, [x9, #80]",
            "ldp d10, d11, [x9, #96]",
            "ldp d12, d13, [x9, #112]",
            "ldp d14, d15, [x9, #128]",
            in("x9") save.as_mut_ptr(),
            in("x10") after.as_mut_ptr(),
            in("x11") canary.as_ptr(),
            in("x12") f,
            in("x0") call as *mut Call,
            clobber_abi("C"),
        );
    }
    after
}

fn svcr() -> u64 {
    let v: u64;
    // SAFETY: reading SVCR is defined on any FEAT_SME CPU (the callers hold a token).
    unsafe { asm!(".arch_extension sme", "mrs {0}, svcr", out(reg) v, options(nomem, nostack)) };
    v
}

fn setup(tile: Tile) -> (Call, Vec<f64>, Vec<f64>) {
    let (m, n, k) = (tile.tile_rows() - 1, 100, 37);
    let mut rng = Rng::new(0xab1);
    let a = rng.vec(m * k);
    let w = rng.vec(k * n);
    let bias = rng.vec(n);
    let tr = tile.tile_rows();
    let mut lhs = vec![0u16; lhs_block_len(tr, k)];
    pack_lhs_f32(&a, k, m, k, tr, &mut lhs).unwrap();
    let a16: Vec<u16> = a.iter().map(|&x| f16(x)).collect();
    let (want, mag) = reference(&a16, k, m, k, n, &w, n, Some(&bias), None);
    let call = Call {
        tile,
        lhs,
        packed: pack_w(&w, n, k, n),
        kp: k.div_ceil(2),
        npanels: n.div_ceil(64),
        c: vec![f32::NAN; m * n],
        ldc: n,
        rows: m,
        cols: n,
        bias,
    };
    (call, want, mag)
}

fn abi_case(tile: Tile) {
    let (mut call, want, mag) = setup(tile);
    // Ordinary Rust state live across the call: floats in callee-saved FP registers are likely.
    let live: [f64; 8] = core::array::from_fn(|i| (i as f64 + 0.5).sqrt());
    let live_sum: f64 = live.iter().sum();
    let after = call_with_canaries(&mut call);
    let expect = canaries();
    for (i, (&got, &exp)) in after.iter().zip(&expect).enumerate() {
        let name = if i < 10 {
            format!("x{}", 19 + i)
        } else {
            format!("d{}", i - 2)
        };
        assert_eq!(
            got, exp,
            "{tile:?}: {name} not preserved: {got:#x} != {exp:#x}"
        );
    }
    assert_eq!(svcr(), 0, "{tile:?}: streaming mode or ZA left on");
    assert_eq!(live.iter().sum::<f64>(), live_sum);
    for (idx, (&g, (&wv, &mg))) in call.c.iter().zip(want.iter().zip(&mag)).enumerate() {
        assert!(
            (g as f64 - wv).abs() <= tolerance(37, mg),
            "{tile:?}: C[{idx}] = {g}, want {wv}"
        );
    }
    // And again through a plain call, after which NEON code (illegal in streaming mode without
    // FEAT_SME_FA64) and float formatting must still work.
    call.c.fill(f32::NAN);
    trampoline(&mut call);
    let s = format!("{:.3}", call.c[0] as f64 + live[3]);
    assert!(!s.is_empty());
    assert_eq!(svcr(), 0);
}

#[test]
fn sme2_preserves_callee_saved_registers() {
    let Some(t) = hetero_tests::require("sme-emu", Sme2::probe()) else {
        return;
    };
    abi_case(Tile::Sme2(t));
}

#[test]
fn sme1_preserves_callee_saved_registers() {
    let Some(t) = hetero_tests::require("sme1-emu", Sme1::probe()) else {
        return;
    };
    abi_case(Tile::Sme1(t));
}
