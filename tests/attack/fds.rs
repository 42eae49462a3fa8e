//! Inherited file descriptors: the test opens a secret and hands it to the sandbox as fd 5
//! (as a careless launcher would leak one); a sandbox must close every descriptor but stdio.

use crate::{Args, Attack, Outcome, io_detail, sys};

fn contains(buf: &[u8], marker: &str) -> bool {
    String::from_utf8_lossy(buf).contains(marker)
}

/// `--fd N --marker M`: `pread` the descriptor directly.
pub fn read(args: &Args) -> Attack {
    let fd: i32 = args.num("fd")?;
    let marker = args.get("marker")?;
    let mut buf = vec![0u8; 64 * 1024];
    // pread only: a plain read of a descriptor that is not the secret could block forever.
    let n = sys::pread_raw(fd, &mut buf, 0)
        .map_err(|e| Outcome::blocked(io_detail(&format!("read fd {fd}"), &e)))?;
    Ok(if contains(&buf[..n], marker) {
        Outcome::succeeded(format!("read the secret through inherited fd {fd}"))
    } else {
        Outcome::blocked(format!("fd {fd} is open but {n} bytes hold no marker"))
    })
}

/// `--fd N --marker M`: reopen the descriptor by its `/proc/self/fd/N` magic link.
pub fn proc_path(args: &Args) -> Attack {
    let fd: i32 = args.num("fd")?;
    let path = format!("/proc/self/fd/{fd}");
    Ok(crate::fs::read_marker(
        std::path::Path::new(&path),
        args.get("marker")?,
    ))
}

/// `--marker M`: try every open descriptor above stdio.
pub fn scan(args: &Args) -> Attack {
    let marker = args.get("marker")?;
    let mut open = Vec::new();
    for fd in 3..1024 {
        if sys::fstat_raw(fd).is_err() {
            continue;
        }
        open.push(fd);
        let mut buf = vec![0u8; 64 * 1024];
        if let Ok(n) = sys::pread_raw(fd, &mut buf, 0)
            && contains(&buf[..n], marker)
        {
            return Ok(Outcome::succeeded(format!("fd {fd} holds the secret")));
        }
    }
    Ok(Outcome::blocked(format!(
        "open descriptors above stdio: {open:?}; none holds the secret"
    )))
}
