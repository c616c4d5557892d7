//! Shared test helpers: a small PRNG, rounding helpers and the f64 reference.
#![allow(dead_code)]

use hetero_sme::{GgmlType, Kernel, KernelKind, PackedFormat};

/// xorshift64* PRNG (deterministic per seed).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

pub fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

pub fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// `x` as the little-endian bytes of an FP16.
pub fn f16b(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// `n` rows of `k` values of `ty` (one of `hetero_sme::INT8_TYPES`) as GGUF bytes: random quant bits,
/// scales set to sane FP16 values (positive super-scales for the K-quants' affine forms,
/// either sign elsewhere).
pub fn rand_gguf(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let (be, bb) = ty.block().unwrap();
    let mut out = Vec::with_capacity(n * k / be * bb);
    for _ in 0..n * k / be {
        let mut b: Vec<u8> = (0..bb).map(|_| rng.next_u64() as u8).collect();
        let d = 0.002 + 0.05 * rng.f32().abs();
        let m = 0.1 * rng.f32();
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => b[..2].copy_from_slice(&f16b(d)),
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                b[..2].copy_from_slice(&f16b(d));
                b[2..4].copy_from_slice(&f16b(m));
            }
            GgmlType::Q4K | GgmlType::Q5K => {
                b[..2].copy_from_slice(&f16b(d / 32.0));
                b[2..4].copy_from_slice(&f16b(m.abs() / 32.0));
            }
            GgmlType::Q6K => b[208..210].copy_from_slice(&f16b(d / 64.0)),
            _ => unreachable!("{ty:?} is not an int8 format"),
        }
        out.extend(b);
    }
    out
}

/// Every implementation this CPU supports, with the ones missing here listed as skipped.
pub fn kernels() -> Vec<Kernel> {
    let mut v = Vec::new();
    for kind in [
        KernelKind::Portable,
        KernelKind::Avx2,
        KernelKind::Avx512,
        KernelKind::Amx,
        KernelKind::Neon,
        KernelKind::Sme1,
        KernelKind::Sme2,
    ] {
        let probe = Kernel::new(kind);
        // On aarch64 the SME kernels are a required backend when CI says so (HETERO_REQUIRE
        // names sme-emu for the SME2 emulator, sme1-emu for the SME-only one): absence fails
        // instead of skipping. Elsewhere they simply do not exist.
        let required = match kind {
            KernelKind::Sme2 if cfg!(target_arch = "aarch64") => Some("sme-emu"),
            KernelKind::Sme1 if cfg!(target_arch = "aarch64") => Some("sme1-emu"),
            _ => None,
        };
        match (probe, required) {
            (Ok(k), _) => v.push(k),
            (Err(e), Some(backend)) => {
                if let Some(k) = hetero_tests::require(backend, Err::<Kernel, _>(e)) {
                    v.push(k);
                }
            }
            (Err(e), None) => eprintln!("SKIP kernel {kind:?}: {e}"),
        }
    }
    v
}

/// How a kernel rounds its inputs: AMX rounds A to BF16, SME packs A as FP16.
pub fn a_rounding(k: Kernel) -> fn(f32) -> f32 {
    match k.kind() {
        KernelKind::Amx => round_bf16,
        KernelKind::Sme1 | KernelKind::Sme2 => round_f16,
        _ => |x| x,
    }
}

/// The kernels the big grids run: all of them natively; under emulation (non-x86-64 targets run
/// in QEMU here, ~50x slower) only the SME kernels: the portable one is the same Rust code
/// already proven natively, and NEON's GEMM has its own tests (`tests/aarch64*.rs`); the small
/// tests (bad input, GEMV, parallel) still run every kernel.
pub fn grid_kernels() -> Vec<Kernel> {
    kernels()
        .into_iter()
        .filter(|k| {
            cfg!(target_arch = "x86_64")
                || !matches!(k.kind(), KernelKind::Portable | KernelKind::Neon)
        })
        .collect()
}

pub fn w_rounding(f: PackedFormat) -> fn(f32) -> f32 {
    match f {
        PackedFormat::F16 => round_f16,
        PackedFormat::Bf16 => round_bf16,
    }
}
