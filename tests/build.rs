//! Builds the C parts of the cg-funcs workload: its compute kernels (a static library, with
//! frame pointers and `push %rbp` prologues; -O0, because GCC gives optimised leaf functions
//! no frame even with -fno-omit-frame-pointer), one kernel with an `endbr64` prologue, and a
//! shared library (`libcgfuncs_lib.so`) that cg-funcs links with an rpath to this build's
//! OUT_DIR. Only cg-funcs links them (its `#[link]` attributes). Needs a C compiler (`cargo xtask setup` installs gcc).
use std::{env, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    for file in ["c/cgfuncs.c", "c/cgfuncs_cet.c", "c/cglib.c"] {
        println!("cargo:rerun-if-changed={file}");
    }
    let common = [
        "-fno-omit-frame-pointer",
        "-fno-inline",
        "-fno-optimize-sibling-calls",
    ];
    let mut kernels = cc::Build::new();
    kernels
        .file("c/cgfuncs.c")
        .opt_level(0)
        .cargo_metadata(false)
        .flag("-fcf-protection=none");
    for flag in common {
        kernels.flag(flag);
    }
    kernels.compile("cgfuncs");
    let mut cet = cc::Build::new();
    cet.file("c/cgfuncs_cet.c")
        .opt_level(0)
        .cargo_metadata(false)
        .flag("-fcf-protection=full");
    for flag in common {
        cet.flag(flag);
    }
    cet.compile("cgfuncs_cet");

    let library = out.join("libcgfuncs_lib.so");
    let status = cc::Build::new()
        .opt_level(0)
        .get_compiler()
        .to_command()
        .args(["-shared", "-fPIC", "-O0", "-fcf-protection=none"])
        .args(common)
        .arg("-o")
        .arg(&library)
        .arg("c/cglib.c")
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => panic!(
            "building {}: {other:?} (is a C compiler installed?)",
            library.display()
        ),
    }
    println!("cargo:rustc-link-search=native={}", out.display());
    println!(
        "cargo:rustc-link-arg-bin=cg-funcs=-Wl,-rpath,{}",
        out.display()
    );
}
