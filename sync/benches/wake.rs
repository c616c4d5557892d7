//! Wake-up latency (publish → consumer returns), median and p99, and consumer CPU time per
//! wait, side by side in one run, for: this flag with prediction (learned, and fixed 10% long /
//! 10% short), this flag without prediction (poll, then futex), pure spin, sleep-then-check at
//! the OS sleep granularity, std Condvar, and a bare futex. Also the OS sleep granularity.
//!
//! A custom harness (criterion measures throughput of one closure, not a two-thread hand-off):
//! `cargo bench -p hetero-sync --bench wake` (optional args: rounds, then durations in µs).
//! Each round: the consumer starts the round and begins waiting; the producer sleeps to about
//! `D` after the start, spins to exactly `D`, records the publish instant and publishes. Latency
//! = consumer return − publish instant (one monotonic clock). CPU = the consumer thread's CPU
//! time (CLOCK_THREAD_CPUTIME_ID) during the wait, divided by the wait's wall time.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hetero_sync::{
    measure_sleep_granularity, set_timer_slack_ns, CompletionFlag, SiteState, WaitConfig,
};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn futex_wait(w: &AtomicU32, expected: u32) {
    // SAFETY: `w` is a live aligned u32; FUTEX_WAIT only compares it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

fn futex_wake(w: &AtomicU32) {
    // SAFETY: `w` is a live aligned u32; FUTEX_WAKE does not dereference it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

#[derive(Clone, Copy, PartialEq)]
enum Method {
    FlagLearned,
    FlagLong10,
    FlagShort10,
    FlagNoPrediction,
    Spin,
    SleepCheck,
    Condvar,
    Futex,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::FlagLearned => "flag, learned prediction",
            Method::FlagLong10 => "flag, prediction +10% (fixed)",
            Method::FlagShort10 => "flag, prediction -10% (fixed)",
            Method::FlagNoPrediction => "flag, no prediction (poll+futex)",
            Method::Spin => "pure spin",
            Method::SleepCheck => "sleep(1us)-then-check",
            Method::Condvar => "std Condvar",
            Method::Futex => "bare futex",
        }
    }
}

struct Shared {
    flag: CompletionFlag,
    word: AtomicU32,
    cv: (Mutex<u32>, Condvar),
    round_start: AtomicU64, // epoch of the round the consumer started (producer spins on it)
    t_pub: AtomicU64,       // ns since `base` of the publish
}

