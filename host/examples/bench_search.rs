//! Issue 39's `search_files` benchmark: the built-in tool against the `rg` binary on the same
//! tree. Generates a tree of small text files in a temp dir (default 100,000 files: 100
//! directories of 10 directories of 100 files, ~1 KiB each, a `.gitignore` and a few binary
//! files), then times, alternating, per pattern:
//! - `search_files` as the tool runs it ([`ctxhost::tools::builtin::find::search`], in process);
//! - the same search done sequentially, one searcher on one thread (what `search_files` was
//!   before it used `ignore`'s parallel walker), for a before/after in one run;
//! - `rg -n --no-require-git PATTERN DIR` (the binary on PATH, output to a pipe that is read and dropped; its
//!   time includes starting the process, ~1 ms).
//!
//! Prints the medians, the ratio to `rg`, and the load average.
//!
//! `cargo run --release -p ctxhost --example bench_search -- [--files N] [--runs R] [--dir D]`
//! (`--dir`: generate into / reuse D instead of a temp dir; bench/README.md "Issue 39").

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ctxhost::tools::builtin::find;
use ctxhost::tools::builtin::workspace::Workspace;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, SearcherBuilder, sinks::UTF8};

/// Words the files are made of.
const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "let", "mut", "fn", "return", "value", "index", "buffer",
    "context", "task", "message", "store", "format", "request", "reply", "token", "limit",
];

fn generate(root: &Path, files: usize) -> anyhow::Result<()> {
    let marker = root.join(format!(".generated-{files}"));
    if marker.exists() {
        return Ok(());
    }
    std::fs::write(root.join(".gitignore"), "ignored/\n*.log\n")?;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let per_leaf = 100;
    let leaves = files.div_ceil(per_leaf);
    let mut written = 0;
    for leaf in 0..leaves {
        let dir = root.join(format!("d{:03}/s{:02}", leaf / 10, leaf % 10));
        std::fs::create_dir_all(&dir)?;
        for f in 0..per_leaf {
            if written == files {
                break;
            }
            let mut text = String::with_capacity(1200);
            for line in 0..24 {
                for _ in 0..6 {
                    text.push_str(WORDS[(next() % WORDS.len() as u64) as usize]);
                    text.push(' ');
                }
                // A rare literal: one file in 5,000 has it once.
                if line == 7 && written % 5000 == 17 {
                    text.push_str("needle_4711 ");
                }
                text.push_str(&format!("fn_{}();\n", next() % 100_000));
            }
            std::fs::write(dir.join(format!("f{f:03}.rs")), text)?;
            written += 1;
        }
    }
    // Ignored and binary files: both tools must skip them.
    std::fs::create_dir_all(root.join("ignored"))?;
    std::fs::write(root.join("ignored/x.rs"), "needle_4711\n")?;
    std::fs::write(root.join("d000/app.log"), "needle_4711\n")?;
    std::fs::write(root.join("d000/blob.bin"), b"needle_4711\0\0\x01binary")?;
    std::fs::write(marker, "")?;
    Ok(())
}

/// `search_files` as it was before the parallel walk: one walker, one searcher, one thread,
/// the first 200 lines in walk order (the timing is what matters here).
fn sequential(dir: &Path, pattern: &str, literal: bool) -> anyhow::Result<usize> {
    let matcher = RegexMatcherBuilder::new()
        .fixed_strings(literal)
        .size_limit(10 * 1024 * 1024)
        .build(pattern)?;
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut out = String::new();
    let (mut shown, mut total) = (0usize, 0usize);
    let walk = ignore::WalkBuilder::new(dir)
        .follow_links(false)
        .require_git(false)
        .hidden(true)
        .build();
    for entry in walk {
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .unwrap_or(entry.path())
            .display()
            .to_string();
        let _ = searcher.search_path(
            &matcher,
            entry.path(),
            UTF8(|n, line| {
                total += 1;
                if shown < 200 {
                    shown += 1;
                    let cut: String = line.trim_end().chars().take(300).collect();
                    out.push_str(&format!("{rel}:{n}:{cut}\n"));
                }
                Ok(true)
            }),
        );
    }
    Ok(total)
}

/// `rg -n` over `dir`: the number of output lines.
fn rg(dir: &Path, pattern: &str, literal: bool) -> anyhow::Result<usize> {
    let mut cmd = Command::new("rg");
    // `--no-require-git`: honour .gitignore outside a git repository, as search_files does.
    cmd.arg("-n").arg("--no-messages").arg("--no-require-git");
    if literal {
        cmd.arg("-F");
    }
    let out = cmd
        .arg(pattern)
        .arg(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    anyhow::ensure!(
        out.status.code().is_some_and(|c| c <= 1),
        "rg failed: {:?}",
        out.status
    );
    Ok(out.stdout.iter().filter(|&&b| b == b'\n').count())
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let files: usize = opt("--files").map_or(Ok(100_000), |v| v.parse())?;
    let runs: usize = opt("--runs").map_or(Ok(10), |v| v.parse())?;
    let temp;
    let root: PathBuf = match opt("--dir") {
        Some(d) => {
            std::fs::create_dir_all(&d)?;
            PathBuf::from(d)
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let root = root.canonicalize()?;
    let t = Instant::now();
    generate(&root, files)?;
    eprintln!(
        "tree: {files} files under {} (ready in {:.1} s)",
        root.display(),
        t.elapsed().as_secs_f64()
    );
    let scratch = tempfile::tempdir()?;
    let ws = Workspace::open(&root, scratch.path(), &[])?;
    println!("search_files vs rg over {files} files, medians of {runs} runs (after one warm-up)");
    println!(
        "{:<34} {:>12} {:>14} {:>10} {:>9}",
        "pattern", "rg ms", "search_files", "before", "vs rg"
    );
    for (label, pattern, literal) in [
        ("literal, 20 matches", "needle_4711", true),
        ("regex, every line", r"fn_[0-9]+\(\);", false),
        ("regex, no match", r"zz[0-9]+qq", false),
    ] {
        let (mut t_rg, mut t_ours, mut t_seq) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..=runs {
            let t = Instant::now();
            let n_rg = rg(&root, pattern, literal)?;
            let d_rg = t.elapsed();
            let t = Instant::now();
            let out = find::search(&ws, pattern, literal, false, ".", None)
                .map_err(anyhow::Error::msg)?;
            let d_ours = t.elapsed();
            let t = Instant::now();
            let n_seq = sequential(&root, pattern, literal)?;
            let d_seq = t.elapsed();
            if run == 0 {
                // Both found the same lines (the tool shows at most 200 and counts the rest).
                let ours = out
                    .lines()
                    .last()
                    .and_then(|l| l.strip_prefix('['))
                    .and_then(|l| l.split(" of ").nth(1))
                    .and_then(|l| l.split(' ').next())
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or_else(|| out.lines().filter(|l| !l.starts_with("no match")).count());
                anyhow::ensure!(
                    ours == n_rg && n_seq == n_rg,
                    "{label}: rg found {n_rg} lines, search_files {ours}, sequential {n_seq}"
                );
                continue;
            }
            t_rg.push(d_rg);
            t_ours.push(d_ours);
            t_seq.push(d_seq);
        }
        let (r, o, s) = (median(&mut t_rg), median(&mut t_ours), median(&mut t_seq));
        println!("{label:<34} {r:>12.1} {o:>14.1} {s:>10.1} {:>8.2}x", o / r);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "(threads available {threads}; load average {})",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}
