//! The `ctxhost` command line.
//!
//! Exit codes (stable): 0 success; 1 a task or check failed, or an operation failed at run
//! time; 2 usage or configuration error (bad flag, bad config value, unknown or invalid UUID,
//! ambiguous UUID prefix).
//!
//! Every command that takes a task UUID (`show`, `pause`, `resume`, `retry`, `stop`) also takes
//! a unique prefix of it, of at least 4 hexadecimal digits ([`crate::task_ref`]).
//! Logs go to stderr (`RUST_LOG`, or `-v`/`-vv`/`-vvv`); results go to stdout, as a table or,
//! with `--json`, as one JSON document (`ask` and `show --follow`: one JSON object per event
//! and line, [`crate::ops::follow::Event`]).

mod ask;
pub mod docs;
mod follow;
mod init;
mod lifecycle;
pub use crate::config::llm_flags;
mod maintenance;
mod mcp;
pub(crate) mod out;
mod poll;
pub mod render;
mod report;
mod serve;
mod submit;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, contexts_from};
use crate::error::exit_code_of;
pub use crate::error::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, usage};
use crate::layout::Layout;

const ABOUT: &str =
    "Run coding-agent tasks with file-based context and sandboxed WebAssembly plugins";

const LONG_ABOUT: &str = "\
Run coding-agent tasks with file-based context and sandboxed WebAssembly plugins.

Every task's conversation lives in files under contexts/ (messages.jsonl, current.jsonl, ...);
tasks.db records each task's status and statistics. `ctxhost run` starts one process per task.";

const EXAMPLES: &str = "\
Examples:
  ctxhost init                                   create ./contexts and a commented ./config.yaml
  ctxhost init --provider llamacpp --base-url http://127.0.0.1:8089   ... for a local llama-server
  ctxhost ask 'Explain src/main.rs'              run one task in the foreground, printing it as it goes
  ctxhost ask --provider llamacpp --base-url http://127.0.0.1:8089 'Say hi'   no config file needed
  ctxhost submit 'Explain src/main.rs'           queue a task, print its UUID
  ctxhost submit --prompt-file task.md --source github --owner acme --repo app --type issue --id 42
  echo 'Fix the build' | ctxhost submit -
  ctxhost run --once                             run queued tasks, exit when all are done
  ctxhost poll --once                            queue labelled GitHub/GitLab issues and PRs as tasks
  ctxhost tasks --status failed --json           list failed tasks as JSON
  ctxhost show 0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b
  ctxhost show 0193a4b2                          a unique prefix of a UUID works too (4+ hex digits)
  ctxhost show 0193a4b2 --follow                 print the task as it runs (wherever it runs) until it ends
  ctxhost pause 0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b --reason 'rate limit'
  ctxhost resume 0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b
  ctxhost retry 0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b   queue a failed task again (after fsck)
  ctxhost stats
  ctxhost cleanup --days 7 --dry-run
  ctxhost cleanup --all                          delete the directories of every finished task
  ctxhost fsck --repair
  ctxhost serve                                  web dashboard on http://127.0.0.1:7878/
  ctxhost migrate --to postgres                  move tasks.db into $CTXHOST_DATABASE_URL
  ctxhost plugin check ./my-compressor.wasm
  ctxhost config check                           check ./config.yaml as init and run load it
  ctxhost completions bash > ~/.local/share/bash-completion/completions/ctxhost

A task UUID can be shortened to any unique prefix of at least 4 hex digits.
Exit codes: 0 ok, 1 task/check failed, 2 usage or config error.";

/// Top-level arguments.
#[derive(Debug, Parser)]
#[command(name = "ctxhost", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    /// Flags accepted by every subcommand.
    pub global: GlobalArgs,
    #[command(subcommand)]
    /// The subcommand.
    pub command: Command,
}

/// Flags accepted by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Config file [default: config.yaml]. A missing ./config.yaml means all defaults; a
    /// --config PATH that does not exist is an error (except for `init`, which writes it).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// contexts/ directory (overrides context_storage.base_dir).
    #[arg(long, global = true, value_name = "DIR")]
    pub contexts: Option<PathBuf>,
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The config file used when `--config` is not given (may be missing: then defaults apply).
pub const DEFAULT_CONFIG: &str = "config.yaml";

