//! A run's private temp dir and its lock, and the sweep of dead runs' leftovers that every new
//! run does first (a killed supervisor's temp dir, its orphaned bwrap child, its pending lock).
//!
//! `palisade run` takes its temp dir in a *slot* ([`RunTempDir::in_slot`]): `slot-<n>`, the
//! first of a bounded set that no live run holds. The temp dir is a writable root of the
//! decision, so a path unique to every run would make every run's decision input unique and the
//! decision cache (`crate::decisions`) useless; a slot's path is the same from one run to the
//! next, and a run that follows another decides from the cache. A slot is emptied before it is
//! used (whatever a dead run left there, and the processes it left, go first) and after.
//!
//! A slot's directory and its lock file stay from one run to the next: a run that ends empties
//! the directory and blanks the lock's record (overwrites it with spaces) rather than removing
//! the directory and truncating the file to nothing. On a disk-backed temp dir (ext4 here),
//! `rmdir` and `mkdir` cost about 0.1–0.2 ms each, and so does truncating to nothing a file
//! just written (ext4 then flushes its data: `auto_da_alloc`), half a millisecond of every run
//! together; what replaces them writes within a block the file already has.
//!
//! So the lock's size says whether the slot is clean: empty (never used) or exactly
//! [`RECORD_LEN`] blanks. A run that takes a slot marks it in use at once, before any command
//! can write there ([`mark_in_use`]: the blanks and one more byte), and a launch writes its
//! record over the blanks; a slot nobody holds whose lock has another size, or with something
//! named `slot-<n>.<x>` beside it, is a dead run's. A dead run's directory is removed and made
//! afresh, as before: nothing that still has the old one open or mounted (an orphaned
//! container) reaches the next run's.

use std::path::PathBuf;

/// A fresh id for one run: time and pid, unique on this host.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{nanos:x}-{}", std::process::id())
}

/// The most runs of one user that hold a slot at once; a run beyond them gets a directory of
/// its own (and so decides afresh).
const SLOTS: usize = 64;

/// The run's private temporary directory (the sandbox's `TMPDIR`), removed when dropped.
///
/// It lives in `$XDG_RUNTIME_DIR` or the system temp dir, under a per-user `palisade-<uid>`
/// directory that must be ours, a real directory and closed to others — a directory another user
/// planted there (or a symlink) is refused rather than used.
///
/// A supervisor killed outright (SIGKILL, a power cut) cannot remove its directory, so each run
/// holds an exclusive `flock` on `run-<id>.lock` beside it for as long as it lives, and every
/// new run first removes the directories whose lock is free: the kernel drops a lock with its
/// holder, however it died, so a live run is never swept.
#[derive(Debug)]
pub struct RunTempDir {
    path: PathBuf,
    lock_path: PathBuf,
    /// Held for the run's lifetime (close-on-exec: no sandboxed process inherits it).
    lock: std::fs::File,
    /// A slot's lock file stays (its record blanked) when the run ends: removing a lock file
    /// another run may have just opened would let two runs hold "the" lock of one slot. Its
    /// directory stays too, emptied.
    slot: bool,
}

impl RunTempDir {
    /// The run's temp dir in the first free slot, `<base>/palisade-<uid>/slot-<n>` (mode 0700),
    /// emptied of what a dead run left in it; when every slot is held, a directory of its own
    /// ([`RunTempDir::create`]). Dead runs' leftovers are swept first.
    pub fn in_slot(run_id: &str) -> Result<RunTempDir, std::io::Error> {
        RunTempDir::slot_in(&private_parent()?, run_id)
    }

