//! Bad input: typed errors, no panic, nothing written to the output.

mod common;

use common::*;
use hetero_sme::*;

#[test]
fn gemm_rejects_bad_input_without_writing() {
    let (m, k, n) = (4, 10, 70);
    let a = vec![0.5f32; m * k];
    let packed = vec![0u16; packed_len(k, n)];
    let w = PackedRef::new(&packed, k, n, PackedFormat::F16).unwrap();
    let bias = vec![1f32; n];
    for kernel in kernels() {
        let base = Gemm {
            a: Lhs::F32(&a),
            m,
            lda: k,
            w,
            bias: Some(&bias),
            accumulate: false,
        };
        let cases: Vec<(Gemm, usize, usize)> = vec![
            // A too short.
            (
                Gemm {
                    a: Lhs::F32(&a[..m * k - 1]),
                    ..base
                },
                n,
                m * n,
            ),
            // lda below K (K not matching the packed weight).
            (Gemm { lda: k - 1, ..base }, n, m * n),
            // bias length wrong.
            (
                Gemm {
                    bias: Some(&bias[..n - 1]),
                    ..base
                },
                n,
                m * n,
            ),
            // C too short.
            (base, n, m * n - 1),
            // ldc below N.
            (base, n - 1, m * n),
        ];
        for (g, ldc, clen) in cases {
            if !kernel.supports(g.w.format()) {
                continue;
            }
            let mut c = vec![-7f32; clen];
            let e = kernel.gemm(&g, &mut c, ldc);
            assert!(e.is_err(), "{}: accepted bad input", kernel.name());
            assert!(
                c.iter().all(|&x| x == -7.0),
                "{}: wrote C on error",
                kernel.name()
            );
            // The same with an FP16 C.
            let mut c16 = vec![0xBEEFu16; clen];
            let e = kernel.gemm_f16(&g, &mut c16, ldc);
            assert!(e.is_err(), "{}: accepted bad input (FP16 C)", kernel.name());
            assert!(
                c16.iter().all(|&x| x == 0xBEEF),
                "{}: wrote FP16 C on error",
                kernel.name()
            );
        }
    }
}

#[test]
fn packed_ref_and_pack_reject_bad_input() {
    let packed = vec![0u16; packed_len(3, 65) - 1];
    assert!(matches!(
        PackedRef::new(&packed, 3, 65, PackedFormat::F16),
        Err(Error::BufferTooSmall { .. })
    ));
    let src = vec![0f32; 12];
    let s = WeightSource {
        data: &src,
        k: 3,
        n: 4,
        ld: 4,
        layout: Layout::RowMajor,
    };
    let mut dst = vec![0u16; packed_len(3, 4)];
    assert!(matches!(
        pack_f32(&s, 2..5, PackedFormat::F16, &mut dst),
        Err(Error::BadRange { .. })
    ));
    assert!(matches!(
        pack_f32(&s, 0..4, PackedFormat::F16, &mut dst[..10]),
        Err(Error::BufferTooSmall { .. })
    ));
    let s2 = WeightSource { ld: 3, ..s };
    assert!(matches!(
        pack_f32(&s2, 0..4, PackedFormat::F16, &mut dst),
        Err(Error::BadStride { .. })
    ));
    let s3 = WeightSource {
        data: &src[..11],
        ..s
    };
    assert!(matches!(
        pack_f32(&s3, 0..4, PackedFormat::F16, &mut dst),
        Err(Error::BufferTooSmall { .. })
    ));
}

#[test]
fn gemv_rejects_bad_input_without_writing() {
    let w = vec![BlockQ4_0::default(); 4 * 2];
    let x = vec![1f32; 17 * 64];
    for kernel in kernels() {
        let mut y = vec![-7f32; 17 * 4];
        // Too many rows.
        let g = QGemv {
            x: &x,
            m: 17,
            k: 64,
            w: QWeights::Q4_0(&w),
        };
        assert!(matches!(
            kernel.qgemv(&g, &mut y, 4),
            Err(Error::TooManyRows { .. })
        ));
        // K not a multiple of 32.
        let g = QGemv {
            x: &x,
            m: 1,
            k: 48,
            w: QWeights::Q4_0(&w),
        };
        assert!(kernel.qgemv(&g, &mut y, 4).is_err());
        // Blocks not a multiple of K/32.
        let g = QGemv {
            x: &x,
            m: 1,
            k: 96,
            w: QWeights::Q4_0(&w),
        };
        assert!(kernel.qgemv(&g, &mut y, 4).is_err());
        // x too short.
        let g = QGemv {
            x: &x[..63],
            m: 1,
            k: 64,
            w: QWeights::Q4_0(&w),
        };
        assert!(kernel.qgemv(&g, &mut y, 4).is_err());
        // y too short / ldy too small.
        let g = QGemv {
            x: &x,
            m: 2,
            k: 64,
            w: QWeights::Q4_0(&w),
        };
        assert!(kernel.qgemv(&g, &mut y[..7], 4).is_err());
        assert!(kernel.qgemv(&g, &mut y, 3).is_err());
        assert!(
            y.iter().all(|&v| v == -7.0),
            "{}: wrote y on error",
            kernel.name()
        );
    }
    let mut y = vec![-7f32; 64];
    assert!(matches!(
        gemv_packed(
            &x,
            17,
            PackedRef::new(&[], 0, 0, PackedFormat::F16).unwrap(),
            &mut y,
            1
        ),
        Err(Error::TooManyRows { .. })
    ));
}

#[test]
fn unsupported_kernel_is_a_typed_error() {
    for kind in [
        KernelKind::Portable,
        KernelKind::Avx2,
        KernelKind::Avx512,
        KernelKind::Amx,
        KernelKind::Neon,
        KernelKind::Sme1,
        KernelKind::Sme2,
    ] {
        match Kernel::new(kind) {
            Ok(k) => assert_eq!(k.kind(), kind),
            Err(e) => assert!(matches!(e, Error::Unsupported { .. }), "{e}"),
        }
    }
    // AMX reads BF16 only: F16 weights are a typed error, not a panic.
    if let Ok(amx) = Kernel::new(KernelKind::Amx) {
        let packed = vec![0u16; packed_len(2, 2)];
        let g = Gemm {
            a: Lhs::F32(&[0.0; 4]),
            m: 2,
            lda: 2,
            w: PackedRef::new(&packed, 2, 2, PackedFormat::F16).unwrap(),
            bias: None,
            accumulate: false,
        };
        let mut c = [0f32; 4];
        assert!(matches!(
            amx.gemm(&g, &mut c, 2),
            Err(Error::FormatMismatch { .. })
        ));
    }
}
