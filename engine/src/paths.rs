//! Path rules: what a host path must look like, how a policy's `deniedReadPaths` entry is
//! resolved, and when one path contains another.
//!
//! Why purely textual: the engine does no I/O, so it cannot canonicalise against the real
//! filesystem. Instead host paths must arrive already normalised (the host's job), and policy
//! paths are normalised here by fixed rules. Symlinks are the shim's concern; an escape through
//! `..` is refused outright because its meaning depends on the filesystem.

/// Why a host path is unacceptable, or `Ok` when it is absolute and normalised.
///
/// Normalised means: starts with `/`, no NUL, no empty (`//`), `.` or `..` components, and no
/// trailing `/` unless the path is `/` itself.
pub fn check_host_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err(String::from(
            "must be an absolute path, found an empty string",
        ));
    }
    if path.contains('\0') {
        return Err(String::from("must not contain a nul byte"));
    }
    if !path.starts_with('/') {
        return Err(format!("must be absolute: {}", crate::text::quote(path)));
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err(format!(
            "must be normalised (no trailing `/`): {}",
            crate::text::quote(path)
        ));
    }
    for component in path.split('/').skip(1) {
        match component {
            "" => {
                return Err(format!(
                    "must be normalised (no `//`): {}",
                    crate::text::quote(path)
                ));
            }
            "." => {
                return Err(format!(
                    "must be normalised (no `.` component): {}",
                    crate::text::quote(path)
                ));
            }
            ".." => {
                return Err(format!(
                    "must not contain a `..` component: {}",
                    crate::text::quote(path)
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Resolves one `deniedReadPaths` entry to a normalised absolute path, expanding `~/` with
/// `home` (a normalised absolute path).
pub(crate) fn resolve_denied(raw: &str, home: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Err(String::from("must not be empty"));
    }
    if raw.contains('\0') {
        return Err(format!(
            "must not contain a nul byte: {}",
            crate::text::quote(raw)
        ));
    }
    let (base, rest) = if let Some(rest) = raw.strip_prefix("~/") {
        (home, rest)
    } else if raw == "~" {
        return Err(String::from(
            "`~` alone is not allowed; name a path below it with `~/`",
        ));
    } else if raw.starts_with('~') {
        return Err(format!(
            "`~user` paths are not supported, only `~/`: {}",
            crate::text::quote(raw)
        ));
    } else if let Some(rest) = raw.strip_prefix('/') {
        ("/", rest)
    } else {
        return Err(format!(
            "must be absolute or `~/`-relative: {}",
            crate::text::quote(raw)
        ));
    };
    let mut components = Vec::new();
    for component in rest.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                return Err(format!(
                    "must not contain a `..` component: {}",
                    crate::text::quote(raw)
                ));
            }
            name => components.push(name),
        }
    }
    Ok(join(base, &components.join("/")))
}

/// The last component of a normalised absolute path (`docker.sock` of `/run/docker.sock`).
pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `base` joined with a relative path without `//`; `base` when `relative` is empty.
pub(crate) fn join(base: &str, relative: &str) -> String {
    if relative.is_empty() {
        base.to_owned()
    } else if base.ends_with('/') {
        format!("{base}{relative}")
    } else {
        format!("{base}/{relative}")
    }
}

/// Whether `ancestor` is `path` or a directory above it (both normalised absolute paths).
pub(crate) fn contains(ancestor: &str, path: &str) -> bool {
    if ancestor == path || ancestor == "/" {
        return true;
    }
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_must_be_normalised_absolute() {
        assert!(check_host_path("/").is_ok());
        assert!(check_host_path("/home/u/proj").is_ok());
        assert!(check_host_path("/a/...").is_ok());
        for bad in [
            "", "rel", "/a/", "/a//b", "/a/./b", "/a/../b", "/a\0b", "//",
        ] {
            assert!(check_host_path(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn denied_paths_resolve_tilde_and_normalise() {
        let home = "/home/u";
        assert_eq!(
            resolve_denied("~/.ssh", home).as_deref(),
            Ok("/home/u/.ssh")
        );
        assert_eq!(resolve_denied("~/", home).as_deref(), Ok("/home/u"));
        assert_eq!(
            resolve_denied("/etc//ssl/./certs/", home).as_deref(),
            Ok("/etc/ssl/certs")
        );
        assert_eq!(resolve_denied("/", home).as_deref(), Ok("/"));
        assert_eq!(resolve_denied("~/a", "/").as_deref(), Ok("/a"));
        for bad in [
            "",
            "~",
            "~root/.ssh",
            "relative",
            "./x",
            "/a/../b",
            "~/..",
            "/a\0",
        ] {
            assert!(
                resolve_denied(bad, home).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn containment_is_by_component() {
        assert!(contains("/home/u", "/home/u"));
        assert!(contains("/home/u", "/home/u/proj"));
        assert!(contains("/", "/anything"));
        assert!(!contains("/home/u", "/home/user"));
        assert!(!contains("/home/u/proj", "/home/u"));
    }

    #[test]
    fn join_avoids_double_slashes() {
        assert_eq!(join("/", ".github"), "/.github");
        assert_eq!(join("/w", ".github"), "/w/.github");
        assert_eq!(join("/w", ""), "/w");
    }
}