    /// [`RunTempDir::in_slot`] in `parent`.
    fn slot_in(parent: &std::path::Path, run_id: &str) -> Result<RunTempDir, std::io::Error> {
        use std::os::unix::fs::OpenOptionsExt;
        sweep_dead_runs(parent);
        for n in 0..SLOTS {
            let lock_path = parent.join(format!("slot-{n}.lock"));
            let lock = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&lock_path)?;
            if lock.try_lock().is_err() {
                // A live run's (or a sweeper emptying it right now).
                continue;
            }
            if !clear_slot(parent, n, &lock) {
                // What a command left there could not be removed (a directory it made
                // unwritable, say): the next run must not find it in its `TMPDIR`, so this
                // slot is passed over, and stays marked for a later sweep to try again.
                continue;
            }
            mark_in_use(&lock)?;
            let path = slot_directory(&parent.join(format!("slot-{n}")))?;
            return Ok(RunTempDir {
                path,
                lock_path,
                lock,
                slot: true,
            });
        }
        RunTempDir::create_in(parent, run_id)
    }

    /// Creates `<base>/palisade-<uid>/run-<id>` with mode 0700, after sweeping the directories
    /// of runs that died without removing theirs.
    pub fn create(run_id: &str) -> Result<RunTempDir, std::io::Error> {
        let parent = private_parent()?;
        sweep_dead_runs(&parent);
        RunTempDir::create_in(&parent, run_id)
    }

    /// `run-<id>` in `parent`, with its lock.
    fn create_in(parent: &std::path::Path, run_id: &str) -> Result<RunTempDir, std::io::Error> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // The lock is taken under a name sweepers ignore and then renamed into place (the lock
        // goes with the file): a `run-<id>.lock` a sweeper can lock is a dead run's, so it must
        // never be visible unlocked -- a concurrent run's sweep would take it for one and remove
        // it between its creation and its lock.
        let lock_path = run_lock_path(&parent.join(format!("run-{run_id}")));
        let pending = parent.join(format!("{PENDING_LOCK_PREFIX}{run_id}.lock"));
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&pending)?;
        if let Err(e) = lock
            .try_lock()
            .map_err(std::io::Error::from)
            .and_then(|()| std::fs::rename(&pending, &lock_path))
        {
            let _ = std::fs::remove_file(&pending);
            return Err(std::io::Error::other(format!(
                "cannot lock `{}`: {e}",
                lock_path.display()
            )));
        }
        let path = parent.join(format!("run-{run_id}"));
        let created = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .and_then(|()| std::fs::canonicalize(&path));
        match created {
            Ok(path) => Ok(RunTempDir {
                path,
                lock_path,
                lock,
                slot: false,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&lock_path);
                Err(e)
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for RunTempDir {
    fn drop(&mut self) {
        if self.slot {
            // Still held: the next run finds an empty slot and a blank record. The record last,
            // and only once the slot is empty: a supervisor killed in between, or something
            // that would not go, leaves the slot marked for the next run or sweep to empty.
            if empty_directory(&self.path) {
                blank_record(&self.lock);
            }
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
            let _ = std::fs::remove_file(&self.lock_path);
        }
    }
}

/// `<base>/palisade-<uid>`, made if missing: `$XDG_RUNTIME_DIR` or the system temp dir, and a
/// directory that must be ours, a real directory and closed to others — a directory another
/// user planted there (or a symlink) is refused rather than used.
fn private_parent() -> Result<PathBuf, std::io::Error> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let base = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        None => std::env::temp_dir(),
        Some(dir) if dir.is_absolute() && dir.is_dir() => dir,
        // Set but unusable: said, rather than quietly putting the run somewhere else.
        Some(dir) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "XDG_RUNTIME_DIR `{}` is not an absolute path to a directory; fix or unset it",
                    dir.display()
                ),
            ));
        }
    };
    let uid = crate::facts::current_uid();
    let parent = base.join(format!("palisade-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&parent) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&parent)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "`{}` is not a private directory of this user; refusing to use it",
            parent.display()
        )));
    }
    Ok(parent)
}

/// Empties slot `n` of `parent`, whose `lock` the caller holds (so no live run uses it): kills
/// what a dead run's launch recorded in the lock, removes its siblings `slot-<n>.<suffix>`
/// (observed masks unmounted first) and blanks the record; `slot-<n>` is removed when a dead
/// run left it (its record was not blank), else emptied. Returns whether `slot-<n>` is now
/// gone or empty.
fn clear_slot(parent: &std::path::Path, n: usize, lock: &std::fs::File) -> bool {
    let dead_run = !record_is_blank(lock);
    let mut cleared = true;
    if dead_run {
        kill_leftovers(&format!("slot-{n}"), lock);
    }
    let dir = format!("slot-{n}");
    let lock_name = format!("slot-{n}.lock");
    let siblings = format!("slot-{n}.");
    if let Ok(entries) = std::fs::read_dir(parent) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name == dir.as_str() {
                if dead_run || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    remove_entry(&entry);
                    cleared = std::fs::symlink_metadata(entry.path()).is_err();
                } else {
                    cleared = empty_directory(&entry.path());
                }
            } else if name.starts_with(&siblings) && name != lock_name.as_str() {
                remove_entry(&entry);
            }
        }
    }
    if cleared {
        blank_record(lock);
    }
    cleared
}

