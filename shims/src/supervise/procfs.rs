//! The supervised tree as `/proc` shows it: every descendant of the supervisor (found by
//! walking parent links, as kernels without `CONFIG_PROC_CHILDREN` have no `children` files),
//! its CPU time, threads and private memory, and a signal that never reaches a recycled pid.

use std::collections::BTreeMap;
use std::fs;

use crate::sys;

/// One process of the supervised tree, from `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ProcStat {
    pub(super) pid: i32,
    pub(super) ppid: i32,
    /// Its process group.
    pub(super) pgrp: i32,
    /// Start time in clock ticks since boot: with the pid, the process's identity.
    pub(super) start: u64,
    /// utime + stime + cutime + cstime.
    pub(super) cpu_ticks: u64,
    pub(super) threads: u64,
    /// The command name (`comm`: at most 15 bytes, cut by the kernel), and its length.
    name: [u8; 16],
    name_len: u8,
}

impl ProcStat {
    /// The command name as the kernel keeps it (the first 15 bytes of the executable's name).
    pub(super) fn name(&self) -> &[u8] {
        self.name
            .get(..usize::from(self.name_len))
            .unwrap_or_default()
    }

    /// Sends `signal` if `pid` is still the process that was scanned (pidfd + start time, so a
    /// recycled pid is never signalled). Returns whether it was sent.
    pub(super) fn signal(&self, signal: i32) -> bool {
        // A child of the supervisor cannot be reaped (and its pid recycled) by anyone else, and
        // the supervisor does not reap between scanning and signalling.
        if self.ppid == sys::getpid() {
            return sys::kill(self.pid, signal).is_ok();
        }
        match sys::pidfd_open(self.pid) {
            Ok(fd) => {
                if read_stat(self.pid).is_some_and(|now| now.start == self.start) {
                    sys::pidfd_send_signal(&fd, signal).is_ok()
                } else {
                    false
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                read_stat(self.pid).is_some_and(|now| now.start == self.start)
                    && sys::kill(self.pid, signal).is_ok()
            }
            Err(_) => false,
        }
    }

    /// Resident memory not shared with files (`resident - shared` of `statm`), in bytes.
    pub(super) fn private_bytes(&self) -> u64 {
        let Ok(text) = crate::procfile::read_to_string(format!("/proc/{}/statm", self.pid)) else {
            return 0;
        };
        let mut fields = text
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse::<u64>().ok());
        match (fields.next().flatten(), fields.next().flatten()) {
            (Some(resident), Some(shared)) => resident
                .saturating_sub(shared)
                .saturating_mul(sys::page_size()),
            _ => 0,
        }
    }
}

pub(super) fn read_stat(pid: i32) -> Option<ProcStat> {
    let bytes = crate::procfile::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&bytes)
}

/// Parses `/proc/<pid>/stat`. The command name may contain spaces and parentheses, so fields
/// are counted from the last `)`.
pub(super) fn parse_stat(bytes: &[u8]) -> Option<ProcStat> {
    let open = bytes.iter().position(|b| *b == b'(')?;
    let close = bytes.iter().rposition(|b| *b == b')')?;
    let pid = std::str::from_utf8(bytes.get(..open)?)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let comm = bytes.get(open.checked_add(1)?..close)?;
    let mut name = [0_u8; 16];
    for (slot, byte) in name.iter_mut().zip(comm) {
        *slot = *byte;
    }
    let name_len = comm.len().min(name.len());
    let rest = std::str::from_utf8(bytes.get(close.checked_add(1)?..)?).ok()?;
    // After the name: field 3 (state) is index 0.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |field: usize| -> Option<u64> { fields.get(field.checked_sub(3)?)?.parse().ok() };
    let ppid = i32::try_from(num(4)?).ok()?;
    let pgrp = i32::try_from(num(5)?).ok()?;
    let cpu_ticks = [14, 15, 16, 17]
        .into_iter()
        .map(|f| num(f).unwrap_or(0))
        .fold(0_u64, u64::saturating_add);
    Some(ProcStat {
        pid,
        ppid,
        pgrp,
        start: num(22)?,
        cpu_ticks,
        threads: num(20).unwrap_or(1),
        name,
        name_len: u8::try_from(name_len).ok()?,
    })
}

/// Every process `/proc` lists that could be read (a process may exit while it is walked).
fn all_processes() -> impl Iterator<Item = ProcStat> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
}

/// SIGKILLs what a killed supervisor's launch left, from the launch's [`pid_record`]
/// (`<pid>[ <start ticks>]`), and returns how many processes were signalled. Without the start
/// time (the supervisor died before writing it), `not_before` bounds it: the clock tick after
/// boot before which the run had not started.
///
/// Why: bwrap's child is cloned before its parent releases it (it blocks reading an eventfd
/// that only the parent writes), and it arms no parent-death signal of its own until then.
/// When the supervisor is SIGKILLed in that window, the parent bwrap dies of its parent-death
/// signal and the child stays blocked forever with PPID 1, holding the run's stdio
/// (containers/bubblewrap#633). It is still in the launch's process group (it only leaves it
/// with `--new-session`, after setup), under bwrap's name. So a process is taken for a leftover
/// only if it has all of: the recorded group, the name `bwrap`, this user's uid, and a start
/// no earlier than the recorded launch's; each is signalled through a pidfd after checking its
/// start time again, so a recycled pid is never hit. Call it only for a run that is over.
///
/// [`pid_record`]: super::Launch::pid_record
pub fn kill_group_leftovers(record: &str, not_before: Option<u64>) -> usize {
    let mut fields = record.split_whitespace();
    let Some(Ok(pgid)) = fields.next().map(str::parse::<i32>) else {
        return 0;
    };
    let Some(launched) = fields
        .next()
        .and_then(|start| start.parse::<u64>().ok())
        .or(not_before)
    else {
        return 0;
    };
    if pgid <= 1 {
        return 0;
    }
    let uid = sys::getuid();
    let mut killed = 0;
    for stat in all_processes() {
        if stat.pgrp != pgid || stat.name() != b"bwrap" || stat.start < launched {
            continue;
        }
        let pid = stat.pid;
        // The real uid (`/proc/<pid>` is root's for a process that is not dumpable).
        let real_uid = crate::procfile::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("Uid:"))
                    .and_then(|ids| ids.split_whitespace().next())
                    .and_then(|id| id.parse::<libc::uid_t>().ok())
            });
        if real_uid == Some(uid) && stat.signal(libc::SIGKILL) {
            killed += 1;
        }
    }
    killed
}

/// Every descendant of the supervisor, found by walking parent links of all of `/proc`
/// (kernels without `CONFIG_PROC_CHILDREN` have no `children` files).
pub(super) fn proc_tree() -> Vec<ProcStat> {
    let mut by_parent: BTreeMap<i32, Vec<ProcStat>> = BTreeMap::new();
    for stat in all_processes() {
        by_parent.entry(stat.ppid).or_default().push(stat);
    }
    let mut tree = Vec::new();
    let mut queue = vec![sys::getpid()];
    while let Some(parent) = queue.pop() {
        if let Some(children) = by_parent.remove(&parent) {
            for child in children {
                queue.push(child.pid);
                tree.push(child);
            }
        }
    }
    tree
}
