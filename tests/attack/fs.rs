//! Filesystem attacks: read denied paths by every route, write outside the workspace, tamper
//! with protected and denied paths, make devices and setuid files, unmount `/proc`, open kernel
//! knobs for writing.
//!
//! Read attacks succeed only if the content (or a directory entry) carries the test's marker,
//! so reading an empty mask or a different file is a block, not a success.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::guard::{self, Ns};
use crate::{Args, Attack, Outcome, io_detail, sys};

/// Read at most this much of any file.
const READ_LIMIT: u64 = 1 << 20;

/// Read `path` and look for `marker`.
pub fn read_marker(path: &Path, marker: &str) -> Outcome {
    let file = match fs::File::open(path) {
        Ok(file) => file,
        Err(error) => {
            return Outcome::blocked(io_detail(&format!("open `{}`", path.display()), &error));
        }
    };
    let mut content = Vec::new();
    if let Err(error) = file.take(READ_LIMIT).read_to_end(&mut content) {
        return Outcome::blocked(io_detail(&format!("read `{}`", path.display()), &error));
    }
    if String::from_utf8_lossy(&content).contains(marker) {
        Outcome::succeeded(format!("read the marker from `{}`", path.display()))
    } else {
        Outcome::blocked(format!(
            "read {} bytes from `{}` without the marker",
            content.len(),
            path.display()
        ))
    }
}

/// `--path P --marker M`: open and read `P` directly.
pub fn read(args: &Args) -> Attack {
    Ok(read_marker(
        Path::new(args.get("path")?),
        args.get("marker")?,
    ))
}

/// `--path D --marker M`: list `D`; succeeds if an entry is named `M`.
pub fn list_dir(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    let marker = args.get("marker")?;
    let entries = fs::read_dir(path)
        .map_err(|e| Outcome::blocked(io_detail(&format!("list `{}`", path.display()), &e)))?;
    let mut seen = 0usize;
    for entry in entries.flatten() {
        seen += 1;
        if entry.file_name().to_string_lossy() == marker {
            return Ok(Outcome::succeeded(format!(
                "listed `{}` and found the marker entry",
                path.display()
            )));
        }
    }
    Ok(Outcome::blocked(format!(
        "listed {seen} entries in `{}`, none is the marker",
        path.display()
    )))
}

/// `--path P --marker M`: read `<prefix>/P` (e.g. `/proc/self/root/P`).
pub fn read_under(args: &Args, prefix: &str) -> Attack {
    let path = args.get("path")?;
    let joined = format!("{prefix}/{}", path.trim_start_matches('/'));
    Ok(read_marker(Path::new(&joined), args.get("marker")?))
}

/// `--pid N --path P --marker M` (root) or `--pid N --name F --marker M` (cwd): read a file
/// through another process's `/proc/N/root` or `/proc/N/cwd`.
pub fn read_proc_pid(args: &Args, link: &str) -> Attack {
    let pid: i32 = args.num("pid")?;
    let rest = match link {
        "cwd" => args.get("name")?.to_string(),
        _ => args.get("path")?.trim_start_matches('/').to_string(),
    };
    let joined = format!("/proc/{pid}/{link}/{rest}");
    Ok(read_marker(Path::new(&joined), args.get("marker")?))
}

/// `--workspace W --path P --marker M`: plant `W/<link>` → `P` and read through it.
pub fn read_symlink(args: &Args) -> Attack {
    let workspace = Path::new(args.get("workspace")?);
    let target = Path::new(args.get("path")?);
    let link = workspace.join(unique_name("symlink"));
    std::os::unix::fs::symlink(target, &link)
        .map_err(|e| Outcome::blocked(io_detail(&format!("symlink `{}`", link.display()), &e)))?;
    Ok(read_marker(&link, args.get("marker")?))
}

/// `--workspace W --path P --marker M`: hardlink `P` into `W` and read the link. Failing to
/// create the link is a block.
pub fn read_hardlink(args: &Args) -> Attack {
    let workspace = Path::new(args.get("workspace")?);
    let target = Path::new(args.get("path")?);
    let link = workspace.join(unique_name("hardlink"));
    fs::hard_link(target, &link).map_err(|e| {
        Outcome::blocked(io_detail(
            &format!("hardlink to `{}`", target.display()),
            &e,
        ))
    })?;
    Ok(read_marker(&link, args.get("marker")?))
}

/// `--workspace W --path P --marker M`: from `W` as the working directory, read `P` through
/// a relative path of `..` components (`../../x/y`).
pub fn read_dotdot(args: &Args) -> Attack {
    let workspace = Path::new(args.get("workspace")?);
    let target = Path::new(args.get("path")?);
    std::env::set_current_dir(workspace)
        .map_err(|e| Outcome::error(io_detail(&format!("chdir `{}`", workspace.display()), &e)))?;
    let depth = workspace
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut relative = PathBuf::new();
    for _ in 0..depth {
        relative.push("..");
    }
    for component in target.components() {
        if let Component::Normal(part) = component {
            relative.push(part);
        }
    }
    Ok(read_marker(&relative, args.get("marker")?))
}