/// The length of a slot's record: a launch writes `<pid> <start ticks>` (at most 28 bytes) over
/// its blanks.
const RECORD_LEN: usize = 32;

/// What follows the record while a run holds the slot: not a number, so never taken for a start
/// time ([`palisade_shims::supervise::kill_group_leftovers`] reads the first two words).
const IN_USE: u8 = b'-';

/// Marks the slot whose `lock` the caller just took and emptied as in use: [`RECORD_LEN`]
/// blanks, for the launch's record, and [`IN_USE`]. From now on a sweep that finds the slot
/// free takes it for a dead run's.
fn mark_in_use(mut lock: &std::fs::File) -> Result<(), std::io::Error> {
    use std::io::{Seek, Write};
    let mut marked = [b' '; RECORD_LEN + 1];
    marked[RECORD_LEN] = IN_USE;
    lock.rewind()?;
    lock.write_all(&marked)?;
    lock.rewind()?;
    Ok(())
}

/// Whether a slot's lock of `len` bytes is clean by its size alone: empty, or blanks only.
fn clean_size(len: u64) -> bool {
    len == 0 || usize::try_from(len) == Ok(RECORD_LEN)
}

/// Whether the record in `lock` (read from its start) is empty or blank; the file's offset is
/// back at the start after.
fn record_is_blank(mut lock: &std::fs::File) -> bool {
    use std::io::{Read, Seek};
    let mut record = Vec::new();
    let read = lock
        .rewind()
        .and_then(|()| lock.take(MAX_BLANKED_RECORD + 1).read_to_end(&mut record));
    let _ = lock.rewind();
    read.is_ok() && record.iter().all(|b| *b == b' ')
}

/// Whether a slot whose lock is `entry` looks left by a dead run, from the lock's size alone
/// (one `stat` per slot, without its lock: a hint, which [`clear_slot`] checks again under it).
fn left_behind(entry: &std::fs::DirEntry) -> bool {
    entry.metadata().is_ok_and(|meta| !clean_size(meta.len()))
}

/// The slot's directory `path`, made if missing, and checked: a real directory (no symlink),
/// ours, mode 0700 (reset if a command changed it: the directory is the sandbox's `TMPDIR`,
/// whose mode the command may set). Canonical.
fn slot_directory(path: &std::path::Path) -> Result<PathBuf, std::io::Error> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(path)?;
            if !meta.is_dir() || meta.uid() != crate::facts::current_uid() {
                return Err(std::io::Error::other(format!(
                    "`{}` is not a directory of this user's; remove it",
                    path.display()
                )));
            }
            if meta.mode() & 0o7777 != 0o700 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
            }
        }
        Err(e) => return Err(e),
    }
    std::fs::canonicalize(path)
}

/// Removes everything in directory `path`, keeping the directory; returns whether all of it
/// went.
fn empty_directory(path: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(path) else {
        return false;
    };
    let mut emptied = true;
    for entry in entries {
        let removed = entry.and_then(|entry| {
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())
            } else {
                std::fs::remove_file(entry.path())
            }
        });
        emptied &= removed.is_ok();
    }
    emptied
}

/// The longest lock [`record_is_blank`] reads.
const MAX_BLANKED_RECORD: u64 = 64;

/// Leaves a slot's lock clean ([`clean_size`]): [`RECORD_LEN`] blanks, written over the record
/// within the block the file already has, and the file cut to them (which frees nothing); one
/// that is clean already is left alone. A blank record is an empty one ([`kill_leftovers`]).
fn blank_record(mut lock: &std::fs::File) {
    use std::io::{Seek, Write};
    let len = lock.metadata().map_or(0, |meta| meta.len());
    if clean_size(len) && record_is_blank(lock) {
        return;
    }
    let blanked = lock
        .rewind()
        .and_then(|()| lock.write_all(&[b' '; RECORD_LEN]))
        .and_then(|()| lock.set_len(RECORD_LEN as u64))
        .and_then(|()| lock.rewind());
    if blanked.is_err() {
        let _ = lock.set_len(0);
    }
}

