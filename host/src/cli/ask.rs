//! `ctxhost ask "PROMPT"`: submit one task and run it in the foreground, in a task process of
//! its own (`ctxhost task-exec UUID`: the same claim, lease, files, limits and statistics as a
//! task a worker runs), printing it as it goes from its files ([`crate::ops::follow`],
//! [`super::render`]). Ctrl-C pauses the task at its next safe point, a second Ctrl-C stops
//! it; the task process is in a process group of its own, so the terminal's Ctrl-C reaches
//! only this command.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use clap::Args;

use super::llm_flags::LlmFlags;
use super::render::Render;
use super::{EXIT_FAILED, Env};
use crate::db::{Db, Status, TaskKey};
use crate::interrupt::{Interrupts, Request};
use crate::ops::control::{self, Refused};
use crate::ops::follow::{Event, Watch};
use crate::ops::submit::Submission;

/// `ctxhost ask` arguments.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("prompt_input").required(true).args(["text", "prompt_file"]))]
pub struct AskArgs {
    /// The task as text (`-` reads standard input).
    #[arg(value_name = "PROMPT")]
    pub text: Option<String>,
    /// Read the task from a file (`-` reads standard input).
    #[arg(long, value_name = "PATH")]
    pub prompt_file: Option<PathBuf>,
    /// Print one JSON object per event instead of text (shapes: README, "Using it").
    #[arg(long)]
    pub json: bool,
    /// The `llm` settings for this task.
    #[command(flatten)]
    pub llm: LlmFlags,
}

