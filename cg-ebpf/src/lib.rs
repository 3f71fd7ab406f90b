//! cg-ebpf: the kernel side of cg-trace. The programs live in `main.rs` (the eBPF binary);
//! this library target only exists so that cargo can track the crate as a build dependency.
#![no_std]