impl GlobalArgs {
    /// The config file in effect: `--config PATH`, or [`DEFAULT_CONFIG`].
    pub fn config_path(&self) -> PathBuf {
        self.config
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the contexts/ tree and tasks.db, and write a commented config.yaml if none exists.
    #[command(after_help = "Examples:\n  ctxhost init\n  \
        ctxhost init --provider llamacpp --base-url http://127.0.0.1:8089   (scripts/local-llm.sh start prints the URL)\n\n\
        The --provider/--model/--base-url/--context-length/--api-key-env flags are written into the\n\
        config.yaml it creates (an existing config.yaml is kept as it is: the flags are then an error).")]
    Init(init::InitArgs),
    /// Run one task in the foreground and print it as it goes: replies, tool calls, compressions,
    /// then the answer, the counters and the task's UUID.
    #[command(
        after_help = "Examples:\n  ctxhost ask 'Explain what src/main.rs does'\n  \
        ctxhost ask --prompt-file task.md --json\n  \
        ctxhost ask --provider llamacpp --base-url http://127.0.0.1:8089 'Say hello'\n\n\
        The task runs in a task process of its own, like any task (`ctxhost show UUID` afterwards).\n\
        Ctrl-C pauses it at its next safe point (resume: `ctxhost resume UUID && ctxhost run --once`);\n\
        a second Ctrl-C stops it.\n\
        Exit codes: 0 completed, paused or stopped; 1 the task failed; 2 usage or config error."
    )]
    Ask(ask::AskArgs),
    /// Queue a task; prints its UUID.
    #[command(
        after_help = "Examples:\n  ctxhost submit 'Add a --dry-run flag to the CLI'\n  \
        ctxhost submit --prompt-file issue.md --source github --owner acme --repo app --type issue --id 7\n  \
        cat prompt.txt | ctxhost submit --prompt-file - --json"
    )]
    Submit(submit::SubmitArgs),
    /// Run the worker: start one process per queued task, up to the parallel limit.
    #[command(
        after_help = "Examples:\n  ctxhost run --once\n  ctxhost run --max-parallel 4\n\n\
        Before starting any task, every configured plugin is loaded (and compiled into the cache)\n\
        and the llm.api_key_env variable is checked; a failure is exit 2 and no task is touched.\n\
        With `sources` configured, run polls them every poll_interval_secs (not with --once) and\n\
        posts each task's result to its issue or pull request (--once: before it exits).\n\
        Ctrl-C (or SIGTERM): start no more tasks, pause the running ones at their next safe point,\n\
        exit when their processes have ended, listing how to resume them; a second Ctrl-C stops them.\n\
        Exit codes (--once): 0 all tasks completed, paused or stopped; 1 a task failed; 2 config error."
    )]
    Run(RunArgs),
    /// Queue open GitHub / GitLab issues and pull/merge requests carrying the label of
    /// `sources` as tasks, and publish finished tasks' results back to them.
    #[command(
        after_help = "Examples:\n  ctxhost poll --once\n  ctxhost poll --once --json\n  ctxhost poll\n\n\
        `ctxhost run` polls on its own every sources.*.poll_interval_secs when sources are configured.\n\
        Exit codes: 0 ok; 1 a repository or a publication failed; 2 no sources configured or a token variable unset."
    )]
    Poll(poll::PollArgs),
    /// List tasks, newest first.
    #[command(after_help = "Examples:\n  ctxhost tasks\n  ctxhost tasks --status running --json")]
    Tasks(report::TasksArgs),
    /// Show one task: its row, directory, result and last messages.
    #[command(
        after_help = "Examples:\n  ctxhost show 0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b\n  ctxhost show 0193a4b2 --json\n\n\
        Exit codes: 0 shown; 2 bad or unknown UUID, or ambiguous UUID prefix."
    )]
    Show(report::ShowArgs),
    /// Print a task's change to its git workspace: `changes.patch`, the `git diff --binary`
    /// against the base commit its workspace.json records (written at every step).
    #[command(
        after_help = "Examples:\n  ctxhost diff 0193a4b2\n  ctxhost diff 0193a4b2 | git apply\n  ctxhost diff 0193a4b2 --stat\n\n\
        Prints `no change` when the workspace equals its base, `no git workspace` when the task's\n\
        workspace is not a git checkout.\n\n\
        Exit codes: 0 shown; 2 bad or unknown UUID, or ambiguous UUID prefix."
    )]
    Diff(report::DiffArgs),
    /// Statistics: counts by status, durations, tokens, LLM calls, compressions, by model.
    Stats(report::StatsArgs),
    /// Pause a running task at its next safe point (its directory moves to paused/).
    #[command(
        after_help = "Examples:\n  ctxhost pause UUID --reason 'waiting for review'\n  ctxhost pause UUID --wait\n\n        Exit codes: 0 pause requested (or, with --wait, done); 1 the task is not running; 2 bad or unknown UUID, or ambiguous UUID prefix."
    )]
    Pause(lifecycle::PauseArgs),
    /// Queue a paused task again; it continues from its context (its files must pass
    /// `ctxhost fsck`: run `ctxhost fsck --repair` first if they do not).
    #[command(
        after_help = "Exit codes: 0 queued; 1 the task is not paused, or its files have problems (listed; `ctxhost fsck --repair` fixes what it can); 2 bad or unknown UUID, or ambiguous UUID prefix."
    )]
    Resume(lifecycle::ResumeArgs),
    /// Queue a failed task again; it continues from its context (its files must pass
    /// `ctxhost fsck`: run `ctxhost fsck --repair` first if they do not).
    #[command(
        after_help = "Exit codes: 0 queued; 1 the task is not failed, its files were deleted, or they have problems (listed; `ctxhost fsck --repair` fixes what it can); 2 bad or unknown UUID, or ambiguous UUID prefix."
    )]
    Retry(lifecycle::RetryArgs),
    /// Stop a task: at once if queued or paused, at its next safe point if running.
    #[command(
        after_help = "Exit codes: 0 stopped or stop requested; 1 the task already ended; 2 bad or unknown UUID, or ambiguous UUID prefix."
    )]
    Stop(lifecycle::StopArgs),
    /// Repair and requeue running tasks of this host whose process is gone (the worker does this
    /// on its own at start and every few seconds).
    Recover(lifecycle::RecoverArgs),
    /// Delete the directories of tasks finished more than N days ago (rows stay in tasks.db).
    #[command(
        after_help = "Examples:\n  ctxhost cleanup --dry-run\n  ctxhost cleanup --days 7 --json\n  ctxhost cleanup --all --dry-run"
    )]
    Cleanup(maintenance::CleanupArgs),
    /// Move the tree's tasks to another task store (SQLite tasks.db <-> PostgreSQL), checking
    /// that both agree; stop every worker first.
    #[command(
        after_help = "Examples:\n  CTXHOST_DATABASE_URL=postgres://ctxhost:PASSWORD@db:5432/ctxhost ctxhost migrate --to postgres\n  \
        ctxhost migrate --to sqlite --url-env MY_DB_URL\n\n\
        Exit codes: 0 migrated; 1 the copy failed (nothing changed); 2 usage error (tasks running, target not empty)."
    )]
    Migrate(maintenance::MigrateArgs),
    /// Check that tasks.db and contexts/ agree and every task file is sound; --repair fixes
    /// what can be fixed without losing data.
    #[command(after_help = "Exit codes: 0 no problem (left); 1 problems remain; 2 usage error.")]
    Fsck(maintenance::FsckArgs),
    /// Serve the web dashboard: watch, inspect and steer tasks in a browser.
    #[command(
        after_help = "Examples:\n  ctxhost serve                                 http://127.0.0.1:7878/\n  \
        ctxhost serve --bind 127.0.0.1:0              any free port (printed)\n  \
        CTXHOST_TOKEN=$(openssl rand -hex 16) ctxhost serve --bind 0.0.0.0:7878 --token-env CTXHOST_TOKEN\n\n\
        Only loopback addresses are served without an access token. Stop with Ctrl-C."
    )]
    Serve(serve::ServeArgs),
    /// Serve ctxhost's MCP tools over standard input and output, for Claude Code, Codex or an
    /// IDE: submit_task, wait_for_task, get_task, list_tasks, pause/resume/stop_task.
    #[command(
        after_help = "Examples:\n  claude mcp add ctxhost -- ctxhost --config /srv/ctx/config.yaml --contexts /srv/ctx/contexts mcp\n  \
        codex mcp add ctxhost -- ctxhost --config /srv/ctx/config.yaml --contexts /srv/ctx/contexts mcp\n\n\
        Tasks it queues are run by a `ctxhost run` worker on the same tree. `ctxhost serve` offers the\n\
        same server over streamable HTTP at /mcp (with its bearer tokens)."
    )]
    Mcp,
    /// Plugin tools.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Report what the built-in tools' sandbox can do on this machine: Landlock ABI, network
    /// isolation, process limits (exit 1 when `shell` and the write tools would refuse).
    Doctor,
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  ctxhost completions bash > ~/.local/share/bash-completion/completions/ctxhost\n  \
        ctxhost completions zsh > ~/.zfunc/_ctxhost      (with fpath+=~/.zfunc before compinit)\n  \
        ctxhost completions fish > ~/.config/fish/completions/ctxhost.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the JSON Schema of config.yaml, or check a config file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Write the references generated from the code (docs/reference/).
    #[command(hide = true, subcommand)]
    Docs(DocsCommand),
    /// Run COMMAND confined by the built-in tools' sandbox, its standard input and output
    /// this process's (the launcher of MCP servers with `sandbox: true`); exits with its code.
    #[command(hide = true)]
    SandboxExec {
        /// Readable and writable; the sandbox's workspace.
        #[arg(long, value_name = "DIR")]
        workspace: std::path::PathBuf,
        /// Readable and writable; HOME and TMPDIR.
        #[arg(long, value_name = "DIR")]
        temp_dir: std::path::PathBuf,
        /// Further writable directories.
        #[arg(long, value_name = "DIR")]
        write: Vec<std::path::PathBuf>,
        /// Further readable directories.
        #[arg(long, value_name = "DIR")]
        read: Vec<std::path::PathBuf>,
        /// Paths covered inside the sandbox.
        #[arg(long, value_name = "PATH")]
        hide: Vec<std::path::PathBuf>,
        /// Allow the network.
        #[arg(long)]
        network: bool,
        /// Only limits and the process's death (`tools.sandbox: off`).
        #[arg(long)]
        unconfined: bool,
        /// `cpu_secs,file_size_mib,memory_mib,processes`.
        #[arg(long, value_name = "N,N,N,N")]
        limits: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Run one task in this process (used by `ctxhost run`).
    #[command(hide = true)]
    TaskExec {
        /// The task's UUID (it must be queued).
        uuid: Option<String>,
        /// Claim the oldest queued task instead, and print its UUID on stdout.
        #[arg(long, conflicts_with = "uuid")]
        next: bool,
        /// The worker that started this process (recorded with the task's lease).
        #[arg(long, value_name = "ID")]
        worker_id: Option<String>,
        /// The directory the built-in tools work on (overrides the `workspace` config key;
        /// `ctxhost ask` passes its current directory).
        #[arg(long, value_name = "DIR")]
        workspace: Option<std::path::PathBuf>,
        /// Read the forge tokens of the sources with `workspace: true` as one JSON line on
        /// stdin (the worker writes them; they are never in this process's environment).
        #[arg(long = "forge-tokens-on-stdin")]
        forge_tokens_on_stdin: bool,
        /// The `llm` settings of the command that started this process.
        #[command(flatten)]
        llm: llm_flags::LlmFlags,
    },
}

