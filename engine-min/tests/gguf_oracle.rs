//! The format oracle: every tensor of every fixture (`HETERO_FIXTURES`, made by
//! `gguf-requantize` at set-up) and of the original Q4_1 model (`HETERO_MODEL`) dequantized by
//! gguf-py's numpy dequantizers (`scripts/gguf_oracle.py`, run with `HETERO_GGUF_PYTHON`, the
//! venv `scripts/setup.sh gguf-py` makes) and by `hetero_sme::dequantize_row`, compared bit for
//! bit; and a small synthetic file with one tensor of every type `dequantize_row` reads
//! (Q2_K, Q3_K, F16 and BF16 included), quantized by `hetero_sme::quantize_row` from random
//! values. Backend name `model` (the fixtures and gguf-py come with the model's set-up).

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use engine_min::gguf::{GgmlType, GgufFile};

mod common;

/// The fixture files `scripts/setup.sh fixtures` writes.
const FIXTURES: [&str; 5] = [
    "SmolLM2-135M-Instruct.Q4_K_M.gguf",
    "SmolLM2-135M-Instruct.Q5_K.gguf",
    "SmolLM2-135M-Instruct.Q6_K.gguf",
    "SmolLM2-135M-Instruct.Q5_0.gguf",
    "SmolLM2-135M-Instruct.Q5_1.gguf",
];

struct Oracle {
    python: PathBuf,
    script: PathBuf,
    files: Vec<PathBuf>,
}

fn probe() -> Result<Oracle, String> {
    let model = common::model_path()?;
    let dir = std::env::var("HETERO_FIXTURES").map_err(|_| "HETERO_FIXTURES is not set")?;
    let mut files = vec![model];
    for f in FIXTURES {
        let p = Path::new(&dir).join(f);
        if !p.is_file() {
            return Err(format!(
                "fixture {} is missing (scripts/setup.sh fixtures)",
                p.display()
            ));
        }
        files.push(p);
    }
    let python = PathBuf::from(
        std::env::var("HETERO_GGUF_PYTHON").map_err(|_| "HETERO_GGUF_PYTHON is not set")?,
    );
    let ok = Command::new(&python)
        .args(["-c", "import gguf, numpy"])
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !ok.success() {
        return Err(format!("{} cannot import gguf and numpy", python.display()));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gguf_oracle.py");
    Ok(Oracle {
        python,
        script,
        files,
    })
}

fn read_exact<const N: usize>(r: &mut impl Read) -> Option<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b).ok().map(|_| b)
}

/// Compares one file; returns the number of tensors per type.
fn compare(o: &Oracle, path: &Path) -> std::collections::BTreeMap<String, usize> {
    let file = GgufFile::open(path).expect("fixture parses");
    let mut child = Command::new(&o.python)
        .arg(&o.script)
        .arg(path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run gguf_oracle.py");
    let mut r = BufReader::with_capacity(1 << 20, child.stdout.take().expect("stdout"));
    let mut counts = std::collections::BTreeMap::new();
    let mut seen = 0;
    while let Some(len) = read_exact::<4>(&mut r) {
        let mut name = vec![0u8; u32::from_le_bytes(len) as usize];
        r.read_exact(&mut name).expect("name");
        let name = String::from_utf8(name).expect("utf-8 name");
        let code = u32::from_le_bytes(read_exact(&mut r).expect("type"));
        let n = u64::from_le_bytes(read_exact(&mut r).expect("count")) as usize;
        let (info, data) = file.tensor(&name).expect("tensor known to the parser");
        assert_eq!(GgmlType::from_code(code), Some(info.ty), "{name}: type");
        assert_eq!(n as u64, info.n_elements(), "{name}: element count");
        let k = info.dims[0] as usize;
        let rb = info.ty.row_bytes(k).expect("row size");
        let (mut want, mut got) = (vec![0u8; k * 4], vec![f32::NAN; k]);
        for (row, src) in data.chunks_exact(rb).enumerate() {
            r.read_exact(&mut want).expect("values");
            hetero_sme::dequantize_row(info.ty, src, &mut got)
                .unwrap_or_else(|e| panic!("{name} row {row}: {e}"));
            for (i, (g, w)) in got.iter().zip(want.chunks_exact(4)).enumerate() {
                let w = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{}: {name} ({}) row {row} value {i}: ours {g}, gguf-py {w}",
                    path.display(),
                    info.ty
                );
            }
        }
        *counts.entry(info.ty.to_string()).or_insert(0) += 1;
        seen += 1;
    }
    assert!(
        child.wait().expect("oracle exit").success(),
        "gguf_oracle.py failed"
    );
    assert_eq!(seen, file.header.tensors.len(), "every tensor streamed");
    counts
}

/// One 4 × 512 tensor per type `dequantize_row` reads, written to a temporary GGUF file.
fn synthetic_file() -> PathBuf {
    use engine_min::gguf::{write, Value};
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ];
    let (rows, k) = (4usize, 512usize);
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let x: Vec<f32> = (0..rows * k)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Uniform in [-1, 1), scaled per row over five decades, a few outliers.
            let u = (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
            let scale = 10f32.powi((i / k) as i32 - 3);
            if i % 97 == 0 {
                20.0 * u * scale
            } else {
                u * scale
            }
        })
        .collect();
    let data: Vec<(String, GgmlType, Vec<u8>)> = types
        .iter()
        .map(|&ty| {
            let rb = ty.row_bytes(k).unwrap();
            let mut q = vec![0u8; rows * rb];
            for (r, dst) in q.chunks_exact_mut(rb).enumerate() {
                hetero_sme::quantize_row(ty, &x[r * k..(r + 1) * k], dst).unwrap();
            }
            (format!("t.{}", ty.name()), ty, q)
        })
        .collect();
    let dims = [k as u64, rows as u64];
    let tensors: Vec<(&str, &[u64], u32, &[u8])> = data
        .iter()
        .map(|(n, ty, q)| (n.as_str(), &dims[..], ty.code(), q.as_slice()))
        .collect();
    let bytes = write(
        &[("general.architecture", Value::String("test".into()))],
        &tensors,
    );
    let path = std::env::temp_dir().join(format!("hetero-oracle-{}.gguf", std::process::id()));
    std::fs::write(&path, bytes).expect("write the synthetic file");
    path
}

#[test]
fn every_type_quantized_here_matches_gguf_py_bit_for_bit() {
    let Some(o) = hetero_tests::require("model", probe()) else {
        return;
    };
    let path = synthetic_file();
    let counts = compare(&o, &path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(counts.len(), 13, "one tensor per type: {counts:?}");
}

#[test]
fn every_tensor_of_every_fixture_matches_gguf_py_bit_for_bit() {
    let Some(o) = hetero_tests::require("model", probe()) else {
        return;
    };
    let mut types = std::collections::BTreeSet::new();
    for f in &o.files {
        let counts = compare(&o, f);
        eprintln!("{}: {counts:?}", f.display());
        types.extend(counts.into_keys());
    }
    // The fixtures hold every type the requantizer writes (and the model's own).
    for t in [
        "F32", "Q4_1", "Q8_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K",
    ] {
        assert!(types.contains(t), "no tensor of type {t} was compared");
    }
}
