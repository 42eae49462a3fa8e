//! Which Landlock ABI brings which right (landlock(7)): the one table read both by the shim
//! (which rights a ruleset handles, and the lowest kernel ABI on which it is honest) and by the
//! host's probe (which capabilities `linux-landlock` may claim on this kernel), so the two
//! cannot disagree. Compiled on every OS: the probe is, and reports Landlock unavailable there.

/// Renaming and linking across directories (`LANDLOCK_ACCESS_FS_REFER`).
pub const REFER: u32 = 2;
/// Truncating files (`LANDLOCK_ACCESS_FS_TRUNCATE`): without it a file outside the writable
/// roots could still be emptied, so writes are not contained below this ABI.
pub const TRUNCATE: u32 = 3;
/// TCP bind and connect rules (`LANDLOCK_ACCESS_NET_*`).
pub const TCP: u32 = 4;
/// Device ioctls (`LANDLOCK_ACCESS_FS_IOCTL_DEV`).
pub const IOCTL_DEV: u32 = 5;
/// Scoping of abstract Unix sockets and signals (`LANDLOCK_SCOPE_*`).
pub const SCOPES: u32 = 6;

/// Whether a kernel at `abi` lets a ruleset keep writes inside the writable roots.
#[must_use]
pub fn contains_writes(abi: u32) -> bool {
    abi >= TRUNCATE
}

/// Whether a kernel at `abi` lets a ruleset deny every TCP bind and connect (network `none`,
/// with seccomp for the other socket families).
#[must_use]
pub fn denies_tcp(abi: u32) -> bool {
    abi >= TCP
}
