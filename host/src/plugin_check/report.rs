//! The report of one `ctxhost plugin check`: one [`Check`] per check, as text or JSON.

use serde_json::{Value, json};

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The component does what the contract asks.
    Pass,
    /// It does not: the component does not conform.
    Fail,
    /// Allowed by the contract, but probably not what the author meant (e.g. the task's first
    /// user message is gone without a summary); does not fail the check.
    Warn,
    /// The check does not apply to this component (e.g. the summary checks of a compressor
    /// that never calls the LLM).
    Skip,
}

impl Status {
    /// `PASS`, `FAIL`, `WARN`, `SKIP`.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Warn => "WARN",
            Status::Skip => "SKIP",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, e.g. `count-messages after 3 appends`.
    pub name: String,
    /// Whether it did not fail (`status` is not [`Status::Fail`]).
    pub passed: bool,
    /// Pass, fail, warn or skip.
    pub status: Status,
    /// What was seen (on success) or what is wrong (on failure).
    pub detail: String,
}

/// The result of checking one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// `builtin:NAME` or the path, as given.
    pub component: String,
    /// The world it implements (`message-store-plugin`, ...), when it could be loaded.
    pub world: Option<String>,
    /// The WIT version of its plugin interface, e.g. `1.0.0`.
    pub version: Option<String>,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
    /// Where the task directories of the checks were kept (`--keep DIR`), if they were.
    pub kept: Option<String>,
}

impl CheckReport {
    /// Whether every check passed (and there was at least one).
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.passed)
    }

    /// `{"component","world","version","passed","kept","checks":[{"name","passed","status",
    /// "detail"}]}`; `world`/`version` are `null` when the component could not be loaded,
    /// `kept` unless `--keep` was given; `status` is `pass`, `fail`, `warn` or `skip`.
    pub fn to_json(&self) -> Value {
        json!({
            "component": self.component,
            "world": self.world,
            "version": self.version,
            "passed": self.passed(),
            "kept": self.kept,
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name, "passed": c.passed,
                "status": c.status.label().to_ascii_lowercase(), "detail": c.detail,
            })).collect::<Vec<_>>(),
        })
    }

    /// Checks with `status`.
    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// The human-readable report: a header, one `PASS`/`FAIL` line per check, a verdict.
    pub fn to_text(&self) -> String {
        let mut out = format!("plugin check: {}\n", self.component);
        match (&self.world, &self.version) {
            (Some(world), Some(version)) => {
                out.push_str(&format!("  world {world}, WIT version {version}\n"))
            }
            _ => out.push_str("  world: unknown (the component could not be loaded)\n"),
        }
        for c in &self.checks {
            out.push_str(&format!(
                "  {}  {}: {}\n",
                c.status.label(),
                c.name,
                c.detail
            ));
        }
        let verdict = if self.passed() {
            "conforms"
        } else {
            "does NOT conform"
        };
        let mut extra = String::new();
        for (status, word) in [(Status::Warn, "warning"), (Status::Skip, "skipped")] {
            let n = self.count(status);
            if n > 0 {
                extra.push_str(&format!(
                    ", {n} {word}{}",
                    if n > 1 && status == Status::Warn {
                        "s"
                    } else {
                        ""
                    }
                ));
            }
        }
        out.push_str(&format!(
            "{} of {} checks passed{extra}: {} {verdict}\n",
            self.count(Status::Pass),
            self.checks.len(),
            self.component
        ));
        if let Some(dir) = &self.kept {
            out.push_str(&format!("fixtures and outputs kept in {dir}\n"));
        }
        out
    }
}
