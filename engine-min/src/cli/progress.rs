//! Progress of a long measurement on stderr, as cargo shows a build: by default one line per
//! step once it is done, and while stderr is a terminal a status line below them that is
//! redrawn in place; with `--verbose` every line the measurement reports, as it comes.
//!
//! Writing to stderr never fails the command (a closed stderr loses the progress, not the
//! result), and the status line is cleared when the reporter is dropped, so an early end (a
//! closed stdout, an error) leaves no half-drawn line behind.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use super::Verbosity;

/// How the progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Every reported line, indented (`--verbose`).
    Every,
    /// One line per finished step (stderr is not a terminal).
    Steps,
    /// One line per finished step and a status line redrawn in place (a terminal).
    Bar,
}

impl Style {
    /// The style for `v` on this process's stderr.
    pub fn for_stderr(v: Verbosity) -> Style {
        if v.detailed() {
            Style::Every
        } else if std::io::stderr().is_terminal() {
            Style::Bar
        } else {
            Style::Steps
        }
    }
}

/// The step a reported line belongs to: its first words, up to two, ending before a word
/// with `=` (`m=4`, `k=576`) or a digit, or after one that ends with `:` or `,`. So
/// `cpu decode m=1 (3 steps): ...` and `cpu decode m=2 ...` are one step, `cpu decode`.
pub fn step_of(line: &str) -> &str {
    let line = line.trim_start();
    let mut end = 0;
    for (words, (i, w)) in line
        .split_whitespace()
        .map(|w| (w.as_ptr() as usize - line.as_ptr() as usize, w))
        .enumerate()
    {
        if words == 2 || w.contains('=') || w.starts_with(|c: char| c.is_ascii_digit()) {
            break;
        }
        let bare = w.trim_end_matches([':', ',']);
        end = i + bare.len();
        if bare.len() != w.len() {
            break;
        }
    }
    &line[..end]
}

/// Shows the lines of a measurement (see the module docs).
pub struct Progress<W: Write = std::io::Stderr> {
    out: W,
    style: Style,
    what: &'static str,
    started: Instant,
    /// The step in progress: its name, when it began, its lines so far and its last line.
    step: Option<(String, Instant, usize, String)>,
    steps_done: usize,
    /// A status line is drawn and must be cleared before anything else is written.
    drawn: bool,
}

impl Progress<std::io::Stderr> {
    /// Progress of `what` (e.g. `profile`) on stderr, in the style `v` and stderr ask for.
    pub fn stderr(what: &'static str, v: Verbosity) -> Self {
        Progress::new(std::io::stderr(), Style::for_stderr(v), what)
    }
}

impl<W: Write> Progress<W> {
    /// Progress of `what` written to `out` in `style`.
    pub fn new(out: W, style: Style, what: &'static str) -> Self {
        Progress {
            out,
            style,
            what,
            started: Instant::now(),
            step: None,
            steps_done: 0,
            drawn: false,
        }
    }

    /// One line the measurement reported.
    pub fn line(&mut self, line: &str) {
        if self.style == Style::Every {
            let _ = writeln!(self.out, "  {line}");
            return;
        }
        let name = step_of(line);
        let same = self.step.as_ref().is_some_and(|s| s.0 == name);
        if !same {
            self.end_step();
            self.step = Some((name.to_string(), Instant::now(), 0, String::new()));
        }
        if let Some(s) = &mut self.step {
            s.2 += 1;
            s.3 = line.to_string();
        }
        if self.style == Style::Bar {
            self.draw(line);
        }
    }

    /// A line of its own (not a step), shown in every style.
    pub fn note(&mut self, text: &str) {
        self.clear();
        let _ = writeln!(self.out, "{text}");
    }

    /// Ends the step in progress with its line and clears the status line.
    pub fn finish(&mut self) {
        self.end_step();
        self.clear();
        let _ = self.out.flush();
    }

    fn end_step(&mut self) {
        let Some((name, t0, lines, last)) = self.step.take() else {
            return;
        };
        self.clear();
        self.steps_done += 1;
        // A one-line step is its own result (a bandwidth, a device name); a longer one is
        // summed up (the points are behind --verbose).
        let text = if lines == 1 {
            last
        } else {
            format!(
                "{name}: {lines} measurements in {:.1} s",
                t0.elapsed().as_secs_f64()
            )
        };
        let _ = writeln!(self.out, "{:>9} {text}", self.what);
    }

