//! Workload for the JIT-map tests (x86-64): runs a loop from anonymous executable memory, as
//! a JIT does, for `MS` milliseconds of wall time, after writing `/tmp/perf-PID.map` to name
//! it, the way the first argument says:
//!
//! - `regular`: a regular file of this process's user naming the loop `cg_jit_loop` (what a
//!   JIT writes);
//! - `link:FILE`: FILE (mode 0600) gets the map's line naming the loop `SECRET_FROM_FILE`,
//!   and the map is a symbolic link to FILE;
//! - `owner:UID`: a regular file naming the loop `cg_jit_loop`, handed to UID.
//!
//! `cg-jit MODE MS`. Prints its pid. The map is left for the test to remove (cg-trace reads
//! it at the end of its run).

use std::{
    os::unix::fs::{OpenOptionsExt, symlink},
    time::{Duration, Instant},
};

/// `dec %rdi; jnz .-3; ret`: counts its argument down to 0.
const CODE: [u8; 6] = [0x48, 0xff, 0xcf, 0x75, 0xfb, 0xc3];
const PAGE: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(ms)) = (
        args.first(),
        args.get(1).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: cg-jit regular|link:FILE|owner:UID MS");
        std::process::exit(2);
    };
    // SAFETY: a fresh private anonymous mapping that we fill, then make executable.
    let code = unsafe {
        let page = libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(page, libc::MAP_FAILED, "mmap");
        std::ptr::copy_nonoverlapping(CODE.as_ptr(), page.cast::<u8>(), CODE.len());
        assert_eq!(
            libc::mprotect(page, PAGE, libc::PROT_READ | libc::PROT_EXEC),
            0,
            "mprotect"
        );
        page
    };
    let address = code as usize;
    let line = |name: &str| format!("{address:x} {PAGE:x} {name}\n");
    let pid = std::process::id();
    let map = format!("/tmp/perf-{pid}.map");
    if mode == "regular" {
        std::fs::write(&map, line("cg_jit_loop")).expect("writing the map");
    } else if let Some(file) = mode.strip_prefix("link:") {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(file)
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, line("SECRET_FROM_FILE").as_bytes())
            })
            .expect("writing the linked file");
        symlink(file, &map).expect("linking the map");
    } else if let Some(uid) = mode.strip_prefix("owner:").and_then(|u| u.parse().ok()) {
        std::fs::write(&map, line("cg_jit_loop")).expect("writing the map");
        std::os::unix::fs::chown(&map, Some(uid), None).expect("handing the map over");
    } else {
        eprintln!("cg-jit: unknown mode {mode:?}");
        std::process::exit(2);
    }
    println!("{pid}");
    // SAFETY: the page holds CODE, a function of the C ABI taking one integer.
    let run: extern "C" fn(u64) = unsafe { std::mem::transmute(code) };
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        run(std::hint::black_box(5_000_000));
    }
}
