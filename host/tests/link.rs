//! How the two binaries are linked (`host/build/static_link.rs`): on Linux with glibc,
//! `palisade-init` is static-pie (no dynamic loader at each of its starts inside every sandbox)
//! and `palisade` loads no `libgcc_s.so.1`. The build falls back to dynamic linking, with a
//! cargo warning, only where the C compiler has no static archives, which a machine that links
//! Rust with gcc has (`crt1.o` and `libc.a` come with `libc6-dev`); these tests make a silent
//! fallback, or a toolchain that stops honouring the link arguments, fail.

#![cfg(all(target_os = "linux", target_env = "gnu"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::Read as _;

const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");
const INIT: &str = env!("CARGO_BIN_EXE_palisade-init");

fn head(path: &str) -> Vec<u8> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .unwrap()
        .take(64 * 1024)
        .read_to_end(&mut head)
        .unwrap();
    head
}

#[test]
fn palisade_init_has_no_dynamic_loader() {
    palisade::probe::docker::elf_is_static_for_this_machine(&head(INIT))
        .unwrap_or_else(|why| panic!("palisade-init {why}"));
    // The check itself tells a dynamic executable: `palisade` names its loader.
    assert!(palisade::probe::docker::elf_is_static_for_this_machine(&head(PALISADE)).is_err());
    // And it runs: its usage line on a bare start, as always.
    let out = std::process::Command::new(INIT).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(palisade_shims::init::EXIT_SETUP_FAILED),
        "{out:?}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("internal to palisade"));
}

#[test]
fn palisade_needs_no_libgcc_s() {
    // The dynamic section's strings name every library the loader maps; `libc.so.6` is there.
    let bytes = std::fs::read(PALISADE).unwrap();
    let names = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    assert!(names(b"libc.so.6\0"), "the check finds a needed library");
    assert!(!names(b"libgcc_s.so.1\0"), "palisade loads libgcc_s.so.1");
}