/// Removes one leftover of a dead run: observed masks are unmounted before their mountpoint
/// can go.
fn remove_entry(entry: &std::fs::DirEntry) {
    #[cfg(target_os = "linux")]
    if entry.file_name().to_string_lossy().ends_with(".masks") {
        palisade_shims::fusemask::unmount_stale(&entry.path());
    }
    if entry.file_type().is_ok_and(|t| t.is_dir()) {
        let _ = std::fs::remove_dir_all(entry.path());
    } else {
        let _ = std::fs::remove_file(entry.path());
    }
}

/// The lock of the run whose temp dir is `dir`: `run-<id>.lock` beside `run-<id>`.
fn run_lock_path(dir: &std::path::Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    dir.with_file_name(name)
}

/// The lock of the run whose temp dir is `dir`, opened for the supervisor to record its
/// launch in ([`palisade_shims::supervise::Launch::pid_record`]); `None` when the run has none (a temp dir
/// that is not a [`RunTempDir`]).
#[cfg(target_os = "linux")]
pub(crate) fn open_run_lock_for_record(dir: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(run_lock_path(dir))
        .ok()
}

/// How a run's lock file is named until it is locked ([`RunTempDir::create`]).
const PENDING_LOCK_PREFIX: &str = ".pending-run-";

/// Removes what dead runs left in `parent`: `run-<id>` and its siblings `run-<id>.<suffix>`
/// (the docker backend's bound files) when `run-<id>.lock` is there and nobody holds it (its
/// supervisor is gone), or when there is no lock file at all (made by a palisade before these
/// locks) and the supervisor pid, the id's second part, no longer exists. Best effort: what
/// cannot be removed now is tried again by the next run.
fn sweep_dead_runs(parent: &std::path::Path) {
    use std::collections::BTreeMap;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    // id → the entries named after it.
    let mut runs: BTreeMap<String, Vec<std::fs::DirEntry>> = BTreeMap::new();
    // Slots a dead run left (something beside them, or a record in their lock): emptied below
    // if nobody holds them. A slot's own directory stays from run to run.
    let mut slots = std::collections::BTreeSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_str().unwrap_or_default();
        if let Some(rest) = name.strip_prefix("slot-") {
            let (n, suffix) = rest.split_once('.').unwrap_or((rest, ""));
            let left = match suffix {
                "" => false,
                "lock" => left_behind(&entry),
                _ => true,
            };
            if left && let Ok(n) = n.parse::<usize>() {
                slots.insert(n);
            }
            continue;
        }
        // A lock not yet renamed into place: its run is starting, unless its supervisor died
        // in that instant.
        if let Some(id) = name
            .strip_prefix(PENDING_LOCK_PREFIX)
            .and_then(|rest| rest.strip_suffix(".lock"))
        {
            if supervisor_gone(id) {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        let id = name
            .strip_prefix("run-")
            .map(|rest| rest.split('.').next().unwrap_or(rest).to_owned());
        if let Some(id) = id {
            runs.entry(id).or_default().push(entry);
        }
    }
    for n in slots {
        // A dead run's slot, which no run has taken since: emptied now, so that what it left
        // (and any process it left) does not wait for the next run that needs that slot.
        if let Ok(Some(lock)) = take_free_lock(&parent.join(format!("slot-{n}.lock"))) {
            clear_slot(parent, n, &lock);
        }
    }
    for (id, entries) in runs {
        let lock_path = parent.join(format!("run-{id}.lock"));
        // Held until the entries are gone, so a sweeper that starts now waits out this one.
        let lock = if entries.iter().any(|e| e.path() == lock_path) {
            let Ok(Some(lock)) = take_free_lock(&lock_path) else {
                continue;
            };
            kill_leftovers(&id, &lock);
            Some(lock)
        } else {
            if !supervisor_gone(&id) {
                continue;
            }
            None
        };
        for entry in entries.iter().filter(|e| e.path() != lock_path) {
            remove_entry(entry);
        }
        if lock.is_some() {
            let _ = std::fs::remove_file(&lock_path);
        }
    }
}

/// Kills what the launch recorded in dead run `id`'s lock left running (bwrap's child orphaned
/// in setup, [`palisade_shims::supervise::kill_group_leftovers`]), and says so.
fn kill_leftovers(id: &str, mut lock: &std::fs::File) {
    let mut record = String::new();
    // A blank record (a slot's, emptied: `blank_record`) is an empty one.
    if std::io::Read::read_to_string(&mut lock, &mut record).is_err() || record.trim().is_empty() {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // A record without its start time (the supervisor was killed between the child's pid
        // and its own append) is bounded by the run's clock: its id's, or for a slot, when the
        // record was written (less a second, as for an id), since the slot was emptied just
        // before the launch.
        let not_before = run_start_ticks(id).or_else(|| written_ticks(lock));
        let killed = palisade_shims::supervise::kill_group_leftovers(&record, not_before);
        if killed > 0 {
            say!(
                "palisade: killed {killed} process{} left by run {id}, whose supervisor was killed while bwrap set the sandbox up",
                if killed == 1 { "" } else { "es" }
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = id;
}

/// Whether run `id`, whose temp dir would be in `parent`, is over: its lock is there and
/// nobody holds it, or there is no lock (a sweep removed it, or the run kept it elsewhere) and
/// its supervisor is gone. What outlives a run (a container) may then be removed.
#[cfg(target_os = "linux")]
pub(crate) fn run_is_over(parent: &std::path::Path, id: &str) -> bool {
    match take_free_lock(&parent.join(format!("run-{id}.lock"))) {
        Ok(free) => free.is_some(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => supervisor_gone(id),
        Err(_) => false,
    }
}

/// A run's lock, locked, if nobody holds it (its run is over); `Ok(None)` while its run holds
/// it. The lock stays taken as long as the file is open.
fn take_free_lock(lock_path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    // Writable too: a slot's record is emptied through it.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(lock_path)?;
    Ok(lock.try_lock().is_ok().then_some(lock))
}

/// Whether the supervisor of run `<nanos hex>-<pid>[-…]` is gone: no process has its pid, or
/// the one that has it started after the run did (the pid was reused). An id in another form
/// is never judged gone.
fn supervisor_gone(id: &str) -> bool {
    let Some(Ok(pid)) = id.split('-').nth(1).map(str::parse::<u32>) else {
        return false;
    };
    let Some(run_secs) = run_started_secs(id) else {
        return false;
    };
    let Ok(stat) = palisade_shims::procfile::read_to_string(format!("/proc/{pid}/stat")) else {
        return pid > 0;
    };
    // Field 22, counted after the command name's closing parenthesis: start time in clock
    // ticks after boot.
    let ticks = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|t| t.parse::<u64>().ok());
    let (Some(ticks), Some(boot)) = (ticks, boot_time_secs()) else {
        return false;
    };
    let hz = crate::facts::clock_ticks_per_second().max(1);
    let started_secs = boot.saturating_add(ticks / hz);
    // Whole seconds on both sides: a process started two seconds after the run is another.
    started_secs > run_secs.saturating_add(1)
}

/// When run `<nanos hex>-<pid>[-…]` started, in clock ticks after boot, less a second (the
/// clocks' whole seconds): no process of the run started before it.
#[cfg(target_os = "linux")]
fn run_start_ticks(id: &str) -> Option<u64> {
    let hz = crate::facts::clock_ticks_per_second().max(1);
    Some(
        run_started_secs(id)?
            .checked_sub(boot_time_secs()?)?
            .saturating_sub(1)
            .saturating_mul(hz),
    )
}

/// When `lock`'s record was last written, in clock ticks after boot, less a second.
#[cfg(target_os = "linux")]
fn written_ticks(lock: &std::fs::File) -> Option<u64> {
    let written = lock
        .metadata()
        .ok()?
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    let hz = crate::facts::clock_ticks_per_second().max(1);
    Some(
        written
            .checked_sub(boot_time_secs()?)?
            .saturating_sub(1)
            .saturating_mul(hz),
    )
}

/// The run id's own clock: the whole second (since the epoch) in which run
/// `<nanos hex>-<pid>[-…]` started.
fn run_started_secs(id: &str) -> Option<u64> {
    let nanos = u128::from_str_radix(id.split('-').next()?, 16).ok()?;
    u64::try_from(nanos / 1_000_000_000).ok()
}

/// When the machine booted, in seconds since the epoch (`btime` of `/proc/stat`).
fn boot_time_secs() -> Option<u64> {
    palisade_shims::procfile::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|t| t.trim().parse::<u64>().ok())
        })
}

/// An empty directory of this run's (mode 0700), removed when dropped: the mountpoint a
/// Landlock sandbox's init mounts the observed masks on, in its own mount namespace.
#[cfg(target_os = "linux")]
pub(crate) struct EmptyDir(PathBuf);

#[cfg(target_os = "linux")]
impl EmptyDir {
    pub(crate) fn create(path: &std::path::Path) -> std::io::Result<EmptyDir> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(path)?;
        Ok(EmptyDir(path.to_path_buf()))
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(target_os = "linux")]
impl Drop for EmptyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    /// A run's lock is visible only once it is held, so a concurrent run's sweep never takes a
    /// starting run for a dead one; a pending lock left by a supervisor that died at that very
    /// instant is swept by the pid check.
    #[test]
    fn a_starting_runs_lock_is_never_swept_and_a_dead_ones_pending_lock_is() {
        let base = tempfile::tempdir().unwrap();
        let parent = base.path();
        // A dead run's pending lock: its pid does not exist.
        let dead = parent.join(format!("{PENDING_LOCK_PREFIX}1-2147483646.lock"));
        std::fs::write(&dead, b"").unwrap();
        // A live one's: this process.
        let live = parent.join(format!("{PENDING_LOCK_PREFIX}{}.lock", new_run_id()));
        std::fs::write(&live, b"").unwrap();
        // A run's held lock, as `create` leaves it.
        let held = parent.join("run-2-1.lock");
        let file = std::fs::File::create(&held).unwrap();
        file.try_lock().unwrap();
        sweep_dead_runs(parent);
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(held.exists());
        drop(file);
        sweep_dead_runs(parent);
        assert!(!held.exists(), "a lock nobody holds is a dead run's");
    }

    fn blank(path: &std::path::Path) -> bool {
        std::fs::read(path).unwrap().iter().all(|b| *b == b' ')
    }

    /// Runs take the first free slot, the same path from one run to the next; a slot a live run
    /// holds is skipped, and one a run left is empty for the next: the same directory, emptied
    /// (mode 0700 again if the command changed it), its record blank.
    #[test]
    fn runs_take_the_first_free_slot_and_leave_it_empty() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = tempfile::tempdir().unwrap();
        let parent = base.path();
        let first = RunTempDir::slot_in(parent, "1-1").unwrap();
        assert!(!blank(&parent.join("slot-0.lock")), "a held slot is marked");
        std::fs::write(first.path().join("scratch"), b"x").unwrap();
        std::fs::create_dir(first.path().join("tree")).unwrap();
        std::fs::write(first.path().join("tree/leaf"), b"x").unwrap();
        std::fs::set_permissions(first.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let inode = std::fs::metadata(first.path()).unwrap().ino();
        let second = RunTempDir::slot_in(parent, "2-1").unwrap();
        let slot = |n: usize| {
            std::fs::canonicalize(parent)
                .unwrap()
                .join(format!("slot-{n}"))
        };
        assert_eq!(first.path(), slot(0));
        assert_eq!(second.path(), slot(1));
        drop(first);
        assert_eq!(std::fs::read_dir(slot(0)).unwrap().count(), 0, "emptied");
        assert!(blank(&parent.join("slot-0.lock")));
        let third = RunTempDir::slot_in(parent, "3-1").unwrap();
        assert_eq!(third.path(), slot(0));
        let meta = std::fs::metadata(third.path()).unwrap();
        assert_eq!(meta.ino(), inode, "a clean slot keeps its directory");
        assert_eq!(meta.mode() & 0o7777, 0o700);
        drop((second, third));
    }

    /// A slot whose directory keeps something that cannot be removed (here a mount, as root) is
    /// passed over, and stays marked: the next run's `TMPDIR` never holds what a command left.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_slot_that_cannot_be_emptied_is_passed_over() {
        if crate::facts::current_uid() != 0 {
            eprintln!("skipped: mounting needs root");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let parent = base.path();
        let first = RunTempDir::slot_in(parent, "1-1").unwrap();
        let stuck = first.path().join("stuck");
        std::fs::create_dir(&stuck).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "none"])
            .arg(&stuck)
            .status()
            .unwrap();
        assert!(mounted.success());
        drop(first);
        assert!(!blank(&parent.join("slot-0.lock")), "still marked");
        let next = RunTempDir::slot_in(parent, "2-1").unwrap();
        assert!(next.path().ends_with("slot-1"), "{}", next.path().display());
        assert!(
            std::process::Command::new("umount")
                .arg(&stuck)
                .status()
                .unwrap()
                .success()
        );
        drop(next);
        let after = RunTempDir::slot_in(parent, "3-1").unwrap();
        assert!(after.path().ends_with("slot-0"));
        assert_eq!(std::fs::read_dir(after.path()).unwrap().count(), 0);
    }

    /// A dead run's slot (its record still there) gets a directory made afresh: whatever still
    /// holds the old one open, an orphaned container's mount say, does not reach the next run's.
    #[test]
    fn a_dead_runs_slot_directory_is_made_afresh() {
        use std::os::unix::fs::MetadataExt;
        let base = tempfile::tempdir().unwrap();
        let parent = base.path();
        std::fs::create_dir(parent.join("slot-0")).unwrap();
        std::fs::write(parent.join("slot-0/planted"), b"x").unwrap();
        // The mark of a run that held the slot and died before its launch wrote a record.
        std::fs::write(parent.join("slot-0.lock"), [IN_USE]).unwrap();
        let old = std::fs::File::open(parent.join("slot-0")).unwrap();
        let inode = old.metadata().unwrap().ino();
        let next = RunTempDir::slot_in(parent, "1-1").unwrap();
        assert!(next.path().ends_with("slot-0"));
        assert_eq!(std::fs::read_dir(next.path()).unwrap().count(), 0);
        assert_ne!(std::fs::metadata(next.path()).unwrap().ino(), inode);
    }

    /// What a run killed outright left in its slot (its files, its observed masks' mountpoint,
    /// its launch record) is gone before the slot is used again, and with the next run's sweep
    /// when no run needs that slot; a slot a live run holds is left alone.
    #[test]
    fn a_dead_runs_slot_is_emptied_by_the_sweep_and_a_held_one_is_not() {
        let base = tempfile::tempdir().unwrap();
        let parent = base.path();
        for n in [3, 4] {
            std::fs::create_dir(parent.join(format!("slot-{n}"))).unwrap();
            std::fs::write(parent.join(format!("slot-{n}/planted")), b"x").unwrap();
            std::fs::create_dir(parent.join(format!("slot-{n}.masks"))).unwrap();
            // A record no process matches (group 1 is never signalled).
            std::fs::write(parent.join(format!("slot-{n}.lock")), b"1 0").unwrap();
        }
        let held = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(parent.join("slot-4.lock"))
            .unwrap();
        held.try_lock().unwrap();
        // A slot a run left clean: its directory and blank record stay as they are.
        std::fs::create_dir(parent.join("slot-5")).unwrap();
        std::fs::write(parent.join("slot-5.lock"), [b' '; RECORD_LEN]).unwrap();
        sweep_dead_runs(parent);
        assert!(!parent.join("slot-3").exists());
        assert!(!parent.join("slot-3.masks").exists());
        assert!(blank(&parent.join("slot-3.lock")));
        assert!(parent.join("slot-5").is_dir());
        assert!(parent.join("slot-4/planted").exists(), "a live run's slot");
        assert!(parent.join("slot-4.masks").exists());
        drop(held);
        // The next run takes slot 0, and the sweep before it empties slot 4.
        let next = RunTempDir::slot_in(parent, "5-1").unwrap();
        assert!(next.path().ends_with("slot-0"));
        assert!(!parent.join("slot-4").exists());
    }

    /// Start time of `pid` in clock ticks after boot (`/proc/<pid>/stat` field 22).
    #[cfg(target_os = "linux")]
    fn start_ticks(pid: u32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let (_, rest) = stat.rsplit_once(')').unwrap();
        rest.split_whitespace().nth(19).unwrap().parse().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_dead_runs_orphaned_bwrap_child_is_killed_by_the_next_sweep_and_nothing_else() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        use std::process::Command;
        let base = tempfile::tempdir().unwrap();
        let parent = base.path().join("runs");
        std::fs::create_dir(&parent).unwrap();
        // The kernel names a process after the path it was executed by: stand-ins for bwrap.
        let bwrap = base.path().join("bwrap");
        std::os::unix::fs::symlink("/bin/sleep", &bwrap).unwrap();
        let spawn = |program: &std::path::Path, group: i32| {
            Command::new(program)
                .arg("60")
                .process_group(group)
                .spawn()
                .unwrap()
        };
        // A dead run: its launch (the group's leader, bwrap) and bwrap's child left in the
        // group, next to a process of another name in the group and a bwrap in another group.
        let mut launched = spawn(&bwrap, 0);
        let group = i32::try_from(launched.id()).unwrap();
        let mut orphan = spawn(&bwrap, group);
        let mut other_name = spawn(std::path::Path::new("/bin/sleep"), group);
        let mut other_group = spawn(&bwrap, 0);
        let record = format!("{group} {}", start_ticks(launched.id()));
        std::fs::write(parent.join("run-1-2147483646.lock"), &record).unwrap();
        // A live run with the same record (its lock held), and a dead one whose launch
        // started after these processes did.
        let held = parent.join("run-2-1.lock");
        std::fs::write(&held, &record).unwrap();
        let lock = std::fs::File::open(&held).unwrap();
        lock.try_lock().unwrap();
        sweep_dead_runs(&parent);
        assert_eq!(launched.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert_eq!(orphan.wait().unwrap().signal(), Some(libc::SIGKILL));
        for survivor in [&mut other_name, &mut other_group] {
            assert!(survivor.try_wait().unwrap().is_none());
        }
        let mut later = spawn(&bwrap, 0);
        let later_group = i32::try_from(later.id()).unwrap();
        let after = start_ticks(later.id()) + 1_000_000;
        std::fs::write(
            parent.join("run-3-2147483646.lock"),
            format!("{later_group} {after}"),
        )
        .unwrap();
        sweep_dead_runs(&parent);
        assert!(later.try_wait().unwrap().is_none());
        assert!(held.exists());
        // A supervisor killed right after the exec wrote no start time, only the child's pid:
        // the run id's clock bounds the start instead (a run of the future finds nothing).
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let future = now + 3_600_000_000_000;
        std::fs::write(
            parent.join(format!("run-{future:x}-2147483646.lock")),
            later_group.to_string(),
        )
        .unwrap();
        sweep_dead_runs(&parent);
        assert!(later.try_wait().unwrap().is_none());
        std::fs::write(
            parent.join(format!("run-{now:x}-2147483646.lock")),
            later_group.to_string(),
        )
        .unwrap();
        sweep_dead_runs(&parent);
        assert_eq!(later.wait().unwrap().signal(), Some(libc::SIGKILL));
        // A dead run's slot: the record bounds the launch by its own start time, or without
        // one by when it was written; a launch recorded as starting later is left alone.
        let mut slotted = spawn(&bwrap, 0);
        let slotted_group = i32::try_from(slotted.id()).unwrap();
        std::fs::create_dir(parent.join("slot-7")).unwrap();
        std::fs::write(
            parent.join("slot-7.lock"),
            format!("{slotted_group} {}", start_ticks(slotted.id()) + 1_000_000),
        )
        .unwrap();
        sweep_dead_runs(&parent);
        assert!(slotted.try_wait().unwrap().is_none(), "a later launch's");
        std::fs::create_dir(parent.join("slot-7")).unwrap();
        std::fs::write(parent.join("slot-7.lock"), slotted_group.to_string()).unwrap();
        sweep_dead_runs(&parent);
        assert_eq!(slotted.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(!parent.join("slot-7").exists());
        assert!(blank(&parent.join("slot-7.lock")));
        for mut process in [other_name, other_group] {
            process.kill().unwrap();
            process.wait().unwrap();
        }
        drop(lock);
    }
}