    fn draw(&mut self, line: &str) {
        self.clear();
        let status = format!(
            "{:>9} [{} done, {:.0} s] {line}",
            self.what,
            self.steps_done,
            self.started.elapsed().as_secs_f64()
        );
        // One terminal row: a wrapped status line could not be cleared in place.
        let width = 79;
        let shown: String = status.chars().take(width).collect();
        let _ = write!(self.out, "{shown}");
        let _ = self.out.flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        if self.drawn {
            let _ = write!(self.out, "\r\x1b[2K");
            self.drawn = false;
        }
    }
}

impl<W: Write> Drop for Progress<W> {
    fn drop(&mut self) {
        self.clear();
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_of_profiler_lines() {
        for (line, step) in [
            ("cpu decode m=1 (3 steps): 576x192 552.2 us", "cpu decode"),
            ("cpu prefill m=8 (3 steps): ...", "cpu prefill"),
            ("memory read bandwidth, 2 threads: 13.2 GB/s", "memory read"),
            ("gpu: pthread-haswell-AMD EPYC", "gpu"),
            ("gpu per-matmul m=2 (2 steps): ...", "gpu per-matmul"),
            ("cpu+gpu split: 76.8 us fixed cost", "cpu+gpu split"),
            (
                "gpu decoder built in 122.4 s (resident: ...)",
                "gpu decoder",
            ),
            (
                "gpu backend built in 3.1 s (per-matmul: ...)",
                "gpu backend",
            ),
            ("cpu weights prepared in 0.4 s", "cpu weights"),
            ("npu graphs prepared in 9.0 s (4 weights)", "npu graphs"),
            ("npu k=576 n=576 m=32: 10140.8 us (simulated)", "npu"),
            ("  decode streaming: cpu 0.2 GB/s", "decode streaming"),
            ("", ""),
        ] {
            assert_eq!(step_of(line), step, "{line}");
        }
    }

    fn shown(style: Style, lines: &[&str]) -> String {
        let mut buf = Vec::new();
        {
            let mut p = Progress::new(&mut buf, style, "profile");
            for l in lines {
                p.line(l);
            }
            p.finish();
        }
        String::from_utf8(buf).expect("utf8")
    }

    const LINES: [&str; 4] = [
        "cpu decode m=1 (3 steps): a",
        "cpu decode m=2 (3 steps): b",
        "memory read bandwidth, 2 threads: 13.2 GB/s",
        "npu k=576 n=576 m=32: 1 us",
    ];

    #[test]
    fn plain_lines_one_per_step_without_escapes() {
        let s = shown(Style::Steps, &LINES);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 3, "{s}");
        assert!(lines[0].contains("cpu decode: 2 measurements"), "{s}");
        assert!(lines[1].contains("13.2 GB/s"), "{s}");
        assert!(lines[2].contains("npu k=576"), "{s}");
        assert!(!s.contains('\r') && !s.contains('\x1b'), "{s:?}");
    }

    #[test]
    fn verbose_shows_every_line() {
        let s = shown(Style::Every, &LINES);
        assert_eq!(s.lines().count(), LINES.len(), "{s}");
    }

    #[test]
    fn the_bar_is_cleared_and_the_steps_stay() {
        let s = shown(Style::Bar, &LINES);
        // Every drawn status line is cleared; what remains are the step lines.
        let kept: String = s
            .split("\r\x1b[2K")
            .map(|part| part.rsplit_once('\n').map_or("", |(done, _)| done))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(kept.lines().filter(|l| !l.is_empty()).count(), 3, "{s:?}");
        assert!(s.ends_with("\r\x1b[2K") || s.ends_with('\n'), "{s:?}");
        // Dropped mid-step (an early end): the status line is cleared too.
        let mut buf = Vec::new();
        {
            let mut p = Progress::new(&mut buf, Style::Bar, "profile");
            p.line(LINES[0]);
        }
        let s = String::from_utf8(buf).expect("utf8");
        assert!(s.ends_with("\r\x1b[2K"), "{s:?}");
    }
}
