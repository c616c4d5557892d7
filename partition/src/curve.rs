//! One latency curve: a backend's measured points for one weight shape (and NPU order) on one
//! data path, and the row model that reads it.

use crate::profile::Order;

/// `x` rounded up to a multiple of `t`, in u64 (no overflow for u32 inputs).
pub(crate) fn ceil_to(x: u32, t: u32) -> u64 {
    (x as u64).div_ceil(t as u64) * t as u64
}

/// `x` rounded up to a multiple of `t`, saturating at `u32::MAX`.
pub(crate) fn ceil_sat(x: u32, t: u32) -> u32 {
    ceil_to(x, t).min(u32::MAX as u64) as u32
}

/// Latency curve of one backend for one measured weight shape (and order) on one path, sorted
/// by `m`, made non-decreasing by a running maximum (measurement noise never makes more rows
/// faster).
///
/// The row model, with the backend's row tile `T` (CPU 16, GPU 1, NPU 32):
/// - a measured row count costs what was measured;
/// - other row counts are read at `q = min(ceil_T(m), next measured m)`: rounded up to a whole
///   tile, but never past a point that was measured — linear between points, flat below the
///   first;
/// - beyond the last point, in proportion to whole tiles: `us_last · ceil_T(m) / ceil_T(m_last)`.
///
/// The latency is non-decreasing in `m`.
#[derive(Clone, Debug)]
pub(crate) struct Curve {
    pub k: u32,
    pub n: u32,
    pub order: Order,
    /// Row tile of the backend.
    pub tile: u32,
    pub m: Vec<u32>,
    pub us: Vec<f64>,
    /// NPU curves: latency at each standard shape, precomputed.
    pub std_us: Vec<f64>,
    /// `slope[i]`: µs per row between points `i - 1` and `i` (`slope[0]` unused).
    pub slope: Vec<f64>,
    /// `row_min[i]`: the least `us[j] / m[j]` over `j <= i`.
    pub row_min: Vec<f64>,
    /// `us[last] / ceil_T(m[last])`: µs per row beyond the last point.
    pub tail: f64,
}

impl Curve {
    /// A curve from its points (any order; `m` distinct): sorts, flattens noise, precomputes
    /// slopes, per-row minima and the latency of each standard shape.
    pub(crate) fn new(
        k: u32,
        n: u32,
        order: Order,
        tile: u32,
        mut pts: Vec<(u32, f64)>,
        standard: &[u32],
    ) -> Curve {
        pts.sort_unstable_by_key(|p| p.0);
        let m: Vec<u32> = pts.iter().map(|p| p.0).collect();
        let mut us: Vec<f64> = pts.iter().map(|p| p.1).collect();
        for i in 1..us.len() {
            if us[i] < us[i - 1] {
                us[i] = us[i - 1];
            }
        }
        let last = m.len() - 1;
        let slope = (0..m.len())
            .map(|i| {
                if i == 0 {
                    0.0
                } else {
                    (us[i] - us[i - 1]) / (m[i] - m[i - 1]) as f64
                }
            })
            .collect();
        let mut least = f64::INFINITY;
        let row_min = m
            .iter()
            .zip(&us)
            .map(|(&mi, &t)| {
                least = least.min(t / mi as f64);
                least
            })
            .collect();
        let tail = us[last] / ceil_to(m[last], tile) as f64;
        let mut c = Curve {
            k,
            n,
            order,
            tile,
            m,
            us,
            std_us: Vec::new(),
            slope,
            row_min,
            tail,
        };
        c.std_us = standard.iter().map(|&g| c.lat(g)).collect();
        c
    }

    /// Latency of `m` rows under the row model (see [`Curve`]).
    pub(crate) fn lat(&self, m: u32) -> f64 {
        let ms = &self.m;
        let i = ms.partition_point(|&x| x < m);
        if i == ms.len() {
            return self.tail * ceil_to(m, self.tile) as f64;
        }
        if i == 0 || ms[i] == m {
            // Measured, or flat below the first point.
            return self.us[i];
        }
        let q = ceil_sat(m, self.tile).min(ms[i]);
        self.us[i - 1] + self.slope[i] * (q - ms[i - 1]) as f64
    }

    /// The row count the model reads the curve at for `m` rows, and the nearest measured row
    /// count: equal inside the measured range, apart when it extrapolates.
    pub(crate) fn read_at(&self, m: u32) -> (u32, u32) {
        let ms = &self.m;
        let i = ms.partition_point(|&x| x < m);
        if i == ms.len() {
            return (ceil_sat(m, self.tile), ms[ms.len() - 1]);
        }
        if i == 0 {
            let q = ceil_sat(m, self.tile).min(ms[0]);
            return (q, ms[0]);
        }
        // Inside the measured range: interpolated, not extrapolated.
        (m, m)
    }

    /// A lower bound of `lat(q) / q` over `1 <= q <= m`. Up to the last point `lat(q)` is at
    /// least the plain linear interpolation at `q` (flat below the first point), and on each
    /// linear piece `a + b·q` of that the ratio is monotone in `q`, so its least value is at a
    /// point or at the end of the range; beyond the last point
    /// `lat(q) / q = tail · ceil_T(q) / q >= tail`.
    pub(crate) fn per_row_lb(&self, m: u32) -> f64 {
        let ms = &self.m;
        let last = ms.len() - 1;
        if m > ms[last] {
            return self.row_min[last].min(self.tail);
        }
        // Plain interpolation at m (flat below the first point) bounds `lat(m)` from below, as
        // `lat` reads the curve at some `q' >= m`.
        let i = ms.partition_point(|&x| x < m);
        if i == 0 || ms[i] == m {
            let at = self.us[i] / m as f64;
            return if ms[i] == m { self.row_min[i] } else { at };
        }
        let at = self.us[i - 1] + self.slope[i] * (m - ms[i - 1]) as f64;
        (at / m as f64).min(self.row_min[i - 1])
    }
}