/// `ctxhost config …`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the JSON Schema (draft 2020-12) of config.yaml: every key, its type, default and
    /// meaning. `ctxhost init` writes it as contexts/config.schema.json (out of the built-in
    /// tools' sight), and the first line of the config.yaml it writes points editors
    /// (yaml-language-server) at it.
    #[command(
        after_help = "Examples:\n  ctxhost config schema > contexts/config.schema.json\n\n\
        A config.yaml whose first line is `# yaml-language-server: $schema=contexts/config.schema.json` is\n\
        checked by editors that use yaml-language-server (VS Code's YAML extension, Neovim, Helix)."
    )]
    Schema,
    /// Check a config file (--config PATH, default config.yaml) as `init` and `run` load it,
    /// with the same messages: unknown keys (with the closest known one), types, ranges.
    #[command(
        after_help = "Examples:\n  ctxhost config check\n  ctxhost config check --config prod.yaml\n\n\
        Exit codes: 0 the file is valid; 2 it is missing or invalid (the message names the key)."
    )]
    Check,
}

/// `ctxhost docs …` (hidden: for the repository's own docs).
#[derive(Debug, Subcommand)]
pub enum DocsCommand {
    /// Write the generated references (CLI, config keys and schema, metrics, spans) into DIR.
    Gen {
        /// The directory to write (created).
        #[arg(value_name = "DIR", default_value = docs::REFERENCE_DIR)]
        dir: PathBuf,
    },
}

