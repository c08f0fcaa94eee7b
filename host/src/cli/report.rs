//! `ctxhost tasks`, `show` and `stats`: read-only reports, as tables or `--json`.

use super::out::outln;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use super::Env;
use crate::db::{Db, ModelStats, Status, TaskFilter, TaskRow};
use crate::ops::show::ShownLine;

/// `ctxhost tasks` arguments.
#[derive(Debug, Clone, Args)]
pub struct TasksArgs {
    /// Only tasks with this status (queued, running, paused, completed, failed, stopped).
    #[arg(long, value_parser = parse_status)]
    pub status: Option<Status>,
    /// Only tasks of this user.
    #[arg(long)]
    pub user: Option<String>,
    /// At most this many tasks, newest first (at least 1; 0 is rejected).
    #[arg(long, default_value_t = 50, value_parser = parse_limit)]
    pub limit: u32,
    /// Print JSON (an array of task rows).
    #[arg(long)]
    pub json: bool,
}

/// `ctxhost show` arguments.
#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// The task's UUID, or a unique prefix of it (at least 4 hex digits, e.g. 0193a4b2).
    pub uuid: String,
    /// How many of the last messages of messages.jsonl to show.
    #[arg(long, default_value_t = 5)]
    pub messages: usize,
    /// Print JSON: {task, dir, dir_state, result, last_messages, messages_error, planning,
    /// planning_error, inherited_from, inheritance_skipped}. With --follow: one JSON object
    /// per event, as `ctxhost ask --json`.
    #[arg(long)]
    pub json: bool,
    /// Print the task's work as `ctxhost ask` does, from the start of its files, and follow
    /// them until the task is no longer queued or running (wherever it runs).
    #[arg(long)]
    pub follow: bool,
    /// List each compression instead: the messages it summarised, the summary, what it kept
    /// verbatim, the tool results it elided and the paths mentioned (with --json: an array).
    #[arg(long, conflicts_with = "follow")]
    pub compactions: bool,
}

/// `ctxhost diff` arguments.
#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    /// The task's UUID, or a unique prefix of it (at least 4 hex digits, e.g. 0193a4b2).
    pub uuid: String,
    /// Print the stat line (`N files changed, …`) instead of the patch.
    #[arg(long)]
    pub stat: bool,
}

/// `ctxhost stats` arguments.
#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    /// Print JSON: {by_status, total, by_model}.
    #[arg(long)]
    pub json: bool,
}

/// `--limit N`: a whole number ≥ 1 (0 would list nothing, so it is rejected).
fn parse_limit(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("--limit must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("--limit must be a whole number ≥ 1: {e}")),
    }
}

fn parse_status(s: &str) -> Result<Status, String> {
    s.parse()
}

fn open_db(env: &Env) -> anyhow::Result<Db> {
    env.require_tree()?;
    env.open_db()
}

