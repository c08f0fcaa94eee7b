//! Issue 39's benchmark: what the `shell` tool's sandbox adds to starting a command. Runs
//! `sh -c true` N times plainly (spawn, wait) and N times through [`ctxhost::sandbox::run`]
//! (Landlock ruleset, pids cgroup, user/PID/mount/network namespaces, rlimits, output pipe),
//! alternating, and prints the medians and 90th percentiles.
//!
//! `cargo run -p ctxhost --example bench_sandbox -- [RUNS]` (default 200; bench/README.md).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ctxhost::sandbox::{Limits, Policy, run};

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args().nth(1).map_or(Ok(200), |a| a.parse())?;
    let ws = tempfile::tempdir()?;
    let tmp = tempfile::tempdir()?;
    let policy = Policy {
        workspace: ws.path().to_path_buf(),
        temp_dir: tmp.path().to_path_buf(),
        write_paths: Vec::new(),
        read_paths: Vec::new(),
        hidden: Vec::new(),
        network: false,
        limits: Limits::default(),
        enforce: true,
    };
    let (mut plain, mut boxed) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let status = Command::new("/bin/sh")
            .args(["-c", "true"])
            .current_dir(ws.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()?
            .status;
        plain.push(t.elapsed());
        anyhow::ensure!(status.success());
        let t = Instant::now();
        let done = run(&policy, "true", Duration::from_secs(10), &|| false)?;
        boxed.push(t.elapsed());
        anyhow::ensure!(
            done.ended == ctxhost::sandbox::Ended::Exited(0),
            "{:?}",
            done.ended
        );
    }
    let (p50, p90) = (percentile(&mut plain, 0.5), percentile(&mut plain, 0.9));
    let (s50, s90) = (percentile(&mut boxed, 0.5), percentile(&mut boxed, 0.9));
    println!("runs {runs}: sh -c true");
    println!("plain spawn      p50 {p50:7.2} ms   p90 {p90:7.2} ms");
    println!("sandboxed        p50 {s50:7.2} ms   p90 {s90:7.2} ms");
    println!("overhead         p50 {:7.2} ms", s50 - p50);
    println!(
        "(the built-in tools' definitions: {} estimated tokens of every request)",
        ctxhost::tools::builtin::definition_tokens()
    );
    Ok(())
}
