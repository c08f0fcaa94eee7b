//! The `ctxhost` binary: see [`ctxhost::cli`].
fn main() -> std::process::ExitCode {
    ctxhost::cli::main()
}
