//! `engine-min`: profile, plan and run a GGUF model across CPU, GPU and NPU
//! (`engine-min --help`; the command line lives in `engine_min::cli`).

fn main() -> std::process::ExitCode {
    engine_min::cli::main()
}
