//! The CPU–GPU column-split hook: [`Decoder::matmul_rows`], a column range of any resident
//! matrix from host rows or a resident activation, read back alone.

use super::hostio::as_f32;
use super::ops::{self, Cols, Epi, Op};
use super::{bytes_of, Decoder, MatInput, Matrix, OpKind};
use crate::error::{Error, Result};
use crate::kernels::RopeMode;
use std::ops::Range;

/// Key of a cached [`Decoder::matmul_rows`] launch.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct MatKey {
    layer: usize,
    which: Matrix,
    start: usize,
    end: usize,
    gemm: bool,
    input: u8,
    norm: bool,
}

impl Decoder {
    /// `out = W[cols] x` for `m` rows of `x` (`m <= max_rows`): output columns `cols` of a
    /// resident weight (rows `cols` of `W`), with the weight's RMSNorm fused into the load when
    /// `norm` (Q/K/V: the layer's attention norm, Gate/Up: its FFN norm, Head: the final
    /// norm); `out` is `m * cols.len()` floats, row-major. The hook of a CPU–GPU column split:
    /// the device computes its columns from a resident (or uploaded) activation and only those
    /// columns come back. Q and K columns are refused in NeoX mode (their rows are stored in
    /// pair order). Launches are prepared on first use and cached.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_rows(
        &mut self,
        layer: usize,
        which: Matrix,
        cols: Range<usize>,
        x: MatInput<'_>,
        m: usize,
        norm: bool,
        out: &mut [f32],
    ) -> Result<()> {
        self.alive()?;
        let c = &self.cfg;
        let (d, dq, dkv, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.d_ff);
        if which != Matrix::Head && layer >= c.n_layer {
            return Err(Error::BadShape(format!("layer {layer} of {}", c.n_layer)));
        }
        if c.rope_mode == RopeMode::Neox && matches!(which, Matrix::Q | Matrix::K) {
            return Err(Error::NotApplicable(
                "Q/K columns are stored in RoPE pair order in NeoX mode",
            ));
        }
        // (logical columns, input width); the first physical row and row stride in its device
        // matrix (`mat_op` finds the matrix).
        let (width, k) = match which {
            Matrix::Q => (dq, d),
            Matrix::K | Matrix::V => (dkv, d),
            Matrix::O => (d, dq),
            Matrix::Gate | Matrix::Up => (ff, d),
            Matrix::Down => (d, ff),
            Matrix::Head => (c.vocab, d),
        };
        let n = cols.len();
        if cols.start >= cols.end || cols.end > width {
            return Err(Error::BadShape(format!(
                "columns {cols:?} of a matrix with {width}"
            )));
        }
        if m == 0 || m > c.max_rows {
            return Err(Error::BadShape(format!(
                "{m} rows (1..={} allowed)",
                c.max_rows
            )));
        }
        if out.len() != m * n {
            return Err(Error::BadShape(format!(
                "out has {} values, {m} x {n} needed",
                out.len()
            )));
        }
        let has_norm = matches!(
            which,
            Matrix::Q | Matrix::K | Matrix::V | Matrix::Gate | Matrix::Up | Matrix::Head
        );
        if norm && !has_norm {
            return Err(Error::NotApplicable("this matrix has no RMSNorm before it"));
        }
        let (input, src_k) = match x {
            MatInput::Host(v) => {
                if v.len() != m * k {
                    return Err(Error::BadShape(format!(
                        "x has {} values, {m} x {k} needed",
                        v.len()
                    )));
                }
                (0u8, k)
            }
            MatInput::Hidden => (1, d),
            MatInput::Attention => (2, dq),
            MatInput::Ffn => (3, ff),
        };
        if src_k != k {
            return Err(Error::BadShape(format!(
                "this matrix reads {k} values a row; the chosen activation has {src_k}"
            )));
        }
        let key = MatKey {
            layer: if which == Matrix::Head { 0 } else { layer },
            which,
            start: cols.start,
            end: cols.end,
            gemm: m > 1,
            input,
            norm,
        };
        if !self.mat_ops.contains_key(&key) {
            let op = self.mat_op(key, n)?;
            self.mat_ops.insert(key, op);
        }
        let r = self.run_mat(key, x, m, n);
        if let Err(e) = r {
            return Err(self.fail(e));
        }
        out.copy_from_slice(as_f32(self.out.view(m * n * 4)?)?);
        Ok(())
    }

    /// The launch of a `matmul_rows` call: the columns `key` names of its matrix.
    fn mat_op(&self, key: MatKey, n: usize) -> Result<Op> {
        let layer = |i: usize| {
            self.layers
                .get(i)
                .ok_or_else(|| Error::BadShape(format!("layer {i} of {}", self.layers.len())))
        };
        let (dq, dkv) = (self.cfg.q_dim(), self.cfg.kv_dim());
        // (the matrix, its physical row of column 0 and row stride, the norm before it; O and
        // Down have none, their entry is unused)
        let (mat, base, stride, g) = match key.which {
            Matrix::Q | Matrix::K | Matrix::V => {
                let l = layer(key.layer)?;
                let col = match key.which {
                    Matrix::Q => 0,
                    Matrix::K => dq,
                    _ => dq + dkv,
                };
                // The run of one type that holds these columns of [q; k; v].
                let p = l
                    .qkv
                    .iter()
                    .find(|p| (p.col0..p.col0 + p.mat.n).contains(&col))
                    .ok_or(Error::NotApplicable("q/k/v run missing"))?;
                (&p.mat, col - p.col0, 1, &l.attn_norm)
            }
            Matrix::O => {
                let l = layer(key.layer)?;
                (&l.o, 0, 1, &l.attn_norm)
            }
            Matrix::Gate | Matrix::Up => {
                let l = layer(key.layer)?;
                let up = usize::from(key.which == Matrix::Up);
                match &l.gate_up[..] {
                    // Interleaved: gate j at row 2j, up j at 2j + 1.
                    [gu] => (gu, up, 2, &l.ffn_norm),
                    [g, u] => (if up == 1 { u } else { g }, 0, 1, &l.ffn_norm),
                    _ => return Err(Error::NotApplicable("gate/up has one or two matrices")),
                }
            }
            Matrix::Down => {
                let l = layer(key.layer)?;
                (&l.down, 0, 1, &l.ffn_norm)
            }
            Matrix::Head => (&self.head, 0, 1, &self.output_norm),
        };
        let (x, ldx) = match key.input {
            0 => (self.input.buffer(), mat.k),
            1 => (&self.x, self.cfg.d_model),
            2 => (&self.att, self.cfg.q_dim()),
            _ => (&self.h, self.cfg.d_ff),
        };
        let cols = Cols {
            wrow0: base + key.start * stride,
            wstride: stride,
            n,
        };
        let mut op = ops::matmul(
            &self.dev,
            &self.legacy,
            OpKind::Matmul,
            mat,
            cols,
            x,
            ldx,
            key.norm.then_some((g, self.cfg.eps)),
            Epi::Store {
                y: self.out.buffer(),
                ld: n,
            },
            key.gemm,
            self.cfg.max_rows,
            &self.shared,
        )?;
        op.set_x_row(0)?;
        Ok(op)
    }

    fn run_mat(&mut self, key: MatKey, x: MatInput<'_>, m: usize, n: usize) -> Result<()> {
        let t = self.opts.timeout;
        self.out.release()?;
        if let MatInput::Host(v) = x {
            self.input.write(bytes_of(v), t)?;
        }
        let op = self
            .mat_ops
            .get_mut(&key)
            .ok_or(Error::NotApplicable("matmul launch missing"))?;
        op.set_rows(m)?;
        self.rec.enqueue(&self.dev, op)?;
        // Another step's readout is gone: the readback buffer now holds these columns.
        self.done = None;
        self.out.read(m * n * 4, t)
    }
}