/// `ctxhost plugin …`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Check a component against the plugin contract (exit 0 pass, 1 fail).
    #[command(
        after_help = "Examples:\n  ctxhost plugin check builtin:jsonl-store\n  \
        ctxhost plugin check ./target/wasm32-wasip2/release/my_store.wasm --json"
    )]
    Check {
        /// `builtin:NAME` or a path to a .wasm component.
        spec: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Keep every check's task directory (fixtures, what the component wrote) in DIR
        /// (created; must be empty) instead of a temporary directory removed at the end.
        #[arg(long, value_name = "DIR")]
        keep: Option<std::path::PathBuf>,
    },
    /// Run one call of a component's world on a copy of a context, the LLM answered from
    /// canned replies (no network); print what it returned, the files it wrote, the LLM
    /// requests it made and the invariant checks.
    #[command(
        after_help = "Examples:\n  ctxhost plugin try builtin:llm-summarizer --context current.jsonl --reply 'The user asked for X.'\n  \
        ctxhost plugin try my_format.wasm --context current.jsonl --replies replies.txt\n\n\
        Compressor: one compression. Request format: write-request, then read-response of the first reply.\n\
        Message store: open, then add-message. --replies FILE: one reply a line, or a JSON array of strings."
    )]
    Try {
        /// `builtin:NAME` or a path to a .wasm component.
        spec: String,
        /// The context to copy into the temporary task directory (chat messages, JSON lines).
        #[arg(long, value_name = "FILE")]
        context: std::path::PathBuf,
        /// The LLM's reply to every request.
        #[arg(long, value_name = "TEXT", conflicts_with = "replies")]
        reply: Option<String>,
        /// The LLM's replies in order (the last repeats).
        #[arg(long, value_name = "FILE")]
        replies: Option<std::path::PathBuf>,
    },
    /// Create a plugin project that builds and passes `plugin check` as generated.
    #[command(
        after_help = "Examples:\n  ctxhost plugin new --kind compressor my-compressor\n  \
        cd my-compressor && cargo build --release && \
        ctxhost plugin check target/wasm32-wasip2/release/my_compressor.wasm\n  \
        ctxhost plugin new --kind compressor --lang python py-compressor\n  \
        ctxhost plugin new --kind request-format my-format\n  \
        ctxhost plugin new --kind message-store my-store\n  \
        ctxhost plugin new --kind strategy my-strategy\n  \
        ctxhost plugin new --kind compressor --lang js js-compressor\n  \
        ctxhost plugin new --kind strategy --lang python py-strategy\n\n\
        Templates: Rust for every kind (with the SDK vendored in vendor/); Python and \
        JavaScript for --kind compressor and --kind strategy.\n\
        The plugin contract and build instructions per language: docs/PLUGINS.md."
    )]
    New {
        /// The project directory to create; its name is the plugin's name (lowercase letters,
        /// digits, `-`).
        dir: std::path::PathBuf,
        /// The plugin kind (its WIT world).
        #[arg(long, value_enum)]
        kind: crate::ops::plugin_new::Kind,
        /// The language.
        #[arg(long, value_enum, default_value_t = crate::ops::plugin_new::Lang::Rust)]
        lang: crate::ops::plugin_new::Lang,
        /// A checkout of the ctxhost-plugin SDK crate (crates/ctxhost-plugin) for the Rust
        /// project to depend on by path (default: this build's source tree when present, else
        /// the registry version).
        #[arg(long, value_name = "DIR")]
        sdk: Option<std::path::PathBuf>,
    },
}

/// `ctxhost run` arguments.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Exit when the queue is empty and every started task has finished: exit status 1 if a
    /// task it ran ended failed, else 0.
    #[arg(long)]
    pub once: bool,
    /// Task processes at once (overrides worker.max_parallel_tasks).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_parallel: Option<u32>,
    /// How often to look at the queue, milliseconds (overrides worker.poll_interval_ms).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..))]
    pub poll_ms: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0: any
    /// free port, logged). Not served unless given.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The `llm` settings for the tasks this worker runs.
    #[command(flatten)]
    pub llm: llm_flags::LlmFlags,
}

/// Entry point of the binary: parse arguments, run, map the outcome to an exit code.
pub fn main() -> ExitCode {
    // contexts/ holds conversations, code and tool output: owner-only, whoever writes it.
    crate::layout::use_owner_only_umask();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    init_logging(cli.global.verbose);
    match dispatch(cli) {
        Ok(code) => code,
        // The reader of our stdout went away (`| head`): nothing more to say to anyone.
        Err(e) if out::is_closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code_of(&e))
        }
    }
}

/// Log targets kept at `warn` unless `RUST_LOG` says otherwise: the component compiler
/// (cranelift, regalloc2, wasmtime's cranelift glue, wasm parsing), which at debug/trace logs
/// every instruction of every compiled function (gigabytes per component), and the
/// PostgreSQL client, which at debug logs every statement with its parameters (task data).
pub const QUIET_TARGETS: &[&str] = &[
    "cranelift_codegen",
    "cranelift_frontend",
    "cranelift_assembler_x64",
    "cranelift_entity",
    "regalloc2",
    "wasmtime_cranelift",
    "wasmtime_internal_cranelift",
    "wasmtime_environ",
    "wasmparser",
    "tokio_postgres",
    "postgres",
];