/// `--path P [--mkdirs 1]`: create `P` (exclusively) and write to it; with `--mkdirs`, create
/// its missing parents first. Used for writes outside the workspace, missing protected paths
/// and denied paths that do not exist yet.
pub fn create(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    if args.opt("mkdirs").is_some()
        && let Some(parent) = path.parent()
    {
        fs::create_dir_all(parent).map_err(|e| {
            Outcome::blocked(io_detail(&format!("mkdir -p `{}`", parent.display()), &e))
        })?;
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Outcome::blocked(io_detail(&format!("create `{}`", path.display()), &e)))?;
    file.write_all(b"palisade escape battery was here\n")
        .map_err(|e| Outcome::blocked(io_detail(&format!("write `{}`", path.display()), &e)))?;
    Ok(Outcome::succeeded(format!(
        "created and wrote `{}`",
        path.display()
    )))
}

/// `--path P`: append a line to an existing file.
pub fn append(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    let mut file = OpenOptions::new().append(true).open(path).map_err(|e| {
        Outcome::blocked(io_detail(
            &format!("open `{}` for append", path.display()),
            &e,
        ))
    })?;
    file.write_all(b"palisade escape battery was here\n")
        .map_err(|e| Outcome::blocked(io_detail(&format!("append to `{}`", path.display()), &e)))?;
    Ok(Outcome::succeeded(format!(
        "appended to `{}`",
        path.display()
    )))
}

/// `--workspace W --target P`: plant `W/<link>` → `P` (outside) and create `P` through it.
pub fn write_symlink(args: &Args) -> Attack {
    let workspace = Path::new(args.get("workspace")?);
    let target = Path::new(args.get("target")?);
    let link = workspace.join(unique_name("wlink"));
    std::os::unix::fs::symlink(target, &link)
        .map_err(|e| Outcome::blocked(io_detail(&format!("symlink `{}`", link.display()), &e)))?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&link)
        .map_err(|e| {
            Outcome::blocked(io_detail(&format!("open through `{}`", link.display()), &e))
        })?;
    file.write_all(b"palisade escape battery was here\n")
        .map_err(|e| Outcome::blocked(io_detail("write through the symlink", &e)))?;
    Ok(Outcome::succeeded(format!(
        "wrote `{}` through a workspace symlink",
        target.display()
    )))
}

/// `--path P`: write a sibling file and rename it over `P`.
pub fn replace_rename(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    let parent = path.parent().unwrap_or(Path::new("/"));
    let temp = parent.join(unique_name("replace"));
    fs::write(&temp, b"palisade escape battery replaced this\n")
        .map_err(|e| Outcome::blocked(io_detail(&format!("write `{}`", temp.display()), &e)))?;
    match fs::rename(&temp, path) {
        Ok(()) => Ok(Outcome::succeeded(format!(
            "renamed a new file over `{}`",
            path.display()
        ))),
        Err(error) => {
            let _ = fs::remove_file(&temp);
            Ok(Outcome::blocked(io_detail(
                &format!("rename over `{}`", path.display()),
                &error,
            )))
        }
    }
}

/// `--path P`: unlink a file.
pub fn unlink(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    Ok(match fs::remove_file(path) {
        Ok(()) => Outcome::succeeded(format!("unlinked `{}`", path.display())),
        Err(error) => Outcome::blocked(io_detail(&format!("unlink `{}`", path.display()), &error)),
    })
}

/// `--path P`: rename `P` (a denied path or its ancestor) to a sibling name.
pub fn rename(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    let moved = path.with_file_name(unique_name("moved"));
    Ok(match fs::rename(path, &moved) {
        Ok(()) => Outcome::succeeded(format!(
            "renamed `{}` to `{}`",
            path.display(),
            moved.display()
        )),
        Err(error) => Outcome::blocked(io_detail(&format!("rename `{}`", path.display()), &error)),
    })
}

/// `--path P`: remove an (empty) directory.
pub fn rmdir(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    Ok(match fs::remove_dir(path) {
        Ok(()) => Outcome::succeeded(format!("removed directory `{}`", path.display())),
        Err(error) => Outcome::blocked(io_detail(&format!("rmdir `{}`", path.display()), &error)),
    })
}

