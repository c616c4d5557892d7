//! With the test-only `capi-tests` feature: compiles the C tests (`tests/c/`) into an archive that only
//! `tests/capi.rs` links (`#[link]` there; nothing is added to the library's own link line).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "capi-tests")]
    c_tests();
}

#[cfg(feature = "capi-tests")]
fn c_tests() {
    for f in [
        "tests/c/sme_capi_test.c",
        "tests/c/sme_example.c",
        "include/hetero_sme.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new()
        .file("tests/c/sme_capi_test.c")
        .file("tests/c/sme_example.c")
        .include("include")
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        // Link nothing into the library: the test asks for the archive itself.
        .cargo_metadata(false)
        .compile("hetero_sme_ctest");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rustc-link-search=native={out}");
}