/// The OpenTelemetry SDK's own log targets, off without `-v`: with the collector down they say
/// at each process's end what ctxhost's own line says once (`OpenTelemetry: N of M spans were
/// not exported`, [`crate::telemetry`]), e.g. `BatchSpanProcessor.Shutdown.Timeout` at ERROR.
pub const OTEL_SDK_TARGETS: &[&str] = &["opentelemetry_sdk", "opentelemetry_otlp"];

/// The log filter (EnvFilter directive syntax) used when `RUST_LOG` is not set, for a `-v`
/// count: 0 `warn,ctxhost=info` (and [`OTEL_SDK_TARGETS`] off), 1 `info`, 2 `debug`, 3+
/// `trace`, each followed by `TARGET=warn` for every [`QUIET_TARGETS`] entry.
pub fn default_log_filter(verbose: u8) -> String {
    let base = match verbose {
        0 => "warn,ctxhost=info",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let mut f = base.to_string();
    for t in QUIET_TARGETS {
        f.push_str(&format!(",{t}=warn"));
    }
    if verbose == 0 {
        for t in OTEL_SDK_TARGETS {
            f.push_str(&format!(",{t}=off"));
        }
    }
    f
}

/// Log targets held at `info` whatever `RUST_LOG` asks: ureq's debug line of each request's
/// head quotes every header but `Authorization` and `Cookie` (so an `x-api-key` or an
/// `OTEL_EXPORTER_OTLP_HEADERS` value would reach the log).
pub const SECRET_TARGETS: &[&str] = &["ureq::unit"];

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    // An explicit RUST_LOG is taken as given (it may ask for cranelift's trace on purpose),
    // except for the targets that would log secrets.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_log_filter(verbose)));
    let filter = SECRET_TARGETS
        .iter()
        .fold(filter, |f, t| match format!("{t}=info").parse() {
            Ok(d) => f.add_directive(d),
            Err(_) => f,
        });
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_target(verbose >= 2)
        .try_init();
}

/// The config and the contexts/ layout in effect for a command.
pub(crate) struct Env {
    pub config: Config,
    pub config_path: PathBuf,
    pub layout: Layout,
    pub verbose: u8,
    /// Where the contexts directory was named: `--contexts`, or `context_storage.base_dir` of
    /// the config file (or its default), for errors.
    pub contexts_from: String,
}

impl Env {
    /// Load the config: an explicit `--config PATH` must exist; the default ./config.yaml
    /// may be missing (defaults apply).
    fn load(global: &GlobalArgs) -> anyhow::Result<Env> {
        Env::load_with(global, &llm_flags::LlmFlags::default())
    }

    /// [`Env::load`], then the `llm` settings `flags` give replace the config's
    /// ([`llm_flags::LlmFlags::apply`]).
    fn load_with(global: &GlobalArgs, flags: &llm_flags::LlmFlags) -> anyhow::Result<Env> {
        let config_path = global.config_path();
        let mut config = match &global.config {
            Some(path) => Config::load_existing(path)?,
            None => Config::load(&config_path)?,
        };
        flags.apply(&mut config)?;
        crate::db::binding::set_working_copies(config.context_storage.remote.is_some());
        let root = global
            .contexts
            .clone()
            .unwrap_or_else(|| config.context_storage.base_dir.clone());
        let contexts_from = contexts_from(global.contexts.is_some(), &config_path);
        Ok(Env {
            config,
            config_path,
            layout: Layout::new(root),
            verbose: global.verbose,
            contexts_from,
        })
    }

    /// `"FILE: "` for an error about a setting of the config file, like the file's own
    /// validation errors (`config.yaml: llm.x: ...`); empty when no file is in use (defaults).
    pub(crate) fn config_file_prefix(&self) -> String {
        if self.config_path.exists() {
            format!("{}: ", self.config_path.display())
        } else {
            String::new()
        }
    }

    /// Fail with a usage error, creating nothing, when the contexts/ tree cannot be created
    /// where it is configured ([`Layout::creation_blocker`]); the error names the directory and
    /// where it was set.
    pub(crate) fn check_tree_location(&self) -> anyhow::Result<()> {
        match self.layout.creation_blocker() {
            None => Ok(()),
            Some(why) => Err(usage(format!(
                "{}: cannot create the contexts directory {}: {why}",
                self.contexts_from,
                self.layout.root().display()
            ))),
        }
    }

    /// Fail with a usage error unless the contexts/ tree exists, with its store (tasks.db, or
    /// store.json naming another store): read-only commands never create it.
    pub(crate) fn require_tree(&self) -> anyhow::Result<()> {
        let has_store = self.layout.db_path().exists()
            || crate::db::binding::store_file(self.layout.root()).exists();
        if !self.layout.exists() || !has_store {
            return Err(usage(format!(
                "no contexts directory at {} (run `ctxhost init`, or pass --contexts DIR)",
                self.layout.root().display()
            )));
        }
        Ok(())
    }

    /// The task a command names by `given` (its UUID, or a unique prefix of it:
    /// [`crate::task_ref::TaskRef`]) and the task store it is in. `given` is validated before
    /// the tree or the store is touched.
    ///
    /// Errors (usage, exit 2): `given` is neither a UUID nor a UUID prefix of at least 4
    /// hexadecimal digits; no contexts tree; no task has that UUID or prefix; the prefix is
    /// ambiguous (the matching tasks are listed).
    pub(crate) fn open_task(
        &self,
        given: &str,
    ) -> anyhow::Result<(crate::db::Db, crate::db::TaskRow)> {
        let task = crate::task_ref::TaskRef::parse(given)?;
        self.require_tree()?;
        let db = self.open_db()?;
        let row = task.resolve(&db)?;
        Ok((db, row))
    }

