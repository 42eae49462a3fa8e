//! The layout the kernel reads a seccomp program in: kept beside the system calls that hand it
//! over (`sys::linux`), which cast a slice of it to `struct sock_filter`; the filter's builder
//! (`crate::seccomp`) re-exports it. Plain data on every OS, so programs are built and tested
//! anywhere.

/// One classic BPF instruction, laid out exactly like the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Instruction {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}