fn run(method: Method, d: Duration, rounds: u32) -> (Vec<u64>, f64, u32) {
    let s = Arc::new(Shared {
        flag: CompletionFlag::new(),
        word: AtomicU32::new(0),
        cv: (Mutex::new(0), Condvar::new()),
        round_start: AtomicU64::new(0),
        t_pub: AtomicU64::new(0),
    });
    let base = Instant::now();
    let warm = 20;
    let total = rounds + warm;
    let prod = {
        let s = s.clone();
        std::thread::spawn(move || {
            for e in 1..=total {
                while s.round_start.load(Ordering::Acquire) != e as u64 {
                    std::hint::spin_loop();
                }
                let start = Instant::now();
                let coarse = d.saturating_sub(Duration::from_micros(80));
                if !coarse.is_zero() {
                    std::thread::sleep(coarse);
                }
                while start.elapsed() < d {
                    std::hint::spin_loop();
                }
                s.t_pub
                    .store(base.elapsed().as_nanos() as u64, Ordering::Relaxed);
                match method {
                    Method::Condvar => {
                        *s.cv.0.lock().unwrap() = e;
                        s.cv.1.notify_one();
                    }
                    Method::Futex => {
                        s.word.store(e, Ordering::Release);
                        futex_wake(&s.word);
                    }
                    _ => s.flag.publish(e).unwrap(),
                }
            }
        })
    };
    set_timer_slack_ns(1);
    let cfg = WaitConfig {
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let dn = d.as_nanos() as u64;
    let mut learned = SiteState::new();
    let fixed = match method {
        Method::FlagLong10 => SiteState::seeded(dn * 11 / 10, 0, 0),
        Method::FlagShort10 => SiteState::seeded(dn * 9 / 10, 0, 0),
        _ => SiteState::new(),
    };
    let mut fixed_overshoot = fixed;
    let mut lat = Vec::with_capacity(rounds as usize);
    let (mut cpu_sum, mut wall_sum) = (0u64, 0u64);
    let mut late = 0;
    for e in 1..=total {
        let c0 = thread_cpu_ns();
        let start = Instant::now();
        s.round_start.store(e as u64, Ordering::Release);
        match method {
            Method::FlagLearned => {
                s.flag
                    .wait_since(start, e, &cfg, Some(&mut learned))
                    .unwrap();
            }
            Method::FlagLong10 | Method::FlagShort10 => {
                // The prediction stays fixed (a fresh copy each round); only the sleep
                // overshoot is carried over, as a site would learn it.
                let mut site = fixed;
                let ov = fixed_overshoot.sleep_overshoot_ns();
                site.observe_sleep(0, ov);
                s.flag.wait_since(start, e, &cfg, Some(&mut site)).unwrap();
                fixed_overshoot.observe_sleep(0, site.sleep_overshoot_ns());
            }
            Method::FlagNoPrediction => {
                s.flag.wait_since(start, e, &cfg, None).unwrap();
            }
            Method::Spin => {
                while !s.flag.is_reached(e) {
                    std::hint::spin_loop();
                }
            }
            Method::SleepCheck => {
                while !s.flag.is_reached(e) {
                    std::thread::sleep(Duration::from_micros(1));
                }
            }
            Method::Condvar => {
                let mut g = s.cv.0.lock().unwrap();
                while *g != e {
                    g = s.cv.1.wait(g).unwrap();
                }
            }
            Method::Futex => loop {
                let v = s.word.load(Ordering::Acquire);
                if v == e {
                    break;
                }
                futex_wait(&s.word, v);
            },
        }
        let t_ret = base.elapsed().as_nanos() as u64;
        let wall = start.elapsed().as_nanos() as u64;
        let cpu = thread_cpu_ns() - c0;
        if e > warm {
            let t_pub = s.t_pub.load(Ordering::Relaxed);
            lat.push(t_ret.saturating_sub(t_pub));
            cpu_sum += cpu;
            wall_sum += wall;
            if wall > dn + dn / 20 {
                late += 1;
            }
        }
    }
    prod.join().unwrap();
    lat.sort_unstable();
    (lat, cpu_sum as f64 / wall_sum as f64, late)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let rounds: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(200);
    let durations: Vec<u64> = if args.len() > 1 {
        args[1..].iter().filter_map(|a| a.parse().ok()).collect()
    } else {
        vec![100, 1000]
    };
    let g_default = measure_sleep_granularity(Duration::from_micros(1), 200);
    set_timer_slack_ns(1);
    let g_slack = measure_sleep_granularity(Duration::from_micros(1), 200);
    println!("OS sleep granularity: sleep(1us) median actual = {:.1} us (default timer slack), {:.1} us (timer slack 1 ns)",
        g_default.as_nanos() as f64 / 1e3, g_slack.as_nanos() as f64 / 1e3);
    for &d_us in &durations {
        let d = Duration::from_micros(d_us);
        println!(
            "\nwork D = {d_us} us, {rounds} rounds (after 20 warm-up), consumer timer slack 1 ns"
        );
        println!(
            "{:<34} {:>12} {:>12} {:>14} {:>10}",
            "method", "median (us)", "p99 (us)", "consumer CPU", "late>5%"
        );
        for m in [
            Method::FlagLearned,
            Method::FlagLong10,
            Method::FlagShort10,
            Method::FlagNoPrediction,
            Method::Spin,
            Method::SleepCheck,
            Method::Condvar,
            Method::Futex,
        ] {
            let (lat, cpu, late) = run(m, d, rounds);
            let q = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize] as f64 / 1e3;
            println!(
                "{:<34} {:>12.2} {:>12.2} {:>13.1}% {:>10}",
                m.name(),
                q(0.5),
                q(0.99),
                cpu * 100.0,
                late
            );
        }
    }
}
