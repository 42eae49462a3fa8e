//! The rights a ruleset names and what each is to the kernel: the ABI that introduced it, its
//! `landlock` crate bits, which rights files take, and the sets palisade grants (read, writable
//! root). [`keep`] drops what the running kernel does not know, and says so.

use std::collections::BTreeSet;

use landlock::{AccessFs, AccessNet, BitFlags, Scope};

use super::{FsRight, NetRight, ScopeRight};
use crate::landlock_abi;

pub(super) const NET_ABI: u32 = landlock_abi::TCP;
pub(crate) const SCOPE_ABI: u32 = landlock_abi::SCOPES;

pub(super) const READ: [FsRight; 3] = [FsRight::Execute, FsRight::ReadFile, FsRight::ReadDir];

/// A writable root's rights: all but device creation and device ioctls.
pub(super) const WRITABLE: [FsRight; 13] = [
    FsRight::Execute,
    FsRight::ReadFile,
    FsRight::ReadDir,
    FsRight::WriteFile,
    FsRight::RemoveDir,
    FsRight::RemoveFile,
    FsRight::MakeDir,
    FsRight::MakeReg,
    FsRight::MakeSock,
    FsRight::MakeFifo,
    FsRight::MakeSym,
    FsRight::Refer,
    FsRight::Truncate,
];

impl FsRight {
    /// Every right of ABI [`TARGET_ABI`](super::TARGET_ABI).
    pub const ALL: [FsRight; 16] = [
        FsRight::Execute,
        FsRight::WriteFile,
        FsRight::ReadFile,
        FsRight::ReadDir,
        FsRight::RemoveDir,
        FsRight::RemoveFile,
        FsRight::MakeChar,
        FsRight::MakeDir,
        FsRight::MakeReg,
        FsRight::MakeSock,
        FsRight::MakeFifo,
        FsRight::MakeBlock,
        FsRight::MakeSym,
        FsRight::Refer,
        FsRight::Truncate,
        FsRight::IoctlDev,
    ];

    /// The ABI that introduced the right.
    pub fn abi(self) -> u32 {
        match self {
            FsRight::Refer => landlock_abi::REFER,
            FsRight::Truncate => landlock_abi::TRUNCATE,
            FsRight::IoctlDev => landlock_abi::IOCTL_DEV,
            _ => 1,
        }
    }

    /// Whether the right means anything on a non-directory (the kernel rejects the others).
    pub(super) fn for_files(self) -> bool {
        matches!(
            self,
            FsRight::Execute
                | FsRight::WriteFile
                | FsRight::ReadFile
                | FsRight::Truncate
                | FsRight::IoctlDev
        )
    }

    pub(super) fn bits(self) -> AccessFs {
        match self {
            FsRight::Execute => AccessFs::Execute,
            FsRight::WriteFile => AccessFs::WriteFile,
            FsRight::ReadFile => AccessFs::ReadFile,
            FsRight::ReadDir => AccessFs::ReadDir,
            FsRight::RemoveDir => AccessFs::RemoveDir,
            FsRight::RemoveFile => AccessFs::RemoveFile,
            FsRight::MakeChar => AccessFs::MakeChar,
            FsRight::MakeDir => AccessFs::MakeDir,
            FsRight::MakeReg => AccessFs::MakeReg,
            FsRight::MakeSock => AccessFs::MakeSock,
            FsRight::MakeFifo => AccessFs::MakeFifo,
            FsRight::MakeBlock => AccessFs::MakeBlock,
            FsRight::MakeSym => AccessFs::MakeSym,
            FsRight::Refer => AccessFs::Refer,
            FsRight::Truncate => AccessFs::Truncate,
            FsRight::IoctlDev => AccessFs::IoctlDev,
        }
    }
}

pub(super) fn fs_bits(rights: &BTreeSet<FsRight>) -> BitFlags<AccessFs> {
    rights
        .iter()
        .fold(BitFlags::EMPTY, |bits, right| bits | right.bits())
}

pub(super) fn net_bits(rights: &BTreeSet<NetRight>) -> BitFlags<AccessNet> {
    rights.iter().fold(BitFlags::EMPTY, |bits, right| {
        bits | match right {
            NetRight::BindTcp => AccessNet::BindTcp,
            NetRight::ConnectTcp => AccessNet::ConnectTcp,
        }
    })
}

pub(super) fn scope_bits(scopes: &BTreeSet<ScopeRight>) -> BitFlags<Scope> {
    scopes.iter().fold(BitFlags::EMPTY, |bits, scope| {
        bits | match scope {
            ScopeRight::AbstractUnixSocket => Scope::AbstractUnixSocket,
            ScopeRight::Signal => Scope::Signal,
        }
    })
}

/// The members of `set` the kernel's `abi` has; the names of the others go to `dropped`.
pub(super) fn keep<T: Right>(
    set: &BTreeSet<T>,
    abi: u32,
    dropped: &mut Vec<String>,
) -> BTreeSet<T> {
    let (kept, gone): (BTreeSet<T>, BTreeSet<T>) = set.iter().partition(|right| right.abi() <= abi);
    dropped.extend(gone.iter().map(|right| right.name().to_owned()));
    kept
}

/// A handled right or scope: the ABI that introduced it and its UAPI name.
pub(super) trait Right: Copy + Ord {
    fn abi(self) -> u32;
    fn name(self) -> &'static str;
}

impl Right for FsRight {
    fn abi(self) -> u32 {
        FsRight::abi(self)
    }
    fn name(self) -> &'static str {
        match self {
            FsRight::Execute => "execute",
            FsRight::WriteFile => "write_file",
            FsRight::ReadFile => "read_file",
            FsRight::ReadDir => "read_dir",
            FsRight::RemoveDir => "remove_dir",
            FsRight::RemoveFile => "remove_file",
            FsRight::MakeChar => "make_char",
            FsRight::MakeDir => "make_dir",
            FsRight::MakeReg => "make_reg",
            FsRight::MakeSock => "make_sock",
            FsRight::MakeFifo => "make_fifo",
            FsRight::MakeBlock => "make_block",
            FsRight::MakeSym => "make_sym",
            FsRight::Refer => "refer",
            FsRight::Truncate => "truncate",
            FsRight::IoctlDev => "ioctl_dev",
        }
    }
}

impl Right for NetRight {
    fn abi(self) -> u32 {
        NET_ABI
    }
    fn name(self) -> &'static str {
        match self {
            NetRight::BindTcp => "bind_tcp",
            NetRight::ConnectTcp => "connect_tcp",
        }
    }
}

impl Right for ScopeRight {
    fn abi(self) -> u32 {
        SCOPE_ABI
    }
    fn name(self) -> &'static str {
        match self {
            ScopeRight::AbstractUnixSocket => "abstract_unix_socket",
            ScopeRight::Signal => "signal",
        }
    }
}
