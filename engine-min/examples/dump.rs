//! Prints a GGUF file's metadata (arrays abbreviated) and tensor table.
fn main() {
    let path = std::env::args().nth(1).expect("path");
    let buf = std::fs::read(path).expect("read");
    let g = engine_min::gguf::Gguf::parse(&buf).expect("parse");
    println!(
        "version {} align {} data_offset {}",
        g.version, g.alignment, g.data_offset
    );
    for (k, v) in &g.metadata {
        match v {
            engine_min::gguf::Value::Array(t, xs) => println!(
                "{k}: array<{t}>[{}] first {:?}",
                xs.len(),
                xs.iter().take(5).collect::<Vec<_>>()
            ),
            v => println!("{k}: {v:?}"),
        }
    }
    for t in &g.tensors {
        println!(
            "{} {:?} {:?} off {} size {}",
            t.name, t.dims, t.ty, t.offset, t.size
        );
    }
}
