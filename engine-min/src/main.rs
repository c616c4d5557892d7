//! `engine-min`: profile, plan and run a GGUF model across CPU, GPU and NPU.

fn main() {
    eprintln!("engine-min: not built yet (issue 9); nothing to run");
    std::process::exit(2);
}
