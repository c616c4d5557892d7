//! The CPU's read bandwidth: the limit a memory-bound decode is measured against.
//!
//! `read-probe [--mib N] [--threads 1,2,8,16] [--reps R]` reads a buffer of N MiB (default
//! 2048: well above any last-level cache here) split into one contiguous share per thread, R
//! times per thread count (default 7), and prints one line per thread count with the median and
//! best GB/s (bytes read / wall time of the slowest thread). Every share is summed (eight
//! independent wrapping u64 accumulators, which the compiler turns into wide vector loads) and
//! the sum is printed, so the reads cannot be optimized away. The buffer is written once before
//! timing, so page faults are not timed.

use std::time::Instant;

fn sum(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    let mut s = tail.iter().fold(0u64, |a, &w| a.wrapping_add(w));
    for a in acc {
        s = s.wrapping_add(a);
    }
    s
}

fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("not a positive count: {t:?}"))
        })
        .collect()
}

fn main() {
    let mut mib = 2048usize;
    let mut threads = vec![1usize, 2];
    let mut reps = 7usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next();
        let r = match (a.as_str(), v) {
            ("--mib", Some(v)) => v.parse().map(|n| mib = n).map_err(|e| e.to_string()),
            ("--threads", Some(v)) => parse_list(v).map(|l| threads = l),
            ("--reps", Some(v)) => v.parse().map(|n| reps = n).map_err(|e| e.to_string()),
            _ => Err(format!("unknown or incomplete argument {a:?}")),
        };
        if let Err(e) = r {
            eprintln!("read-probe: {e}\nusage: read-probe [--mib N] [--threads 1,2,8] [--reps R]");
            std::process::exit(2);
        }
    }
    if mib == 0 || reps == 0 {
        eprintln!("read-probe: --mib and --reps must be positive");
        std::process::exit(2);
    }
    let words = mib * (1 << 20) / 8;
    // Written by several threads so that first-touch places pages near their readers.
    let mut buf = vec![0u64; words];
    let mut check = 0u64;
    for &t in &threads {
        let share = words.div_ceil(t);
        std::thread::scope(|s| {
            for (i, c) in buf.chunks_mut(share).enumerate() {
                s.spawn(move || {
                    for (j, w) in c.iter_mut().enumerate() {
                        *w = (i * share + j) as u64;
                    }
                });
            }
        });
        let mut gbs = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            let total = std::thread::scope(|s| {
                let hs: Vec<_> = buf.chunks(share).map(|c| s.spawn(move || sum(c))).collect();
                hs.into_iter()
                    .fold(0u64, |a, h| a.wrapping_add(h.join().unwrap_or(0)))
            });
            let dt = t0.elapsed().as_secs_f64();
            check = check.wrapping_add(total);
            gbs.push((words * 8) as f64 / dt / 1e9);
        }
        gbs.sort_by(f64::total_cmp);
        println!(
            "read-probe threads {t} mib {mib}: median {:.1} GB/s, best {:.1} GB/s ({} reps)",
            gbs[gbs.len() / 2],
            gbs[gbs.len() - 1],
            reps
        );
    }
    eprintln!("checksum {check:x}");
}
