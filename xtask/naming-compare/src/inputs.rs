//! The files compared and their addresses: copies of the files that could change during a
//! run (the debug cg-trace, this program), libc in place (its debug file from libc6-dbg),
//! and a C program built here with `cc -O2 -g`, whose small static functions get inlined.
//! Addresses are picked as `symbolize::bench_with` picks them: a random function with a
//! size, then a random byte inside it, from a fixed seed.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

/// One file to name addresses in.
pub struct Input {
    /// What the table calls it.
    pub label: String,
    pub path: PathBuf,
}

/// The debug cg-trace of the repository's target folder.
pub fn default_cg_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/cg-trace")
}

/// The files this machine has (`debug_cg_trace`: a debug build of cg-trace), each copied
/// under `dir` where it might be rebuilt meanwhile; the ones missing are said on stderr.
pub fn prepare(dir: &Path, debug_cg_trace: &Path) -> Result<Vec<Input>> {
    let mut inputs = Vec::new();
    if debug_cg_trace.exists() {
        let copy = dir.join("cg-trace");
        std::fs::copy(debug_cg_trace, &copy)
            .with_context(|| format!("copying {}", debug_cg_trace.display()))?;
        inputs.push(Input {
            label: "cg-trace (Rust, debug build)".into(),
            path: copy,
        });
    } else {
        eprintln!(
            "{} missing (cargo build): left out",
            debug_cg_trace.display()
        );
    }
    let own = dir.join("naming-compare");
    std::fs::copy("/proc/self/exe", &own).context("copying /proc/self/exe")?;
    inputs.push(Input {
        label: "naming-compare (Rust, release, debug = 1)".into(),
        path: own,
    });
    let libc = PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6");
    if libc.exists() {
        inputs.push(Input {
            label: "libc.so.6 (debug file of libc6-dbg)".into(),
            path: libc,
        });
    }
    match build_c_program(dir) {
        Ok(path) => inputs.push(Input {
            label: "C program (gcc -O2 -g, inlined statics)".into(),
            path,
        }),
        Err(err) => eprintln!("C program left out: {err:#}"),
    }
    Ok(inputs)
}

/// Writes and builds a C program of 64 exported functions, each calling static helpers
/// that call smaller ones: at -O2 most helpers are inlined, two levels deep.
fn build_c_program(dir: &Path) -> Result<PathBuf> {
    let mut text = String::from("#include <stdio.h>\n#include <string.h>\n\n");
    for h in 0..96 {
        text.push_str(&format!(
            "static int leaf{h}(const char *s, int n)\n{{\n    int x = (int)strlen(s) + {h};\n    \
             for (int i = 0; i < n; i++)\n        x = x * 31 + s[i % 4] - {h};\n    \
             return x;\n}}\n\n"
        ));
    }
    for h in 0..48 {
        let (a, b) = (h * 2, h * 2 + 1);
        text.push_str(&format!(
            "static int mid{h}(const char *s, int n)\n{{\n    int x = leaf{a}(s, n);\n    \
             if (x & 1)\n        x += leaf{b}(s, n / 2);\n    \
             return x ^ {h};\n}}\n\n"
        ));
    }
    for f in 0..64 {
        let (a, b) = (f % 48, (f * 7 + 3) % 48);
        text.push_str(&format!(
            "__attribute__((noinline)) int exported{f}(const char *s, int n)\n{{\n    \
             int x = mid{a}(s, n);\n    for (int i = 0; i < n; i++)\n        \
             x += mid{b}(s + (i & 1), i);\n    return x;\n}}\n\n"
        ));
    }
    text.push_str("int main(int argc, char **argv)\n{\n    int x = 0;\n");
    for f in 0..64 {
        text.push_str(&format!("    x += exported{f}(argv[0], argc + {f});\n"));
    }
    text.push_str("    printf(\"%d\\n\", x);\n    return 0;\n}\n");
    let source = dir.join("inlined.c");
    std::fs::write(&source, text)?;
    let program = dir.join("inlined");
    let status = Command::new("cc")
        .args(["-O2", "-g", "-o"])
        .arg(&program)
        .arg(&source)
        .status()
        .context("running cc")?;
    if !status.success() {
        bail!("cc -O2 -g {} failed", source.display());
    }
    Ok(program)
}

/// `count` addresses inside `functions` ((address, size), sizes > 0), as `bench_with`
/// draws them (xorshift from its seed).
pub fn addresses(functions: &[(u64, u64)], count: usize) -> Vec<u64> {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..count)
        .map(|_| {
            let (start, size) = functions[(next() % functions.len() as u64) as usize];
            start + next() % size
        })
        .collect()
}

/// Writes addresses for a measuring child (little-endian u64s).
pub fn write_addresses(path: &Path, addresses: &[u64]) -> Result<()> {
    let bytes: Vec<u8> = addresses.iter().flat_map(|a| a.to_le_bytes()).collect();
    Ok(std::fs::write(path, bytes)?)
}

pub fn read_addresses(path: &Path) -> Result<Vec<u64>> {
    let bytes = std::fs::read(path)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}