    /// Open the task store of the config for the tree; a store that is configured wrongly
    /// (the URL variable) or that does not own the tree is a usage error (exit 2).
    pub(crate) fn open_db(&self) -> anyhow::Result<crate::db::Db> {
        crate::ops::open_store(&self.config, &self.layout)
    }
}

/// The log filter of task processes a foreground command starts (`ask`): warnings only, the
/// command prints the task's progress itself.
pub(crate) fn quiet_log_filter() -> String {
    let mut f = "warn".to_string();
    for t in QUIET_TARGETS {
        f.push_str(&format!(",{t}=warn"));
    }
    f
}

/// The checks before a command runs any task ([`crate::worker::preflight`]), reported as usage
/// errors naming the config file, and nothing created before them. Compiling the components
/// the first time takes a while: a line on stderr says so when the cache is empty.
pub(crate) fn preflight(env: &Env) -> anyhow::Result<()> {
    env.check_tree_location()?;
    let cache = crate::plugins::cache_dir(&env.layout);
    let empty = std::fs::read_dir(&cache).map_or(true, |mut d| d.next().is_none());
    if empty {
        render::Render::text(false).status(&format!(
            "compiling plugins into {} (first run only)…",
            cache.display()
        ));
    }
    crate::worker::preflight(&env.config, &env.layout)
        .map_err(|e| usage(format!("{}{e:#}", env.config_file_prefix())))?;
    remote_preflight(env)
}

