//! Builds the C parts of the cg-funcs workload: its compute kernels (a static library, with
//! frame pointers and `push %rbp` prologues; -O0, because GCC gives optimised leaf functions
//! no frame even with -fno-omit-frame-pointer), one kernel with an `endbr64` prologue, and a
//! shared library (`libcgfuncs_lib.so`) that cg-funcs links with an rpath to this build's
//! OUT_DIR. Only cg-funcs links them (its `#[link]` attributes). Also three C programs of
//! the probe-safety tests and benchmarks, whose paths the tests get at compile time
//! (`CG_PRINTS_ARGC`, `CG_SETJMP`, `CG_MANY`): `prints-argc`, `cgsetjmp` (static) and
//! `cg-many` (1,000 tiny functions, generated here); for the late-attach tests
//! `cgdlopen` (`CG_DLOPEN`), which loads `libcgdl.so` (`CG_DL_LIB`, in a directory of its own,
//! outside any library search path) with dlopen() during the run. The symbol tests' programs:
//! `cg-exit` (`CG_EXIT`: short processes with an anonymous frame in every stack),
//! `cg-lines` (`CG_LINES`: -O0 -g, a function inlined into another, for source lines; and
//! shrunk by dwz, its shared DWARF in a supplementary file: `CG_LINES_DWZ`), and
//! `cg-strip` stripped of its symbol table three ways, each with a build id of its own:
//! with a separate debug file to be installed by build id (`CG_STRIP_BUILDID`, its debug file
//! `CG_STRIP_BUILDID_DEBUG`, its id `CG_STRIP_BUILD_ID`), with a `.gnu_debuglink` to
//! `.debug/cg-strip-link.debug` beside it (`CG_STRIP_LINK`), and with MiniDebugInfo
//! (`CG_STRIP_MINI`). The unwinding tests' programs (main -> a -> b -> leaf with a known
//! work split): `cgunwind.c` built `-O2 -fomit-frame-pointer` (`CG_UNWIND_NOFP`) and
//! `-O2 -fno-omit-frame-pointer -momit-leaf-frame-pointer` (`CG_UNWIND_LEAF`), also
//! without unwind tables, its frames in `.debug_frame` only (`CG_UNWIND_DEBUG_FRAME`; and
//! stripped, with them in a separate debug file by debug link, compressed:
//! `CG_UNWIND_SEPARATE`), and
//! `rs/cgunwind.rs` built by rustc as a release binary without frame pointers
//! (`CG_UNWIND_RS`); and their references built with frame pointers in every function,
//! `-O2 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer` (`CG_UNWIND_FP`) and
//! `-C force-frame-pointers=yes` (`CG_UNWIND_RS_FP`). Needs a C compiler, binutils' `objcopy` and `xz` (`cargo xtask
//! setup` installs gcc, which brings binutils; xz is part of every Debian system).
use std::{env, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    for file in [
        "build.rs",
        "c/cgfuncs.c",
        "c/cgfuncs_cet.c",
        "c/cglib.c",
        "c/prints-argc.c",
        "c/cgsetjmp.c",
        "c/cgdl.c",
        "c/cgdlopen.c",
        "c/cgexit.c",
        "c/cgstrip.c",
        "c/cgunwind.c",
        "rs/cgunwind.rs",
        "c/cglines.c",
    ] {
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

    let shared = |library: &PathBuf, source: &str| {
        let status = cc::Build::new()
            .opt_level(0)
            .get_compiler()
            .to_command()
            .args(["-shared", "-fPIC", "-O0", "-fcf-protection=none"])
            .args(common)
            .arg("-o")
            .arg(library)
            .arg(source)
            .status();
        match status {
            Ok(s) if s.success() => {}
            other => panic!(
                "building {}: {other:?} (is a C compiler installed?)",
                library.display()
            ),
        }
    };
    shared(&out.join("libcgfuncs_lib.so"), "c/cglib.c");
    let dl_dir = out.join("dl");
    std::fs::create_dir_all(&dl_dir).expect("creating OUT_DIR/dl");
    let dl_lib = dl_dir.join("libcgdl.so");
    shared(&dl_lib, "c/cgdl.c");
    let compiler = cc::Build::new().opt_level(1).get_compiler();
    let program = |name: &str, source: &PathBuf, extra: &[&str]| {
        let path = out.join(name);
        let status = compiler
            .to_command()
            .args(["-O1", "-g"])
            .args(extra)
            .arg("-o")
            .arg(&path)
            .arg(source)
            .status();
        match status {
            Ok(s) if s.success() => path,
            other => panic!(
                "building {}: {other:?} (is a C compiler installed?)",
                path.display()
            ),
        }
    };
    let prints_argc = program("prints-argc", &PathBuf::from("c/prints-argc.c"), &[]);
    let setjmp = program("cgsetjmp", &PathBuf::from("c/cgsetjmp.c"), &["-static"]);
    let many_source = out.join("cg-many.c");
    std::fs::write(&many_source, many_functions(1000)).expect("writing cg-many.c");
    let many = program("cg-many", &many_source, &[]);
    let dlopen = program("cgdlopen", &PathBuf::from("c/cgdlopen.c"), &["-ldl"]);
    let lines = program(
        "cg-lines",
        &PathBuf::from("c/cglines.c"),
        // -O0: every function keeps its frame (GCC drops a leaf's at -O1 whatever the
        // flags), and always_inline still inlines.
        &["-O0", "-fno-omit-frame-pointer", "-fcf-protection=none"],
    );
    let lines_dwz = dwz_pair(&out, &program);
    let unoptimised = cc::Build::new().opt_level(0).get_compiler();
    let exit = out.join("cg-exit");
    run(unoptimised
        .to_command()
        .args(["-O0", "-fcf-protection=none"])
        .args(common)
        .arg("-o")
        .arg(&exit)
        .arg("c/cgexit.c"));
    let strip = stripped_programs(&out, &unoptimised, &common);
    let unwind = |name: &str, flags: &[&str]| {
        let path = out.join(name);
        run(compiler
            .to_command()
            .arg("-O2")
            .args(flags)
            .arg("-o")
            .arg(&path)
            .arg("c/cgunwind.c"));
        path
    };
    let unwind_nofp = unwind("cg-unwind-nofp", &["-fomit-frame-pointer"]);
    let unwind_leaf = unwind(
        "cg-unwind-leaf",
        &["-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"],
    );
    // No unwind tables: its frames are in .debug_frame only (-g), beside the start-up
    // objects' small .eh_frame.
    let unwind_debug_frame = unwind(
        "cg-unwind-debug-frame",
        &[
            "-fomit-frame-pointer",
            "-fno-asynchronous-unwind-tables",
            "-g",
        ],
    );
    // The same, stripped, its .debug_frame (and symbols) in a separate debug file in
    // .debug/ beside it, named by its debug link; its debug sections compressed, as
    // Debian's -dbgsym packages ship them (dh_strip).
    let separate = out.join("debug-frame");
    std::fs::create_dir_all(separate.join(".debug")).expect("creating the debug-frame folder");
    let separate_debug = separate.join(".debug").join("cg-unwind-separate.debug");
    run(std::process::Command::new("objcopy")
        .args(["--only-keep-debug", "--compress-debug-sections=zlib"])
        .arg(&unwind_debug_frame)
        .arg(&separate_debug));
    let unwind_separate = separate.join("cg-unwind-separate");
    run(std::process::Command::new("objcopy")
        .arg("--strip-all")
        .arg(format!("--add-gnu-debuglink={}", separate_debug.display()))
        .arg(&unwind_debug_frame)
        .arg(&unwind_separate));
    // The reference builds: frame pointers in every function, leaves included.
    let unwind_fp = unwind(
        "cg-unwind-fp",
        &["-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"],
    );
    let unwind_rust = |name: &str, frame_pointers: &str| {
        let path = out.join(name);
        run(
            std::process::Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
                .args(["--edition", "2021", "-C", "opt-level=3", "-C"])
                .arg(format!("force-frame-pointers={frame_pointers}"))
                .arg("-o")
                .arg(&path)
                .arg("rs/cgunwind.rs"),
        );
        path
    };
    let unwind_rs = unwind_rust("cg-unwind-rs", "no");
    let unwind_rs_fp = unwind_rust("cg-unwind-rs-fp", "yes");
    for (variable, path) in [
        ("CG_PRINTS_ARGC", prints_argc),
        ("CG_SETJMP", setjmp),
        ("CG_MANY", many),
        ("CG_DLOPEN", dlopen),
        ("CG_DL_LIB", dl_lib),
        ("CG_EXIT", exit),
        ("CG_LINES", lines),
        ("CG_LINES_DWZ", lines_dwz),
        ("CG_STRIP_BUILDID", strip.build_id),
        ("CG_STRIP_BUILDID_DEBUG", strip.build_id_debug),
        ("CG_STRIP_LINK", strip.link),
        ("CG_STRIP_MINI", strip.mini),
        ("CG_UNWIND_NOFP", unwind_nofp),
        ("CG_UNWIND_LEAF", unwind_leaf),
        ("CG_UNWIND_DEBUG_FRAME", unwind_debug_frame),
        ("CG_UNWIND_SEPARATE", unwind_separate),
        ("CG_UNWIND_RS", unwind_rs),
        ("CG_UNWIND_FP", unwind_fp),
        ("CG_UNWIND_RS_FP", unwind_rs_fp),
    ] {
        println!("cargo:rustc-env={variable}={}", path.display());
    }

    println!("cargo:rustc-env=CG_STRIP_BUILD_ID={STRIP_BUILD_ID}");

    println!("cargo:rustc-link-search=native={}", out.display());
    println!(
        "cargo:rustc-link-arg-bin=cg-funcs=-Wl,-rpath,{}",
        out.display()
    );
}

/// A C program with `count` tiny functions `cg_many_0`... that calls each once and prints
/// the sum: probe attach and detach benchmarks, and the interrupted-attach test.
fn many_functions(count: usize) -> String {
    let mut text = String::from(
        "/* Generated by tests/build.rs. */\n#include <stdio.h>\n\
         #define F(n) __attribute__((noinline)) long cg_many_##n(long x) { return x * 3 + n; }\n",
    );
    for n in 0..count {
        text.push_str(&format!("F({n})\n"));
    }
    text.push_str("int main(void) {\n    long sum = 0;\n");
    for n in 0..count {
        text.push_str(&format!("    sum += cg_many_{n}(sum & 7);\n"));
    }
    text.push_str("    printf(\"sum=%ld\\n\", sum);\n    return 0;\n}\n");
    text
}

/// Runs a build step; panics with what failed.
/// `cg-lines` built twice and shrunk by dwz as Debian's and Fedora's debug packages are
/// (`dwz -m`): what the two share (the inlined function's name among it) moves to a
/// supplementary file, `dwz/.dwz/cg-lines.debug`, that each names in `.gnu_debugaltlink`.
/// Returns the first; the tests pass `--debug-dir OUT/dwz`.
fn dwz_pair(
    out: &std::path::Path,
    program: &dyn Fn(&str, &PathBuf, &[&str]) -> PathBuf,
) -> PathBuf {
    let dir = out.join("dwz");
    std::fs::create_dir_all(dir.join(".dwz")).expect("creating the dwz folder");
    let source = PathBuf::from("c/cglines.c");
    // The second differs by a macro, so that they are two files (with the same code).
    let pair = [
        ("cg-lines-dwz", "-DCG_COPY=1"),
        ("cg-lines-dwz-2", "-DCG_COPY=2"),
    ]
    .map(|(name, copy)| {
        let flags = [
            "-O0",
            "-fno-omit-frame-pointer",
            "-fcf-protection=none",
            copy,
        ];
        let built = program(name, &source, &flags);
        let path = dir.join(name);
        std::fs::rename(&built, &path).expect("moving a dwz program");
        path
    });
    let common = dir.join(".dwz").join("cg-lines.debug");
    std::fs::remove_file(&common).ok();
    run(std::process::Command::new("dwz")
        .arg("-m")
        .arg(&common)
        .arg("-M")
        .arg(&common)
        .args(&pair));
    let [first, _] = pair;
    first
}

fn run(command: &mut std::process::Command) {
    match command.status() {
        Ok(s) if s.success() => {}
        other => {
            panic!(
                "{command:?}: {other:?} (are a C compiler, binutils' objcopy, xz and dwz installed? cargo xtask setup installs them)"
            )
        }
    }
}

/// The build id of the stripped program whose debug file the tests install by build id
/// (each variant has its own, so that no test finds another's debug file).
const STRIP_BUILD_ID: &str = "c67a5e0b1d000000000000000000000000000001";

struct Stripped {
    build_id: PathBuf,
    build_id_debug: PathBuf,
    link: PathBuf,
    mini: PathBuf,
}

/// `cg-strip` three times, without a symbol table, its functions named elsewhere.
fn stripped_programs(out: &std::path::Path, compiler: &cc::Tool, common: &[&str]) -> Stripped {
    let dir = out.join("strip");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".debug")).expect("creating the strip folder");
    let build = |name: &str, id: &str| {
        let full = dir.join(format!("{name}.full"));
        run(compiler
            .to_command()
            .args(["-O0", "-g", "-fcf-protection=none"])
            .args(common)
            .arg(format!("-Wl,--build-id=0x{id}"))
            .arg("-o")
            .arg(&full)
            .arg("c/cgstrip.c"));
        full
    };
    let objcopy = || std::process::Command::new("objcopy");
    // 1. By build id: the debug file is installed by the test.
    let full = build("cg-strip-buildid", STRIP_BUILD_ID);
    let build_id_debug = dir.join("cg-strip-buildid.debug");
    run(objcopy()
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&build_id_debug));
    let build_id = dir.join("cg-strip-buildid");
    run(objcopy().arg("--strip-all").arg(&full).arg(&build_id));
    // 2. By debug link, to .debug/ beside the program.
    let full = build("cg-strip-link", "c67a5e0b1d000000000000000000000000000002");
    let link_debug = dir.join(".debug").join("cg-strip-link.debug");
    run(objcopy()
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&link_debug));
    let link = dir.join("cg-strip-link");
    run(objcopy()
        .arg("--strip-all")
        .arg(format!("--add-gnu-debuglink={}", link_debug.display()))
        .arg(&full)
        .arg(&link));
    // 3. MiniDebugInfo: the symbol table alone, xz-compressed, in .gnu_debugdata.
    let full = build("cg-strip-mini", "c67a5e0b1d000000000000000000000000000003");
    let symtab = dir.join("cg-strip-mini.symtab");
    run(objcopy().arg("--only-keep-debug").arg(&full).arg(&symtab));
    run(objcopy()
        .args(["--strip-debug", "--remove-section=.comment"])
        .arg(&symtab));
    run(std::process::Command::new("xz")
        .args(["-f", "-k"])
        .arg(&symtab));
    let mini = dir.join("cg-strip-mini");
    run(objcopy()
        .arg("--strip-all")
        .arg(format!(
            "--add-section=.gnu_debugdata={}.xz",
            symtab.display()
        ))
        .arg(&full)
        .arg(&mini));
    Stripped {
        build_id,
        build_id_debug,
        link,
        mini,
    }
}