/// Parse → preflight → submit → start the task process → follow it → say how it ended.
pub(super) fn run(env: &Env, args: &AskArgs) -> anyhow::Result<ExitCode> {
    let prompt =
        super::submit::read_prompt(args.text.as_deref(), None, args.prompt_file.as_deref())?;
    super::preflight(env)?;
    // The current directory is the workspace unless the config names one: checked by the rule
    // the tools apply when the task runs, before anything is queued.
    if env.config.workspace.is_none() && env.config.tools.builtin {
        let cwd = std::env::current_dir()?;
        crate::tools::builtin::workspace::checked_root(&cwd, &super::submit::own_paths(env))
            .map_err(|why| {
                super::usage(format!(
                    "{why} (ask works on the current directory unless the config sets `workspace:`)"
                ))
            })?;
    }
    env.layout.ensure()?;
    let db = env.open_db()?;
    let row = crate::ops::submit::submit(
        &env.config,
        &env.layout,
        Submission {
            prompt,
            key: TaskKey {
                task_source: "local".into(),
                ..TaskKey::default()
            },
            user: std::env::var("USER").ok().filter(|u| !u.is_empty()),
            no_inherit: false,
            // Recorded with the task so that a resume (by `resume` and a worker) works on the
            // same directory.
            workspace: env
                .config
                .workspace
                .is_none()
                .then(std::env::current_dir)
                .and_then(Result::ok),
        },
    )?;
    let uuid = row.uuid.clone();
    let interrupts = Interrupts::install()?;
    let child = spawn_task_process(env, &args.llm, &uuid)?;
    let mut watch = AskWatch {
        render: if args.json {
            Render::json()
        } else {
            Render::text(false)
        },
        db: &db,
        layout: &env.layout,
        uuid: &uuid,
        interrupts,
        done: Request::None,
        child,
        child_exit: None,
        elsewhere: false,
    };
    let ended = crate::ops::follow::follow(&db, &env.layout, &uuid, &mut watch)?;
    watch.child.wait()?;
    if let Some(how) = watch.child_exit.clone().filter(|_| !watch.elsewhere) {
        match ended.status {
            Status::Running => {
                eprintln!(
                    "error: the task process of {uuid} died ({how}) while running the task; `ctxhost recover` requeues it, `ctxhost run --once` runs it again"
                );
                return Ok(ExitCode::from(EXIT_FAILED));
            }
            Status::Queued => {
                eprintln!(
                    "error: the task process exited ({how}) before it started task {uuid} (see the messages above); the task stays queued: `ctxhost run --once` runs it, `ctxhost stop {uuid}` removes it"
                );
                return Ok(ExitCode::from(EXIT_FAILED));
            }
            _ => {}
        }
    }
    if !args.json {
        match ended.status {
            Status::Paused => eprintln!(
                "paused. To continue: ctxhost resume {uuid} && ctxhost run --once   (watch it with `ctxhost show {uuid} --follow`)"
            ),
            Status::Stopped => eprintln!("stopped; `ctxhost show {uuid}` shows what it did"),
            _ => {}
        }
    }
    let interrupted = watch.done != Request::None;
    Ok(if ended.status == Status::Failed {
        ExitCode::from(EXIT_FAILED)
    } else if interrupted && matches!(ended.status, Status::Paused | Status::Stopped) {
        // Ctrl-C (or SIGTERM) ended the task's run: the shell's convention, not success.
        ExitCode::from(super::EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// `ctxhost [--config C] --contexts D task-exec UUID [llm flags]` in a process group of its
/// own, its log at `warn` unless `-v` or `RUST_LOG` says otherwise (the task's progress is what
/// this command prints).
fn spawn_task_process(env: &Env, llm: &LlmFlags, uuid: &str) -> anyhow::Result<Child> {
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find the ctxhost executable: {e}"))?;
    let mut cmd = Command::new(exe);
    if env.config_path.exists() {
        cmd.arg("--config").arg(super::absolute(&env.config_path));
    }
    cmd.arg("--contexts")
        .arg(super::absolute(env.layout.root()));
    if env.verbose > 0 {
        cmd.arg(format!("-{}", "v".repeat(env.verbose as usize)));
    } else if std::env::var_os("RUST_LOG").is_none() {
        // The failures this command prints from the task's files (a failed LLM call, the
        // task's end) are not logged again by its process.
        cmd.env(
            "RUST_LOG",
            format!(
                "{},{}=off,{}=off",
                super::quiet_log_filter(),
                crate::task_process::TASK_END_LOG,
                crate::llm::transport::GAVE_UP_LOG
            ),
        );
    }
    cmd.args(["task-exec", uuid]).args(llm.to_args());
    // The built-in tools work on the current directory unless the config names a workspace.
    if env.config.workspace.is_none()
        && let Ok(cwd) = std::env::current_dir()
    {
        cmd.arg("--workspace").arg(cwd);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .process_group(0);
    cmd.spawn()
        .map_err(|e| anyhow::anyhow!("cannot start the task process: {e}"))
}

/// Renders, and turns Ctrl-C into pause / stop requests for the task.
struct AskWatch<'a> {
    render: Render,
    db: &'a Db,
    layout: &'a crate::layout::Layout,
    uuid: &'a str,
    interrupts: Interrupts,
    /// The request made so far.
    done: Request,
    child: Child,
    /// How the task process ended, once it did.
    child_exit: Option<String>,
    /// Another process (a worker sharing the store) claimed the task before ours: it runs
    /// there, and is followed there.
    elsewhere: bool,
}

impl AskWatch<'_> {
    /// The process running the task, when it is not ours: `(pid, host, worker)` from the row.
    fn claimed_by_another(&self) -> anyhow::Result<Option<String>> {
        let ours = i64::from(self.child.id());
        Ok(self.db.get(self.uuid)?.and_then(|row| {
            let pid = row.process_id.filter(|p| *p != ours)?;
            (row.status != Status::Queued).then(|| {
                format!(
                    "process {pid} on {} (worker {})",
                    row.hostname.as_deref().unwrap_or("?"),
                    row.worker_id.as_deref().unwrap_or("?")
                )
            })
        }))
    }
}

impl Watch for AskWatch<'_> {
    fn event(&mut self, event: &Event) -> anyhow::Result<()> {
        self.render.event(event)
    }

    fn tick(&mut self, idle: Option<Duration>) -> anyhow::Result<bool> {
        let wanted = Request::of(self.interrupts.count());
        if wanted > self.done {
            match request(self.db, self.layout, self.uuid, wanted) {
                Ok(()) => {
                    self.done = wanted;
                    self.render.status(match wanted {
                        Request::Pause => "pausing… (at the next safe point); Ctrl-C again to stop",
                        _ => "stopping…",
                    });
                }
                // Not claimed yet: asked again at the next look.
                Err(e) if e.downcast_ref::<Refused>().is_some() => {}
                Err(e) => return Err(e),
            }
        }
        self.render.progress(idle);
        // A task process that died leaves its task `running`: nothing more will come.
        if self.child_exit.is_none()
            && let Some(status) = self.child.try_wait()?
        {
            self.child_exit = Some(crate::worker::describe_exit(status));
            // A worker sharing the store (`ctxhost run`) may have claimed the task before our
            // process did, which then had nothing to do: the task runs there, with that
            // worker's llm settings, and is followed to its end (Ctrl-C still pauses it).
            if status.success()
                && let Some(who) = self.claimed_by_another()?
            {
                self.elsewhere = true;
                self.render.status(&format!(
                    "note: another process claimed task {} first: {who}, e.g. a `ctxhost run` on this store; it runs there, with that worker's llm settings (not this command's flags); following it there",
                    self.uuid
                ));
                return Ok(true);
            }
            // Its last words may still be on their way to the row: one more look.
            return Ok(true);
        }
        Ok(self.child_exit.is_none() || self.elsewhere)
    }
}

/// Ask task `uuid` to pause or stop ([`control::pause`], [`control::stop`]).
fn request(
    db: &Db,
    layout: &crate::layout::Layout,
    uuid: &str,
    what: Request,
) -> anyhow::Result<()> {
    match what {
        Request::None => Ok(()),
        Request::Pause => control::pause(db, uuid, Some("Ctrl-C")),
        Request::Stop => control::stop(db, layout, uuid).map(|_| ()),
    }
}