/// With `context_storage.remote`: refuse a store that does not honour conditional writes
/// ([`crate::remote::fencing::ensure`]) before any task runs. A store that cannot be reached
/// now (one attempt) is left to each claim, which probes it too (and sets its task aside).
fn remote_preflight(env: &Env) -> anyhow::Result<()> {
    let Some(cfg) = env.config.context_storage.remote.as_ref() else {
        return Ok(());
    };
    let once = crate::remote::RemoteConfig {
        retry_secs: 0,
        ..cfg.clone()
    };
    let store = crate::remote::Store::open(&once)?;
    env.layout.ensure()?;
    match crate::remote::fencing::ensure(&store, &env.layout) {
        Err(e)
            if e.downcast_ref::<crate::remote::store::Unreachable>()
                .is_some() =>
        {
            tracing::warn!("cannot probe the object store's conditional writes now: {e:#}");
            Ok(())
        }
        r => r,
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Init(args) => init::run(&global, &args),
        Command::Ask(args) => ask::run(&Env::load_with(&global, &args.llm)?, &args),
        Command::Submit(args) => submit::run(&Env::load_with(&global, &args.llm)?, &args),
        Command::Completions { shell } => {
            // Generated into memory first: clap_complete panics on a failed write, and a
            // reader that stops early (`| head`) is a closed pipe, a quiet exit ([`out`]).
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "ctxhost", &mut script);
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, &script)
                .and_then(|()| std::io::Write::flush(&mut out))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(ConfigCommand::Schema) => {
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, crate::config::schema::schema_text().as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(ConfigCommand::Check) => {
            // The loader `init` and `run` use, so the same messages (exit 2 on any error).
            let path = global.config_path();
            Config::load_existing(&path)?;
            out::outln!("{}: ok", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Docs(DocsCommand::Gen { dir }) => {
            let cli = <Cli as clap::CommandFactory>::command();
            for path in docs::write(&dir, &cli)? {
                out::outln!("{}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => {
            let env = Env::load_with(&global, &args.llm)?;
            // Configuration mistakes (a contexts directory that cannot be created there, a
            // plugin that does not load, an unset API key or source token) are reported once
            // here, before any task is touched and before the tree is created.
            preflight(&env)?;
            env.layout.ensure()?;
            // A store that does not own this tree (or is configured wrongly) is refused before
            // any task is touched.
            let db = env.open_db()?;
            // Copies of finished or paused tasks whose last sync failed are uploaded now.
            if let Some(store) = crate::remote::open(env.config.context_storage.remote.as_ref())? {
                crate::remote::catch_up_idle(&store, &env.layout, |uuid| {
                    db.get(uuid).ok().flatten().is_some_and(|r| {
                        r.status != crate::db::Status::Running && r.files_deleted_at.is_none()
                    })
                });
            }
            drop(db);
            let sources = if env.config.sources.any() {
                Some(crate::sources::Sources::connect(&env.config.sources)?)
            } else {
                None
            };
            let opts = crate::worker::WorkerOptions {
                once: args.once,
                max_parallel: args
                    .max_parallel
                    .unwrap_or(env.config.worker.max_parallel_tasks),
                poll_interval: std::time::Duration::from_millis(
                    args.poll_ms.unwrap_or(env.config.worker.poll_interval_ms),
                ),
                config_path: env.config_path.exists().then(|| absolute(&env.config_path)),
                contexts: absolute(env.layout.root()),
                verbose: env.verbose,
                max_crashes: env.config.worker.max_crashes,
                lease: env.config.worker.lease(),
                store: env.config.store_spec()?,
                // Task processes never get the sources' tokens in their environment; those
                // of sources with `workspace: true` come on their stdin (their git fetches).
                env_remove: sources
                    .as_ref()
                    .map(|s| s.token_envs().to_vec())
                    .unwrap_or_default(),
                child_stdin: crate::sources::workspace::ForgeTokens::from_env(&env.config.sources)?
                    .map(|t| crate::worker::Secret(t.to_line())),
                child_args: args.llm.to_args(),
                interrupts: Some(crate::interrupt::Interrupts::install()?),
                pricing: env.config.llm.pricing.clone(),
            };
            if let Some(addr) = args.metrics_addr {
                let server = crate::metrics::server::MetricsServer::start(
                    addr,
                    opts.store.clone(),
                    opts.contexts.clone(),
                )?;
                eprintln!("metrics at http://{}/metrics", server.local_addr());
            }
            // The sources poll (unless --once) and publish on their own thread.
            let background = sources
                .map(|s| {
                    crate::sources::schedule::Background::spawn(
                        env.config.clone(),
                        env.layout.clone(),
                        s,
                        !args.once,
                    )
                })
                .transpose()?;
            let summary = crate::worker::run(&opts)?;
            if !summary.paused.is_empty() {
                eprintln!(
                    "{} task(s) paused; to continue: ctxhost resume UUID, then ctxhost run",
                    summary.paused.len()
                );
                for uuid in &summary.paused {
                    eprintln!("  ctxhost resume {uuid}");
                }
            }
            let (mut unpublished, mut refused) = (0, 0);
            if let Some(bg) = background {
                let last = bg.finish()?;
                for (uuid, e) in last.errors.iter().chain(&last.given_up) {
                    eprintln!("error: publishing task {uuid}: {e}");
                }
                // A comment whose answer was lost is confirmed (or posted) by the next pass:
                // a warning, not a failure of this run.
                for (uuid, e) in &last.unconfirmed {
                    eprintln!("warning: {}", poll::unconfirmed_line(uuid, e));
                }
                for w in &last.waiting {
                    if w.comment_may_exist {
                        eprintln!("warning: {}", poll::waiting_line(w));
                    } else {
                        eprintln!("error: {}", poll::waiting_line(w));
                    }
                }
                unpublished = last.errors.len()
                    + last.waiting.iter().filter(|w| !w.comment_may_exist).count();
                refused = last.given_up.len();
            }
            if unpublished > 0 {
                eprintln!(
                    "{unpublished} task result(s) could not be published yet; `ctxhost poll --once` or the next `ctxhost run` retries once their wait is over"
                );
            }
            if refused > 0 {
                eprintln!(
                    "{refused} task result(s) will not be published: the forge refused them for good (`ctxhost show UUID` has the error)"
                );
            }
            if unpublished + refused > 0 {
                return Ok(ExitCode::from(EXIT_FAILED));
            }
            // With --once: exit 1 when a task this worker ran ended failed.
            Ok(if summary.failed > 0 {
                eprintln!(
                    "{} task(s) failed (of {} task processes run); see `ctxhost tasks --status failed`",
                    summary.failed, summary.finished
                );
                ExitCode::from(EXIT_FAILED)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Poll(args) => poll::poll(&Env::load(&global)?, &args),
        Command::Tasks(args) => report::tasks(&Env::load(&global)?, &args),
        Command::Show(args) => report::show(&Env::load(&global)?, &args),
        Command::Diff(args) => report::diff(&Env::load(&global)?, &args),
        Command::SandboxExec {
            workspace,
            temp_dir,
            write,
            read,
            hide,
            network,
            unconfined,
            limits,
            command,
        } => {
            let n: Vec<u64> = limits
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|e| usage(format!("--limits {limits}: {e}")))?;
            let [cpu_secs, file_size_mib, memory_mib, processes] = n[..] else {
                return Err(usage(format!("--limits {limits}: four numbers expected")));
            };
            let policy = crate::sandbox::Policy {
                workspace,
                temp_dir,
                write_paths: write,
                read_paths: read,
                hidden: hide,
                network,
                limits: crate::sandbox::Limits {
                    cpu_secs,
                    file_size_mib,
                    memory_mib,
                    processes,
                },
                enforce: !unconfined,
            };
            let (program, args) = command.split_first().ok_or_else(|| usage("no command"))?;
            let code = crate::sandbox::exec_confined(&policy, program, args)?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        Command::Doctor => {
            let env = Env::load(&global)?;
            let support = crate::sandbox::probe();
            out::outln!("{}", support.report().trim_end());
            let t = &env.config.tools;
            out::outln!(
                "tools: built-in {}, sandbox {}, network {}, workspace {}",
                if t.builtin { "on" } else { "off" },
                if t.sandbox == crate::tools::SandboxMode::On {
                    "on"
                } else {
                    "OFF (unconfined)"
                },
                if t.network { "allowed" } else { "none" },
                env.config.workspace.as_ref().map_or(
                    "the current directory (ask) / none (submit)".to_string(),
                    |w| w.display().to_string()
                )
            );
            Ok(match support.missing() {
                Some(m) if t.sandbox == crate::tools::SandboxMode::On => {
                    eprintln!("error: shell, write_file and edit_file will refuse: missing {m}");
                    ExitCode::from(EXIT_FAILED)
                }
                _ => ExitCode::SUCCESS,
            })
        }
        Command::Stats(args) => report::stats(&Env::load(&global)?, &args),
        Command::Pause(args) => lifecycle::pause(&Env::load(&global)?, &args),
        Command::Resume(args) => lifecycle::resume(&Env::load(&global)?, &args),
        Command::Stop(args) => lifecycle::stop(&Env::load(&global)?, &args),
        Command::Retry(args) => lifecycle::retry(&Env::load(&global)?, &args),
        Command::Recover(args) => lifecycle::recover(&Env::load(&global)?, &args),
        Command::Cleanup(args) => maintenance::cleanup(&Env::load(&global)?, &args),
        Command::Fsck(args) => maintenance::fsck(&Env::load(&global)?, &args),
        Command::Serve(args) => serve::run(&Env::load(&global)?, &args),
        Command::Mcp => mcp::run(&Env::load(&global)?),
        Command::Migrate(args) => maintenance::migrate(&Env::load(&global)?, &args),
        Command::Plugin(PluginCommand::New {
            dir,
            kind,
            lang,
            sdk,
        }) => {
            let created = crate::ops::plugin_new::new_plugin(&crate::ops::plugin_new::NewPlugin {
                kind,
                lang,
                dir,
                sdk,
            })?;
            println!(
                "created {lang} {kind} plugin `{}` in {}:",
                created.name,
                created.dir.display()
            );
            let vendored = created
                .files
                .iter()
                .filter(|f| f.starts_with("vendor/"))
                .count();
            for f in created.files.iter().filter(|f| !f.starts_with("vendor/")) {
                println!("  {f}");
            }
            if vendored > 0 {
                println!("  vendor/ (the ctxhost-plugin SDK and ctxhost-format, {vendored} files)");
            }
            println!("next:\n  cd {}", created.dir.display());
            for step in &created.next_steps {
                println!("  {step}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugin(PluginCommand::Try {
            spec,
            context,
            reply,
            replies,
        }) => {
            use crate::plugin_check::try_call;
            let replies = match (reply, replies) {
                (Some(r), _) => vec![r],
                (None, Some(file)) => try_call::read_replies(&file)
                    .map_err(|e| crate::error::usage(format!("{e:#}")))?,
                (None, None) => Vec::new(),
            };
            // The limits a task would get: a `--config` that does not exist is refused.
            let env = Env::load(&global)?;
            // Ctrl-C interrupts the component's call (the process exits 130 within 2 s in any
            // case, e.g. while compiling).
            let interrupts = crate::interrupt::Interrupts::install_exiting(
                std::time::Duration::from_secs(2),
                EXIT_INTERRUPTED,
            )?;
            let options = try_call::TryOptions {
                context,
                replies,
                limits: env.config.runtime_limits(),
                interrupt: Some(interrupts.stop_probe()),
            };
            match try_call::run(&spec, &options) {
                Ok(text) => {
                    std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) if interrupts.count() > 0 => {
                    eprintln!("error: {e:#}");
                    Ok(ExitCode::from(EXIT_INTERRUPTED))
                }
                Err(e) => Err(e),
            }
        }
        Command::Plugin(PluginCommand::Check { spec, json, keep }) => {
            let env = Env::load(&global)?;
            let passed = crate::plugin_check::run(
                &spec,
                json,
                keep.as_deref(),
                env.config.runtime_limits(),
            )?;
            Ok(if passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILED)
            })
        }
        Command::TaskExec {
            uuid,
            next,
            worker_id,
            workspace,
            forge_tokens_on_stdin,
            llm,
        } => {
            use crate::task_process::Target;
            if forge_tokens_on_stdin {
                crate::sources::workspace::ForgeTokens::read_from(std::io::stdin().lock())?
                    .install();
            }
            let mut env = Env::load_with(&global, &llm)?;
            if workspace.is_some() {
                env.config.workspace = workspace;
            }
            let target = match (uuid, next) {
                (Some(u), false) => {
                    Target::Task(crate::layout::parse_uuid(&u).map_err(|e| usage(e.to_string()))?)
                }
                (None, true) => Target::Next,
                _ => return Err(usage("task-exec takes a task UUID or --next")),
            };
            let ran =
                crate::task_process::run(&env.config, &env.layout, &target, worker_id.as_deref())?;
            // Completed, stopped and paused are what was asked for; only a failure is exit 1.
            Ok(match ran {
                Some((_, crate::db::Status::Failed)) => ExitCode::from(EXIT_FAILED),
                _ => ExitCode::SUCCESS,
            })
        }
    }
}

/// `p` made absolute against the current directory (unchanged if that cannot be read).
pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

    /// Records the target of every event that passes the filter.
    struct Targets(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> Layer<S> for Targets {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let target = event.metadata().target().to_string();
            self.0.lock().unwrap().push(target);
        }
    }

    /// Which of a trace and a warn event from a compiler module and from ctxhost pass the
    /// default filter at `verbose`.
    fn passed(verbose: u8) -> Vec<String> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let filter = tracing_subscriber::EnvFilter::new(default_log_filter(verbose));
        let subscriber = tracing_subscriber::registry()
            .with(Targets(seen.clone()))
            .with(filter);
        tracing::subscriber::with_default(subscriber, || {
            tracing::trace!(target: "cranelift_codegen::machinst::lower", "trace-cg");
            tracing::debug!(target: "regalloc2::ion", "debug-ra");
            tracing::trace!(target: "wasmtime_internal_cranelift::compiler", "trace-wc");
            tracing::warn!(target: "cranelift_codegen::isa", "warn-cg");
            tracing::trace!(target: "ctxhost::agent", "trace-ours");
            tracing::info!(target: "ctxhost::worker", "info-ours");
            tracing::error!(target: "opentelemetry_sdk", "otel-sdk");
        });
        let seen = seen.lock().unwrap();
        seen.clone()
    }

    #[test]
    fn compiler_logs_stay_at_warn_at_every_verbosity() {
        assert_eq!(
            passed(3),
            [
                "cranelift_codegen::isa",
                "ctxhost::agent",
                "ctxhost::worker",
                "opentelemetry_sdk"
            ]
        );
        assert_eq!(
            passed(2),
            [
                "cranelift_codegen::isa",
                "ctxhost::worker",
                "opentelemetry_sdk"
            ]
        );
        // The SDK's own errors repeat ctxhost's line about spans not exported: off without -v.
        assert_eq!(passed(0), ["cranelift_codegen::isa", "ctxhost::worker"]);
        for t in QUIET_TARGETS {
            assert!(default_log_filter(3).contains(&format!("{t}=warn")), "{t}");
        }
    }
}