/// `--path P --expect-outside-ns …`: make a character device (1:3, like `/dev/null`) at `P`
/// (a test-owned path; removed again at once). Guarded by any sandbox namespace: the node is
/// made in the test's own directory, never in the host's `/dev`.
pub fn mknod(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Mnt, Ns::Pid, Ns::User])?;
    let path = Path::new(args.get("path")?);
    sys::mknod_char(path, 1, 3)
        .map_err(|e| Outcome::blocked(io_detail(&format!("mknod `{}`", path.display()), &e)))?;
    let meta = fs::symlink_metadata(path)
        .map_err(|e| Outcome::error(io_detail("stat the new node", &e)))?;
    let is_char = meta.mode() & libc::S_IFMT == libc::S_IFCHR;
    let _ = fs::remove_file(path);
    Ok(if is_char {
        Outcome::succeeded(format!("made character device 1:3 at `{}`", path.display()))
    } else {
        Outcome::blocked(format!(
            "mknod returned but `{}` is no character device",
            path.display()
        ))
    })
}

/// Whether the file at `path` has the setuid or setgid bit that `mode` asked for.
fn check_special_bits(path: &Path, wanted: u32) -> Outcome {
    match fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.mode();
            if mode & wanted & 0o6000 != 0 {
                Outcome::succeeded(format!("`{}` has mode {:o}", path.display(), mode & 0o7777))
            } else {
                Outcome::blocked(format!(
                    "`{}` has mode {:o}: the bit was stripped",
                    path.display(),
                    mode & 0o7777
                ))
            }
        }
        Err(error) => Outcome::blocked(io_detail(&format!("stat `{}`", path.display()), &error)),
    }
}

/// The binary the setuid attacks copy: `true`, so that a copy that does keep its setuid bit
/// (outside, or in a sandbox that fails) grants nothing while it exists.
fn harmless_binary() -> Result<&'static str, Outcome> {
    ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| Outcome::error("no `true` binary to copy"))
}

/// `--path P`: copy a binary (`true`) to `P` and `chmod` it to `mode` (04755 or 02755).
pub fn setuid_chmod(args: &Args, mode: u32) -> Attack {
    let path = Path::new(args.get("path")?);
    fs::copy(harmless_binary()?, path).map_err(|e| {
        Outcome::blocked(io_detail(
            &format!("copy a binary to `{}`", path.display()),
            &e,
        ))
    })?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| {
        Outcome::blocked(io_detail(
            &format!("chmod {mode:o} `{}`", path.display()),
            &e,
        ))
    })?;
    Ok(check_special_bits(path, mode))
}

/// `--path P`: copy a binary (`true`) to `P` and `fchmod` the open file to 04755.
pub fn setuid_fchmod(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    fs::copy(harmless_binary()?, path).map_err(|e| {
        Outcome::blocked(io_detail(
            &format!("copy a binary to `{}`", path.display()),
            &e,
        ))
    })?;
    let file =
        fs::File::open(path).map_err(|e| Outcome::error(io_detail("reopen the copy", &e)))?;
    file.set_permissions(fs::Permissions::from_mode(0o4755))
        .map_err(|e| {
            Outcome::blocked(io_detail(&format!("fchmod 4755 `{}`", path.display()), &e))
        })?;
    Ok(check_special_bits(path, 0o4755))
}

/// `--path P`: create `P` with mode 04755 in `open(2)` itself (no chmod at all). Checked right
/// after the create: a later write by a process without CAP_FSETID would clear the bit anyway.
pub fn setuid_create(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o4755)
        .open(path)
        .map_err(|e| {
            Outcome::blocked(io_detail(
                &format!("create `{}` mode 4755", path.display()),
                &e,
            ))
        })?;
    drop(file);
    Ok(check_special_bits(path, 0o4755))
}

/// `--expect-outside-ns …`: detach the `/proc` mount.
pub fn umount_proc(args: &Args) -> Attack {
    guard::outside_host(args, &[Ns::Mnt])?;
    Ok(match sys::umount2(Path::new("/proc"), libc::MNT_DETACH) {
        Ok(()) => Outcome::succeeded("unmounted /proc"),
        Err(error) => Outcome::blocked(io_detail("umount /proc", &error)),
    })
}

/// `--path P`: open a kernel knob (`/proc/sys/kernel/core_pattern`, `/proc/sysrq-trigger`)
/// for writing and close it again WITHOUT writing anything.
pub fn open_write_only(args: &Args) -> Attack {
    let path = Path::new(args.get("path")?);
    if !path.starts_with("/proc") && !path.starts_with("/sys") {
        return Err(Outcome::error(
            "`fs.open-write-only` only opens /proc and /sys knobs",
        ));
    }
    Ok(match OpenOptions::new().write(true).open(path) {
        Ok(file) => {
            drop(file);
            Outcome::succeeded(format!(
                "opened `{}` for writing (wrote nothing)",
                path.display()
            ))
        }
        Err(error) => Outcome::blocked(io_detail(
            &format!("open `{}` for writing", path.display()),
            &error,
        )),
    })
}

/// A name unique to this process, for links and temporary files the attacks plant.
pub fn unique_name(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(".palisade-{what}-{}-{nanos}", std::process::id())
}
