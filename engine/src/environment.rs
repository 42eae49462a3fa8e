//! The environment allowlist: which of the launcher's environment variables a command may see.
//!
//! Why this lives in the engine: the allowlist is host configuration that changes what a command
//! can learn (secrets travel in environment variables more often than in files), so the decision
//! must show it, and a secret named on purpose must be visible there, not buried in a host file.
//! The rules are also needed by the host, which applies them to its real environment at launch
//! and checks host configuration files with them; they are pure functions of names (never of
//! values), shared as vocabulary the way the model types are, so the host and the decision can
//! never disagree about what an entry means.
//!
//! Entries are exact names (`LANG`) or prefix patterns (`LC_*`: a name-character prefix then one
//! `*`). A pattern never passes a secret-looking name ([`is_secret_looking`]); such a variable
//! reaches the command only when the allowlist names it exactly, and the decision lists it.

use crate::text;

/// The allowlist used when the host configures none: locale, terminal and identity variables,
/// and where to find certificate authorities (a custom CA is common behind corporate proxies,
/// and a path to a CA bundle is no secret). `PATH`, `HOME` and `TMPDIR` are not listed: the
/// launcher always sets them itself. Sorted.
pub const DEFAULT_ALLOWLIST: [&str; 15] = [
    "COLORTERM",
    "CURL_CA_BUNDLE",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "LOGNAME",
    "NODE_EXTRA_CA_CERTS",
    "NO_COLOR",
    "REQUESTS_CA_BUNDLE",
    "SHELL",
    "SSL_CERT_DIR",
    "SSL_CERT_FILE",
    "TERM",
    "TZ",
    "USER",
];

/// The most entries an allowlist may hold.
pub const MAX_ENTRIES: usize = 256;

/// The longest entry accepted, in bytes.
pub const MAX_ENTRY_BYTES: usize = 128;

/// One allowlist entry, parsed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Entry {
    /// Exactly this name.
    Exact(String),
    /// Every name starting with this prefix, except secret-looking ones.
    Prefix(String),
}

/// Parses one allowlist entry, or says (one line) why it is not one.
pub fn parse_entry(entry: &str) -> Result<Entry, String> {
    if entry.is_empty() {
        return Err("must not be empty".into());
    }
    if entry.len() > MAX_ENTRY_BYTES {
        return Err(format!("is longer than {MAX_ENTRY_BYTES} bytes"));
    }
    let (name, pattern) = match entry.strip_suffix('*') {
        Some(prefix) => (prefix, true),
        None => (entry, false),
    };
    if pattern && name.is_empty() {
        return Err("`*` alone would pass every variable; name them".into());
    }
    if !is_name(name) {
        return Err(format!(
            "{} is not a variable name{}; expected letters, digits and `_` (not starting with a digit){}",
            text::quote(entry),
            if pattern { " prefix" } else { "" },
            if pattern {
                ", then one trailing `*`"
            } else {
                ", or such a prefix and `*`"
            }
        ));
    }
    if !pattern {
        return Ok(Entry::Exact(name.to_owned()));
    }
    // Every name this pattern could match would be secret-looking (`AWS_*`, `MY_TOKEN_*`): it
    // could never pass anything, and the author almost certainly meant to pass secrets.
    // Appending one letter that no secret rule contains or ends with decides that for every
    // extension at once (see `prefix_matches_only_secrets` in the tests).
    if is_secret_looking(&format!("{name}X")) {
        return Err(format!(
            "pattern {} matches only secret-looking names, which a pattern never passes; name each variable exactly",
            text::quote(entry)
        ));
    }
    Ok(Entry::Prefix(name.to_owned()))
}

/// How an allowlist treats one variable name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Named exactly; `secret` when the name looks like a secret (passed because it was named).
    Exact { secret: bool },
    /// Matched by this pattern (never a secret-looking name).
    Pattern(String),
    /// Withheld: matched by nothing, or a secret-looking name only a pattern matched.
    Withheld { secret: bool },
}

