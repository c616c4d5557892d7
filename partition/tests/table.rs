//! Plan tables: every forced policy executes what it says on a nominal profile, lookups cover
//! exactly the planned shapes and rows, and bad sizes are refused.

use hetero_partition::{Backend, PlanTable, Policy, Profile, Strategy, TableError};

const SHAPES: [(u32, u32); 3] = [(576, 576), (576, 192), (1536, 576)];

fn table(backends: &[Backend], std_m: &[u32], policy: Policy, max_m: u32) -> PlanTable {
    let p = Profile::nominal(backends, std_m).check().unwrap();
    PlanTable::build(&p, policy, &SHAPES, max_m).unwrap()
}

#[test]
fn single_backend_tables_put_everything_there() {
    for b in [Backend::Cpu, Backend::Gpu] {
        let t = table(&[Backend::Cpu, Backend::Gpu], &[], Policy::Single(b), 64);
        for &(k, n) in &SHAPES {
            for m in 1..=64 {
                let p = t.get(k, n, m).unwrap();
                assert_eq!(p.backends(), (b, None));
                assert_eq!((p.k, p.n, p.m), (k, n, m));
            }
        }
        assert_eq!(t.backends(), vec![b]);
    }
}

#[test]
fn column_split_gives_the_cpu_its_share_rounded_to_64() {
    let t = table(
        &[Backend::Cpu, Backend::Gpu],
        &[],
        Policy::WeightCentric(Backend::Cpu, Backend::Gpu, 0.5),
        8,
    );
    let p = t.get(576, 576, 1).unwrap();
    assert_eq!(p.strategy, Strategy::WeightCentric);
    assert_eq!((p.split.a, p.split.b), (Backend::Cpu, Some(Backend::Gpu)));
    assert_eq!(p.split.cols % 64, 0);
    assert!((256..=320).contains(&p.split.cols), "{}", p.split.cols);
}

#[test]
fn forced_npu_rows_take_whole_standard_chunks_and_decode_stays_on_the_partner() {
    let t = table(
        &[Backend::Cpu, Backend::Npu],
        &[32],
        Policy::NpuActivation(Backend::Cpu),
        100,
    );
    // Decode: below the smallest standard length, all on the CPU.
    assert_eq!(t.get(576, 576, 1).unwrap().backends(), (Backend::Cpu, None));
    // 100 rows: three 32-row chunks on the NPU, 4 rows on the CPU.
    let p = t.get(576, 576, 100).unwrap();
    assert_eq!(p.split.a, Backend::Npu);
    assert_eq!(p.split.rows, 96, "{p:?}");
    assert_eq!(p.split.b, Some(Backend::Cpu));
    // Exactly 64 rows: two chunks, nothing for the partner.
    let p = t.get(576, 576, 64).unwrap();
    assert_eq!(p.split.rows, 64);
}

#[test]
fn npu_weight_split_keeps_the_npu_first_with_its_column_share() {
    let t = table(
        &[Backend::Cpu, Backend::Gpu, Backend::Npu],
        &[32],
        Policy::WeightCentric(Backend::Npu, Backend::Gpu, 0.25),
        40,
    );
    let p = t.get(576, 576, 32).unwrap();
    assert_eq!((p.split.a, p.split.b), (Backend::Npu, Some(Backend::Gpu)));
    assert_eq!(p.split.cols, 128, "a quarter of 576 rounded to 64");
}

#[test]
fn lookups_outside_the_table_are_none_and_bad_sizes_are_refused() {
    let t = table(&[Backend::Cpu], &[], Policy::Single(Backend::Cpu), 4);
    assert!(t.get(576, 576, 0).is_none());
    assert!(t.get(576, 576, 5).is_none());
    assert!(t.get(1, 1, 1).is_none());
    assert_eq!(t.plans(576, 192).map(|p| p.len()), Some(4));
    assert_eq!(t.shapes(), &[(576, 192), (576, 576), (1536, 576)]);
    let p = Profile::nominal(&[Backend::Cpu], &[]).check().unwrap();
    let cpu = Policy::Single(Backend::Cpu);
    assert_eq!(
        PlanTable::build(&p, cpu, &SHAPES, 0),
        Err(TableError::BadSize)
    );
    assert_eq!(PlanTable::build(&p, cpu, &[], 4), Err(TableError::BadSize));
    let e = PlanTable::build(&p, Policy::Single(Backend::Gpu), &SHAPES, 4).unwrap_err();
    assert!(matches!(e, TableError::Plan { m: 1, .. }), "{e:?}");
    assert!(e.to_string().contains("gpu"), "{e}");
}