pub(super) fn tasks(env: &Env, args: &TasksArgs) -> anyhow::Result<ExitCode> {
    let db = open_db(env)?;
    let rows = db.list(&TaskFilter {
        status: args.status,
        user: args.user.clone(),
        limit: Some(args.limit),
    })?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        outln!("no tasks");
        return Ok(ExitCode::SUCCESS);
    }
    // Rows beyond --limit: said after the table (on stderr, so the table stays parseable).
    let more = if rows.len() == args.limit as usize {
        db.count_matching(&TaskFilter {
            status: args.status,
            user: args.user.clone(),
            limit: None,
        })? - rows.len() as i64
    } else {
        0
    };
    let mut table = vec![
        [
            "UUID", "STATUS", "CREATED", "LLM", "TOOLS", "TOKENS", "MODEL", "TASK",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in &rows {
        table.push(vec![
            r.uuid.clone(),
            if r.files_deleted_at.is_some() {
                format!("{} (files deleted)", r.status)
            } else {
                r.status.to_string()
            },
            r.created_at
                .get(..19)
                .unwrap_or(&r.created_at)
                .replace('T', " "),
            r.llm_call_count.to_string(),
            r.tool_call_count.to_string(),
            r.total_tokens.to_string(),
            r.model.clone().unwrap_or_default(),
            describe(r),
        ]);
    }
    print_table(&table)?;
    if more > 0 {
        eprintln!(
            "… {} more task{} (--limit {} shows {}; raise --limit, or narrow with --status / --user)",
            super::render::thousands(more),
            if more == 1 { "" } else { "s" },
            args.limit,
            rows.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One-line description: the task key for github/gitlab, else the start of the prompt.
fn describe(r: &TaskRow) -> String {
    if r.task_source != "local" {
        let mut s = format!(
            "{} {}/{}",
            r.task_source,
            r.owner.as_deref().unwrap_or("?"),
            r.repo.as_deref().unwrap_or("?")
        );
        if let Some(t) = &r.task_type {
            s.push_str(&format!(" {t}"));
        }
        if let Some(id) = &r.task_id {
            s.push_str(&format!(" #{id}"));
        }
        return s;
    }
    shorten(&r.prompt, 48)
}

/// First line of `text`, cut to `max` characters with `…`, control characters escaped (the
/// text comes from the LLM, tools or a forge: no escape sequence reaches the terminal).
fn shorten(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let line = crate::untrusted::terminal(line);
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max - 1).collect::<String>())
    } else {
        line.to_string()
    }
}

fn print_table(rows: &[Vec<String>]) -> anyhow::Result<()> {
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == cols {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        outln!("{}", line.trim_end());
    }
    Ok(())
}

/// How long `show` retries the bucket (seconds), at most: it shows the row without the
/// directory rather than wait `context_storage.remote.retry_secs`.
const SHOW_RETRY_SECS: u64 = 5;

pub(super) fn show(env: &Env, args: &ShowArgs) -> anyhow::Result<ExitCode> {
    use crate::untrusted::terminal;
    let (db, row) = env.open_task(&args.uuid)?;
    if args.follow {
        return super::follow::show_follow(env, &db, &row.uuid, args.json);
    }
    if args.compactions {
        return show_compactions(env, &row.uuid, args.json);
    }
    // A reader waits for the bucket at most SHOW_RETRY_SECS: the row is worth showing soon.
    let remote_cfg = env.config.context_storage.remote.clone().map(|mut c| {
        c.retry_secs = c.retry_secs.min(SHOW_RETRY_SECS);
        c
    });
    let remote = crate::remote::open(remote_cfg.as_ref())?;
    let report = crate::ops::show::show_with(
        &db,
        &env.layout,
        &row.uuid,
        args.messages,
        remote.as_deref(),
    )?;
    // Priced by llm.pricing (none without a price for the task's model).
    let cost = match &report.dir {
        Some(d) => crate::task_dir::TaskDir::open(std::path::Path::new(d))
            .ok()
            .and_then(|dir| {
                crate::task::cost::dir_cost(&dir, &report.task, &env.config.llm.pricing)
            }),
        None => None,
    };
    if let Some(e) = &report.bucket_error {
        eprintln!(
            "warning: the task directory could not be read from the bucket: {}; {}",
            crate::untrusted::text(e, crate::untrusted::MAX_ERROR_BYTES),
            if report.dir.is_some() {
                "showing this host's copy, which may be older"
            } else {
                "showing the database row only"
            }
        );
    }
    // What a running task's process waits for (the model between attempts, the bucket), as
    // `ask` and `show --follow` show it.
    let waiting = (report.task.status == Status::Running)
        .then(|| crate::remote::read_wait_note(&env.layout, &report.task.uuid))
        .flatten();
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        let ws = report
            .dir
            .as_deref()
            .and_then(|d| workspace_of(std::path::Path::new(d)));
        if let Some(o) = v.as_object_mut() {
            o.insert("cost_usd".into(), serde_json::json!(cost));
            o.insert("waiting".into(), serde_json::json!(waiting));
            // `workspace` is the directory the tools work on (the report's); what it was made
            // from, when it is a git checkout, is `git_workspace` (workspace.json).
            o.insert(
                "git_workspace".into(),
                serde_json::json!(ws.as_ref().map(|(r, _)| r)),
            );
            o.insert(
                "changes".into(),
                serde_json::json!(ws.as_ref().map(|(_, s)| s)),
            );
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let t = &report.task;
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    outln!("uuid:          {}", t.uuid);
    outln!("status:        {}", t.status);
    if let Some(w) = &waiting {
        outln!("waiting:       {}", terminal(w));
    }
    if let Some(e) = &t.error_message {
        outln!("error:         {e}");
    }
    outln!("task:          {}", describe(t));
    outln!("user:          {}", terminal(&opt(&t.user)));
    outln!("created:       {}", t.created_at);
    outln!("started:       {}", opt(&t.started_at));
    outln!("completed:     {}", opt(&t.completed_at));
    outln!(
        "llm:           {} {} (context {})",
        opt(&t.llm_provider),
        opt(&t.model),
        t.context_length
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    );
    outln!(
        "counters:      {}, {}, {}, {}",
        counted(t.llm_call_count, "LLM call", "LLM calls"),
        counted(t.tool_call_count, "tool call", "tool calls"),
        counted(t.total_tokens, "token", "tokens"),
        counted(t.compression_count, "compression", "compressions")
    );
    outln!("cost:          {}", crate::config::pricing::show_cost(cost));
    if t.cache_read_tokens > 0 || t.cache_creation_tokens > 0 {
        outln!(
            "prompt cache:  {} tokens read, {} written (of the {} tokens)",
            t.cache_read_tokens,
            t.cache_creation_tokens,
            t.total_tokens
        );
    }
    // The process of a running task; one that ended names the last that ran it.
    if let (Some(pid), Some(host)) = (t.process_id, &t.hostname) {
        if t.status == Status::Running {
            outln!("process:       {pid} on {host}");
        } else {
            outln!("last process:  {pid} on {host} (ended)");
        }
    }
    if t.resume_count > 0 || t.crash_count > 0 {
        outln!(
            "lifecycle:     resumed {} time(s), {} crash(es) of its process",
            t.resume_count,
            t.crash_count
        );
    }
    if let Some((rec, stat)) = report
        .dir
        .as_deref()
        .and_then(|d| workspace_of(std::path::Path::new(d)))
    {
        outln!("workspace:     {}", describe_workspace(&rec));
        outln!("changes:       {stat} (`ctxhost diff {}`)", t.uuid);
    }
    if let Some(p) = &report.publication {
        use crate::sources::publish::{error_sentence, status_sentence};
        if let Some(url) = &p.item_url {
            outln!("item:          {url}");
        }
        let comment = p.comment_url.as_deref().or(p.comment_id.as_deref());
        outln!("published:     {}", status_sentence(p, comment));
        let note = match p.next_attempt_ms {
            _ if p.given_up() => "given up: not tried again".to_string(),
            Some(ms) => format!(
                "next attempt after {} by `ctxhost run` / `poll`",
                crate::sources::publish::rfc3339_ms(ms)
            ),
            None => "retried by `ctxhost run` / `poll`".to_string(),
        };
        if let Some(e) = error_sentence(p, Some(&note)) {
            outln!("publish error: {e}");
        }
    }
    if t.stop_requested {
        outln!("requested:     stop (at the next safe point)");
    } else if t.pause_requested {
        outln!(
            "requested:     pause (at the next safe point){}",
            t.pause_reason
                .as_deref()
                .map(|r| format!(": {}", terminal(r)))
                .unwrap_or_default()
        );
    } else if let (crate::db::Status::Paused, Some(r)) = (t.status, &t.pause_reason) {
        outln!("paused:        {}", terminal(r));
    }
    match (&report.dir, &t.files_deleted_at) {
        (None, Some(at)) => outln!("directory:     deleted by `ctxhost cleanup` at {at}"),
        (dir, _) => outln!("directory:     {}", dir.as_deref().unwrap_or("-")),
    }
    if let Some(e) = &report.bucket_error {
        outln!(
            "bucket:        unavailable ({})",
            terminal(&crate::untrusted::text(
                e,
                crate::untrusted::MAX_ERROR_BYTES
            ))
        );
    }
    // A git workspace was said above with what it was made from.
    let git_workspace = report
        .dir
        .as_deref()
        .is_some_and(|d| workspace_of(std::path::Path::new(d)).is_some());
    if let Some(w) = report.workspace.as_ref().filter(|_| !git_workspace) {
        outln!("workspace:     {}", terminal(w));
    }
    if let Some(from) = &report.inherited_from {
        outln!(
            "inherited:     from task {} (completed {}; link {} of its chain; {} tokens: {})",
            from.uuid,
            from.completed_at,
            from.generation,
            from.tokens,
            from.parts.join(", ")
        );
    }
    for s in &report.inheritance_skipped {
        outln!("not inherited: task {}: {}", s.uuid, terminal(&s.reason));
    }
    if let Some(e) = &report.planning_error {
        outln!("planning:      unreadable: {e}");
    }
    if let Some(h) = &report.planning {
        print_plan(h)?;
    }
    if let Some(r) = &report.result {
        outln!("\nresult:\n{}", terminal(r));
    }
    if let Some(e) = &report.messages_error {
        outln!("\nlast messages: unreadable: {e}");
    }
    if !report.last_messages.is_empty() {
        outln!("\nlast messages:");
        for m in &report.last_messages {
            match m {
                ShownLine::Message(h) => {
                    let mut text = h.content.clone().unwrap_or_default();
                    for c in h.tool_calls.iter().flatten() {
                        text.push_str(&format!(
                            " [call {} {}({})]",
                            c.id, c.function.name, c.function.arguments
                        ));
                    }
                    // A summary line is the compressor's, not the model's reply: say so.
                    let role = match h.summary_id {
                        Some(id) => {
                            text = format!("[summary {id}] {text}");
                            "summary"
                        }
                        None => h.role.as_str(),
                    };
                    outln!("  #{:<4} {:<9} {}", h.seq, role, shorten(&text, 100));
                    // Its reasoning: the readable text, or what the item is (never its
                    // opaque bytes).
                    for item in &h.reasoning {
                        let shown = crate::ops::reasoning::shown(item);
                        match shown.text {
                            Some(t) => outln!("        thinking: {}", shorten(&terminal(&t), 100)),
                            None => outln!("        [reasoning: {}]", terminal(&shown.label)),
                        }
                    }
                }
                ShownLine::Unreadable { line, error } => {
                    outln!("  line {line}: unreadable: {error}")
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The latest plan with each step's status, and what the planning history counts.
fn print_plan(h: &ctxhost_format::planning::PlanningHistory) -> anyhow::Result<()> {
    use crate::untrusted::terminal;
    let mut counts = vec![format!("{} revision(s)", h.revisions)];
    counts.push(format!("{} reflection(s)", h.reflections));
    if h.unusable_plans > 0 {
        counts.push(format!(
            "{} planning reply(ies) without a usable plan",
            h.unusable_plans
        ));
    }
    match (h.verifications, h.last_verdict) {
        (0, _) => counts.push("not verified".to_string()),
        (n, Some(v)) => counts.push(format!(
            "{n} verification(s), last {}",
            match v {
                ctxhost_format::planning::Verdict::Passed => "passed",
                ctxhost_format::planning::Verdict::Failed => "failed",
                ctxhost_format::planning::Verdict::Unclear => "unclear",
            }
        )),
        (n, None) => counts.push(format!("{n} verification(s)")),
    }
    match &h.latest {
        None => {}
        Some(p) if p.steps.is_empty() => {
            outln!(
                "plan:          none ({})",
                terminal(h.no_plan_reason.as_deref().unwrap_or("no steps"))
            );
        }
        Some(p) => {
            let done = p.steps.iter().filter(|s| s.status.is_closed()).count();
            outln!(
                "plan:          {done} of {} step(s) done; {}",
                p.steps.len(),
                counts.join(", ")
            );
            for line in p.render().lines() {
                outln!("  {}", terminal(line));
            }
        }
    }
    Ok(())
}

pub(super) fn stats(env: &Env, args: &StatsArgs) -> anyhow::Result<ExitCode> {
    let db = open_db(env)?;
    let stats = db.stats()?;
    let costs = crate::task::cost::costs(&db, &env.layout, &env.config.llm.pricing)?;
    if args.json {
        #[derive(Serialize)]
        struct Out<'a> {
            by_status: serde_json::Map<String, serde_json::Value>,
            total: &'a ModelStats,
            by_model: &'a [ModelStats],
            cost_usd: &'a crate::task::cost::Costs,
        }
        let by_status = stats
            .by_status
            .iter()
            .map(|(s, n)| (s.to_string(), serde_json::Value::from(*n)))
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&Out {
                by_status,
                total: &stats.total,
                by_model: &stats.by_model,
                cost_usd: &costs,
            })?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let counts: Vec<String> = stats
        .by_status
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    outln!("tasks: {} ({})", stats.total.tasks, counts.join(", "));
    let mut table = vec![
        [
            "MODEL",
            "TASKS",
            "COMPLETED",
            "FAILED",
            "AVG_SECS",
            "TOKENS",
            "LLM_CALLS",
            "TOOL_CALLS",
            "COMPRESSIONS",
            "CACHE_READ",
            "CACHE_WRITE",
            "COST",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let row = |m: &ModelStats, name: String| {
        vec![
            name,
            m.tasks.to_string(),
            m.completed.to_string(),
            m.failed.to_string(),
            m.avg_duration_secs
                .map(|d| format!("{d:.1}"))
                .unwrap_or_else(|| "-".into()),
            m.total_tokens.to_string(),
            m.llm_calls.to_string(),
            m.tool_calls.to_string(),
            m.compressions.to_string(),
            m.cache_read_tokens.to_string(),
            m.cache_creation_tokens.to_string(),
            crate::config::pricing::show_cost(match &m.model {
                Some(model) => costs.by_model.get(model).copied(),
                None => costs.total,
            }),
        ]
    };
    for m in &stats.by_model {
        table.push(row(m, m.model.clone().unwrap_or_else(|| "-".into())));
    }
    table.push(row(&stats.total, "(all)".into()));
    print_table(&table)?;
    if !costs.by_day.is_empty() {
        outln!("");
        let mut days = vec![["DAY", "MODEL", "COST"].map(String::from).to_vec()];
        for ((day, model), usd) in &costs.by_day {
            days.push(vec![
                day.clone(),
                model.clone(),
                crate::config::pricing::show_cost(Some(*usd)),
            ]);
        }
        print_table(&days)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `n` and the noun for it: `1 LLM call`, `2 LLM calls`, `0 LLM calls`.
fn counted(n: impl Into<i128>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `show --compactions`: the task's compaction record ([`crate::ops::compactions`]).
/// The git workspace record of the task directory at `dir` and the stat line of its
/// `changes.patch` (`no change` without one), if it has a record.
fn workspace_of(
    dir: &std::path::Path,
) -> Option<(crate::workspace::record::WorkspaceRecord, String)> {
    use crate::workspace::checkout::{MAX_PATCH_BYTES, PATCH_FILE, stat_line};
    let dir = crate::task_dir::TaskDir::open(dir).ok()?;
    let rec = crate::workspace::record::WorkspaceRecord::read(&dir).ok()??;
    let patch = dir
        .read_bounded_if_exists(PATCH_FILE, MAX_PATCH_BYTES)
        .ok()
        .flatten()
        .unwrap_or_default();
    Some((rec, stat_line(&patch)))
}

/// `PATH (worktree of URL at REF, base 1234567)` / `PATH (git checkout, base 1234567)`.
fn describe_workspace(rec: &crate::workspace::record::WorkspaceRecord) -> String {
    use crate::untrusted::terminal;
    let base = &rec.base_commit[..rec.base_commit.len().min(12)];
    let what = if rec.managed {
        format!(
            "worktree of {} at {}",
            rec.repository.as_deref().unwrap_or("?"),
            rec.git_ref.as_deref().unwrap_or("?")
        )
    } else {
        "git checkout".to_string()
    };
    terminal(&format!("{} ({what}, base {base})", rec.path)).into_owned()
}

/// `ctxhost diff UUID`: the task's `changes.patch` (`git diff --binary` of its workspace
/// against the base commit of its workspace.json), `no change`, or `no git workspace`.
pub(super) fn diff(env: &Env, args: &DiffArgs) -> anyhow::Result<ExitCode> {
    use crate::workspace::checkout::{MAX_PATCH_BYTES, PATCH_FILE, stat_line};
    let (_db, row) = env.open_task(&args.uuid)?;
    let remote = crate::remote::open(env.config.context_storage.remote.as_ref())?;
    let Some((_, path)) =
        crate::remote::view::for_reading(remote.as_deref(), &env.layout, &row.uuid)?
    else {
        outln!("no git workspace");
        return Ok(ExitCode::SUCCESS);
    };
    let dir = crate::task_dir::TaskDir::open(&path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    if crate::workspace::record::WorkspaceRecord::read(&dir)?.is_none() {
        outln!("no git workspace");
        return Ok(ExitCode::SUCCESS);
    }
    let patch = dir
        .read_bounded_if_exists(PATCH_FILE, MAX_PATCH_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.show(PATCH_FILE)))?
        .unwrap_or_default();
    if patch.is_empty() {
        outln!("no change");
    } else if args.stat {
        outln!("{}", stat_line(&patch));
    } else {
        use std::io::{IsTerminal as _, Write as _};
        let mut out = std::io::stdout().lock();
        // A patch is the model's text: on a terminal its control characters are shown
        // escaped; piped, it is the exact bytes (`ctxhost diff UUID | git apply`).
        let r = if out.is_terminal() {
            out.write_all(crate::untrusted::terminal(&String::from_utf8_lossy(&patch)).as_bytes())
        } else {
            out.write_all(&patch)
        };
        r.and_then(|()| out.flush())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn show_compactions(env: &Env, uuid: &str, json: bool) -> anyhow::Result<ExitCode> {
    let remote = crate::remote::open(env.config.context_storage.remote.as_ref())?;
    let Some((_, path)) = crate::remote::view::for_reading(remote.as_deref(), &env.layout, uuid)?
    else {
        anyhow::bail!(
            "task {uuid} has no directory under {}",
            env.layout.root().display()
        );
    };
    let dir = crate::task_dir::TaskDir::open(&path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    let record = crate::ops::compactions::compactions(&dir)?;
    if json {
        // The list stays the output; a summary line that does not read is said on stderr.
        for bad in &record.unreadable {
            eprintln!("warning: {}", crate::untrusted::terminal(bad));
        }
        outln!("{}", serde_json::to_string_pretty(&record.compactions)?);
    } else {
        outln!("{}", crate::ops::compactions::render(&record).trim_end());
    }
    Ok(ExitCode::SUCCESS)
}
