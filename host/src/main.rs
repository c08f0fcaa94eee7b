fn main() -> std::process::ExitCode {
    ctxhost::cli::main()
}
