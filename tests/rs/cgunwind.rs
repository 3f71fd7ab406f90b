//! The unwinding tests' Rust program, built as a release binary without frame pointers
//! (tests/build.rs runs rustc on this one file): main -> cg_unwind_a -> cg_unwind_b ->
//! cg_unwind_leaf with the split of tests/c/cgunwind.c (a 10 %, b 30 %, leaf 60 %).
//! Each round's length varies as in the C program (0.5x to 1.5x the unit, the split kept).
//! Usage: cg-unwind-rs [ROUNDS] (default 2000).

use std::hint::black_box;

const UNIT: u64 = 20_000;

#[inline(always)]
fn spin(mut acc: u64, n: u64) -> u64 {
    for _ in 0..n {
        acc = black_box(
            acc.wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407),
        );
    }
    acc
}

#[inline(never)]
fn cg_unwind_leaf(acc: u64, n: u64) -> u64 {
    spin(acc, 6 * n)
}

#[inline(never)]
fn cg_unwind_b(acc: u64, n: u64) -> u64 {
    let acc = cg_unwind_leaf(spin(acc, 2 * n), n);
    spin(acc, n)
}

#[inline(never)]
fn cg_unwind_a(acc: u64, n: u64) -> u64 {
    // Work after the call: no tail call, so a stays on the stack.
    cg_unwind_b(spin(acc, n), n) ^ 1
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|r| r.parse().ok())
        .unwrap_or(2000);
    let unit = black_box(UNIT);
    let mut acc = black_box(rounds);
    let mut jitter: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..rounds {
        jitter ^= jitter << 13;
        jitter ^= jitter >> 7;
        jitter ^= jitter << 17;
        acc = cg_unwind_a(acc, unit / 2 + jitter % unit);
    }
    println!("{acc}");
}