impl Verdict {
    /// Whether the variable passes.
    pub fn passes(&self) -> bool {
        !matches!(self, Verdict::Withheld { .. })
    }
}

/// What `entries` (parsed) say about `name`. Exact entries win; a pattern never passes a
/// secret-looking name.
pub fn verdict(entries: &[Entry], name: &str) -> Verdict {
    let secret = is_secret_looking(name);
    if entries
        .iter()
        .any(|entry| matches!(entry, Entry::Exact(exact) if exact == name))
    {
        return Verdict::Exact { secret };
    }
    if !secret {
        for entry in entries {
            if let Entry::Prefix(prefix) = entry
                && name.starts_with(prefix.as_str())
            {
                return Verdict::Pattern(format!("{prefix}*"));
            }
        }
    }
    Verdict::Withheld { secret }
}

/// Parses every entry, skipping invalid ones (callers validate first).
pub fn parse_all<'a>(entries: impl IntoIterator<Item = &'a str>) -> Vec<Entry> {
    entries
        .into_iter()
        .filter_map(|entry| parse_entry(entry).ok())
        .collect()
}

/// Words that make a name secret-looking wherever they stand (`SSH_AUTH_SOCK`, `NPM_KEY`).
const SECRET_WORDS: [&str; 10] = [
    "AUTH",
    "COOKIE",
    "CREDENTIAL",
    "CREDENTIALS",
    "DSN",
    "KEY",
    "PASS",
    "PAT",
    "PRIVATE",
    "SIGNATURE",
];

/// Fragments that make a name secret-looking inside any word (`GITHUB_TOKEN`, `APITOKEN`,
/// `CLIENT_SECRET_ID`, `PGPASSWORD`).
const SECRET_FRAGMENTS: [&str; 6] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "APIKEY",
    "PASSPHRASE",
];

/// First words of cloud and vault credential families: everything below them is treated as
/// secret (`AWS_ACCESS_KEY_ID`, `AWS_SESSION_TOKEN`, but also `AWS_PROFILE`, which is harmless
/// and passes when named exactly).
const SECRET_FAMILIES: [&str; 7] = ["AWS", "AZURE", "GCP", "GCLOUD", "GOOGLE", "VAULT", "OP"];

/// Whole names that carry access without looking like it.
const SECRET_NAMES: [&str; 6] = [
    "DATABASE_URL",
    "GPG_AGENT_INFO",
    "KUBECONFIG",
    "NETRC",
    "SSH_AGENT_PID",
    "SSH_AUTH_SOCK",
];

/// Whether a variable name looks like it holds a secret or grants access. Case-insensitive,
/// word-based (words are separated by `_`): see the lists above. Conservative on purpose: a
/// false positive costs an exact entry in the allowlist, a false negative leaks a credential
/// through a pattern.
pub fn is_secret_looking(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if SECRET_NAMES.contains(&upper.as_str()) {
        return true;
    }
    let mut words = upper.split('_').filter(|word| !word.is_empty());
    if words
        .next()
        .is_some_and(|first| SECRET_FAMILIES.contains(&first))
        && upper.contains('_')
    {
        return true;
    }
    upper.split('_').any(|word| {
        SECRET_WORDS.contains(&word)
            || SECRET_FRAGMENTS
                .iter()
                .any(|fragment| word.contains(fragment))
    })
}

