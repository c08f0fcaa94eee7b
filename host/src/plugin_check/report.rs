//! The report of one `ctxhost plugin check`: one [`Check`] per check, as text or JSON.

use serde_json::{Value, json};

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, e.g. `count-messages after 3 appends`.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
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
    /// The WIT version of its plugin interface, e.g. `0.1.0`.
    pub version: Option<String>,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
}

impl CheckReport {
    /// Whether every check passed (and there was at least one).
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.passed)
    }

    /// `{"component","world","version","passed","checks":[{"name","passed","detail"}]}`;
    /// `world`/`version` are `null` when the component could not be loaded.
    pub fn to_json(&self) -> Value {
        json!({
            "component": self.component,
            "world": self.world,
            "version": self.version,
            "passed": self.passed(),
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name, "passed": c.passed, "detail": c.detail,
            })).collect::<Vec<_>>(),
        })
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
            let mark = if c.passed { "PASS" } else { "FAIL" };
            out.push_str(&format!("  {mark}  {}: {}\n", c.name, c.detail));
        }
        let passed = self.checks.iter().filter(|c| c.passed).count();
        let verdict = if self.passed() {
            "conforms"
        } else {
            "does NOT conform"
        };
        out.push_str(&format!(
            "{passed} of {} checks passed: {} {verdict}\n",
            self.checks.len(),
            self.component
        ));
        out
    }
}
