//! The plans an executor runs, one partition [`PlanTable`] per phase: a matmul of at most
//! [`DECODE_ROWS`] rows (a decode token, its speculative drafts, a prefill's one-row LM head, a
//! prompt's last short chunk) reads the profile's **decode** curves; more rows (prompt chunks)
//! its **prefill** curves. A profile written by `engine-min profile` measures each backend in
//! both phases at exactly these row counts, so every plan the executor looks up reads a
//! measured curve of its own phase.

use hetero_partition::{
    Backend as Pb, CheckedProfile, OpPlan, Phase, PlanTable, Policy, TableError,
};

/// Most rows a decode-phase matmul has: one token plus up to three draft tokens (EdgeAgent's
/// speculative steps verify a few rows at once).
pub const DECODE_ROWS: u32 = 4;

/// The phase of a matmul (or a resident step) of `m` rows: decode up to [`DECODE_ROWS`].
pub fn phase_of_rows(m: u32) -> Phase {
    if m <= DECODE_ROWS {
        Phase::Decode
    } else {
        Phase::Prefill
    }
}

/// The plan tables of an executor: one per phase, or one table for every row count.
#[derive(Clone, Debug, PartialEq)]
pub struct PhasePlans {
    /// Rows `1..=decode.max_m()`, in the decode phase (`None`: `main` has every row count).
    decode: Option<PlanTable>,
    /// Every other row count up to `max_m` (the prefill phase), or all of them.
    main: PlanTable,
}

impl PhasePlans {
    /// Plans every shape under `policy` on `profile`: rows `1..=min(DECODE_ROWS, max_m)` in
    /// the decode phase, rows above in the prefill phase.
    pub fn build(
        profile: &CheckedProfile,
        policy: Policy,
        shapes: &[(u32, u32)],
        max_m: u32,
    ) -> Result<PhasePlans, TableError> {
        let decode = PlanTable::build_phase(
            profile,
            Phase::Decode,
            policy,
            shapes,
            max_m.min(DECODE_ROWS),
        )?;
        if max_m <= DECODE_ROWS {
            return Ok(PhasePlans {
                decode: None,
                main: decode,
            });
        }
        let main = PlanTable::build_phase(profile, Phase::Prefill, policy, shapes, max_m)?;
        Ok(PhasePlans {
            decode: Some(decode),
            main,
        })
    }

    /// The table that holds the plans of `m` rows.
    fn table_of(&self, m: u32) -> &PlanTable {
        match &self.decode {
            Some(d) if m <= d.max_m() => d,
            _ => &self.main,
        }
    }

    /// The phase the plan of `m` rows was made for.
    pub fn phase_of(&self, m: u32) -> Phase {
        let t = self.table_of(m);
        t.phase().unwrap_or(Phase::of_rows(m))
    }

    /// The plan of `(k, n)` at `m` rows.
    pub fn get(&self, k: u32, n: u32, m: u32) -> Option<&OpPlan> {
        self.table_of(m).get(k, n, m)
    }

    /// The policy the tables were built under.
    pub fn policy(&self) -> Policy {
        self.main.policy()
    }

    /// Largest row count planned.
    pub fn max_m(&self) -> u32 {
        self.main.max_m()
    }

    /// The planned shapes, sorted.
    pub fn shapes(&self) -> &[(u32, u32)] {
        self.main.shapes()
    }

    /// The backends some plan in use uses (each once, in `Backend` order).
    pub fn backends(&self) -> Vec<Pb> {
        let mut v = Vec::new();
        for &(k, n) in self.shapes() {
            for m in 1..=self.max_m() {
                if let Some(p) = self.get(k, n, m) {
                    for piece in p.pieces().as_slice() {
                        if !v.contains(&piece.backend) {
                            v.push(piece.backend);
                        }
                    }
                }
            }
        }
        v.sort_unstable();
        v
    }

    /// Plans in use that carry an extrapolation warning.
    pub fn extrapolated(&self) -> impl Iterator<Item = &OpPlan> {
        self.shapes().iter().flat_map(move |&(k, n)| {
            (1..=self.max_m())
                .filter_map(move |m| self.get(k, n, m).filter(|p| p.extrapolation.is_some()))
        })
    }
}

impl From<PlanTable> for PhasePlans {
    /// One table for every row count (each in the phase it was built for).
    fn from(main: PlanTable) -> PhasePlans {
        PhasePlans { decode: None, main }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetero_partition::Profile;

    /// A CPU whose decode path (1 and 4 rows) and prefill path (16 and 128 rows) differ.
    fn checked() -> CheckedProfile {
        Profile::from_json(
            r#"{ "backends": [ { "backend": "cpu", "paths": [
                { "name": "d", "phase": "decode", "points": [
                    { "k": 64, "n": 64, "m": 1, "us": 3 }, { "k": 64, "n": 64, "m": 4, "us": 7 } ] },
                { "name": "p", "phase": "prefill", "points": [
                    { "k": 64, "n": 64, "m": 16, "us": 100 }, { "k": 64, "n": 64, "m": 128, "us": 800 } ] }
              ] } ] }"#,
        )
        .expect("profile")
        .check()
        .expect("checked")
    }

    #[test]
    fn decode_rows_read_the_decode_curve() {
        let p = PhasePlans::build(&checked(), Policy::Auto, &[(64, 64)], 128).expect("plans");
        let us = |m| p.get(64, 64, m).expect("plan").predicted_us();
        assert_eq!(us(1), 3.0);
        // Two rows: the CPU's 16-row tile, but never past the next measured point (4 rows).
        assert_eq!(us(2), 7.0);
        assert_eq!(us(4), 7.0);
        // Five rows: the prefill curve, flat below its first point.
        assert_eq!(us(5), 100.0);
        assert_eq!(us(128), 800.0);
        assert_eq!(p.phase_of(4), Phase::Decode);
        assert_eq!(p.phase_of(5), Phase::Prefill);
        assert_eq!(p.max_m(), 128);
        assert_eq!(p.backends(), [Pb::Cpu]);
        assert!(p.get(64, 64, 129).is_none());
        assert!(p.get(64, 32, 1).is_none());
        // Up to DECODE_ROWS rows in all: one decode table.
        let small = PhasePlans::build(&checked(), Policy::Auto, &[(64, 64)], 3).expect("plans");
        assert_eq!(small.max_m(), 3);
        assert_eq!(small.phase_of(3), Phase::Decode);
        assert_eq!(small.get(64, 64, 3).expect("plan").predicted_us(), 7.0);
    }

    #[test]
    fn one_table_keeps_its_phases() {
        let t = PlanTable::build(&checked(), Policy::Auto, &[(64, 64)], 8).expect("table");
        let p = PhasePlans::from(t);
        assert_eq!(p.phase_of(1), Phase::Decode);
        assert_eq!(p.phase_of(2), Phase::Prefill);
        assert_eq!(p.get(64, 64, 2).expect("plan").predicted_us(), 100.0);
    }
}