/// Whether `name` is a portable variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    #[test]
    fn secret_looking_names() {
        for name in [
            "GITHUB_TOKEN",
            "GH_TOKEN",
            "NPM_TOKEN",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE",
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "STRIPE_KEY",
            "CLIENT_SECRET",
            "MY_SECRETS_FILE",
            "PGPASSWORD",
            "DB_PASS",
            "SSH_AUTH_SOCK",
            "SSH_AGENT_PID",
            "GPG_AGENT_INFO",
            "KUBECONFIG",
            "GITHUB_PAT",
            "SENTRY_DSN",
            "DATABASE_URL",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "VAULT_ADDR",
            "ssh_auth_sock",
            "APITOKEN",
            "GPG_PASSPHRASE",
        ] {
            assert!(is_secret_looking(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "TERM",
            "GIT_AUTHOR_NAME",
            "GITHUB_SHA",
            "GITHUB_REF",
            "CARGO_HOME",
            "KEYBOARD_LAYOUT",
            "XAUTHORITY",
            "PWD",
            "OLDPWD",
            "DBUS_SESSION_BUS_ADDRESS",
            "AWS",
            "OPTIONS",
            "PASSAGE",
        ] {
            assert!(!is_secret_looking(name), "{name}");
        }
    }

    #[test]
    fn entries_parse_and_refuse() {
        assert_eq!(parse_entry("LANG"), Ok(Entry::Exact("LANG".into())));
        assert_eq!(parse_entry("LC_*"), Ok(Entry::Prefix("LC_".into())));
        assert_eq!(parse_entry("XDG*"), Ok(Entry::Prefix("XDG".into())));
        // An exact secret is accepted (and flagged by the decision).
        assert_eq!(
            parse_entry("NPM_TOKEN"),
            Ok(Entry::Exact("NPM_TOKEN".into()))
        );
        for bad in [
            "",
            "*",
            "1ABC",
            "A-B",
            "A*B",
            "A**",
            "A B",
            "AWS_*",
            "MY_TOKEN_*",
            "GH_TOKEN*",
        ] {
            assert!(parse_entry(bad).is_err(), "{bad:?}");
        }
        assert!(parse_entry(&"A".repeat(MAX_ENTRY_BYTES + 1)).is_err());
        // Not refused: some names below these prefixes are not secrets.
        for good in ["GITHUB_*", "TOK*", "MY_KEY*", "AWS*", "CARGO_*"] {
            assert!(parse_entry(good).is_ok(), "{good}");
        }
    }

    /// The one-letter probe in `parse_entry` is sound: when it says "only secrets", every
    /// extension of the prefix is secret-looking, for a sample of prefixes and extensions.
    #[test]
    fn prefix_matches_only_secrets() {
        let prefixes = [
            "AWS_",
            "MY_TOKEN_",
            "GH_TOKEN",
            "X_KEY_",
            "SSH_AUTH_",
            "A_PASS_",
            "TOKEN",
        ];
        let extensions = ["", "A", "B_C", "_", "1", "Z9_Q", "KEYS", "S"];
        for prefix in prefixes {
            assert!(parse_entry(&format!("{prefix}*")).is_err(), "{prefix}");
            for extension in extensions {
                let name = format!("{prefix}{extension}");
                assert!(is_secret_looking(&name), "{name}");
            }
        }
    }

    #[test]
    fn patterns_never_pass_secrets() {
        let entries = parse_all(["LANG", "GITHUB_*", "GITHUB_TOKEN", "NPM_*"]);
        assert_eq!(verdict(&entries, "LANG"), Verdict::Exact { secret: false });
        assert_eq!(
            verdict(&entries, "GITHUB_SHA"),
            Verdict::Pattern("GITHUB_*".into())
        );
        assert_eq!(
            verdict(&entries, "GITHUB_TOKEN"),
            Verdict::Exact { secret: true }
        );
        assert_eq!(
            verdict(&entries, "NPM_TOKEN"),
            Verdict::Withheld { secret: true }
        );
        assert_eq!(
            verdict(&entries, "HOME"),
            Verdict::Withheld { secret: false }
        );
        assert!(!verdict(&entries, "NPM_CONFIG__AUTH").passes());
        assert!(verdict(&entries, "NPM_CONFIG_REGISTRY").passes());
    }

    #[test]
    fn default_allowlist_is_valid_and_secret_free() {
        let mut sorted = DEFAULT_ALLOWLIST.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, DEFAULT_ALLOWLIST);
        for entry in DEFAULT_ALLOWLIST {
            let parsed = parse_entry(entry).unwrap();
            if let Entry::Exact(name) = parsed {
                assert!(!is_secret_looking(&name), "{name}");
            }
        }
    }
}
