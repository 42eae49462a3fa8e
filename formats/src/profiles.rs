//! Runtime profile files (Loopwright's `TrustedRegistry` shape): which images the docker
//! backend may run, each pinned, read with the engine's reader — every offending field at its
//! path, size and nesting bounded before the YAML parser runs. Choosing a profile, checking its
//! image and launching are the CLI's (`palisade::docker`, where the format is documented).

use std::path::PathBuf;

use palisade_engine::reader::{
    self, Errors, Node, each_entry, expect_exact, expect_list, expect_mapping, expect_str,
    index_path, quote, unknown_field,
};

/// The document's `apiVersion` and `kind`.
pub const API_VERSION: &str = "loopwright.dev/v1alpha1";
pub const KIND: &str = "TrustedRegistry";

/// The largest runtime profile file read, in bytes.
pub const MAX_BYTES: u64 = 1024 * 1024;
/// The most profiles one file may hold.
pub const MAX_PROFILES: usize = 256;
/// The most `readOnlyPaths` one profile may list.
pub const MAX_READ_ONLY_PATHS: usize = 64;

/// A reference `docker` would accept, restricted to characters that need no escaping in a URL
/// path (`name[:tag][@digest]` with `/`-separated components).
pub fn valid_image_name(image: &str) -> bool {
    !image.is_empty()
        && image.len() <= 512
        && !image.starts_with(['/', '-', '.'])
        && !image.contains("..")
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@'))
}

/// A profile as read, before its pin is required (the CLI refuses an unpinned one it is asked
/// to use, with its own code).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedProfile {
    pub name: String,
    /// The image reference, as `docker` names it (`name[:tag]`).
    pub image: String,
    /// `imageId` or `digest` (`sha256:…`), when given.
    pub pin: Option<String>,
    /// Host paths visible read-only in the container.
    pub read_only_paths: Vec<PathBuf>,
    /// The profile's `budgets`, in the engine's units.
    pub budgets: Option<palisade_engine::model::BudgetLimits>,
}

/// Parses and validates a whole file (its profiles and `spec.egressBridge`) with the engine's
/// reader: every offending field, each at its path.
pub fn parse(text: &str) -> Result<(Vec<ParsedProfile>, Option<PathBuf>), Errors> {
    let mut errors = Errors::default();
    // The loader reads no more than this; the parser holds to it too, whoever calls it.
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_BYTES {
        errors.push("document", format!("is larger than {MAX_BYTES} bytes"));
        return Err(errors);
    }
    let node = match reader::parse(text) {
        Ok(node) => node,
        Err(message) => {
            errors.push("document", message);
            return Err(errors);
        }
    };
    let mut profiles = Vec::new();
    let mut bridge = None;
    if expect_mapping(&node, "document", &mut errors) {
        let (mut api, mut kind, mut metadata, mut spec) = (false, false, false, false);
        each_entry(
            &node,
            "",
            &mut errors,
            |key, path, value, errors| match key {
                "apiVersion" => {
                    api = true;
                    expect_exact(value, &path, API_VERSION, errors);
                }
                "kind" => {
                    kind = true;
                    expect_exact(value, &path, KIND, errors);
                }
                "metadata" => {
                    metadata = true;
                    walk_metadata(value, &path, errors);
                }
                "spec" => {
                    spec = true;
                    (profiles, bridge) = walk_spec(value, &path, errors);
                }
                other => errors.push(
                    path,
                    unknown_field(other, &["apiVersion", "kind", "metadata", "spec"]),
                ),
            },
        );
        for (seen, field) in [
            (api, "apiVersion"),
            (kind, "kind"),
            (metadata, "metadata"),
            (spec, "spec"),
        ] {
            if !seen {
                errors.push(field, "is required");
            }
        }
    }
    if errors.is_empty() {
        Ok((profiles, bridge))
    } else {
        Err(errors)
    }
}

/// `metadata`: a non-empty `name`, and the Loopwright shape's optional string maps.
fn walk_metadata(node: &Node, path: &str, errors: &mut Errors) {
    if !expect_mapping(node, path, errors) {
        return;
    }
    let mut named = false;
    each_entry(node, path, errors, |key, path, value, errors| match key {
        "name" => {
            named = true;
            if expect_str(value, &path, errors).is_some_and(str::is_empty) {
                errors.push(path, "must not be empty");
            }
        }
        "labels" | "annotations" => {
            if expect_mapping(value, &path, errors) {
                each_entry(value, &path, errors, |_, path, value, errors| {
                    expect_str(value, &path, errors);
                });
            }
        }
        other => errors.push(
            path,
            unknown_field(other, &["name", "labels", "annotations"]),
        ),
    });
    if !named {
        errors.push(reader::child_path(path, "name"), "is required");
    }
}

/// `spec`: the profiles and the optional egress bridge.
fn walk_spec(
    node: &Node,
    path: &str,
    errors: &mut Errors,
) -> (Vec<ParsedProfile>, Option<PathBuf>) {
    let mut profiles = Vec::new();
    let mut bridge = None;
    if !expect_mapping(node, path, errors) {
        return (profiles, bridge);
    }
    let mut listed = false;
    each_entry(node, path, errors, |key, path, value, errors| match key {
        "runtimeProfiles" => {
            listed = true;
            let Some(items) = expect_list(value, &path, MAX_PROFILES, errors) else {
                return;
            };
            if items.is_empty() {
                errors.push(&path, "must list at least one profile");
            }
            for (index, item) in items.iter().enumerate() {
                let at = index_path(&path, index);
                let profile = walk_profile(item, &at, errors);
                let named = !profile.name.is_empty();
                if named
                    && profiles
                        .iter()
                        .any(|p: &ParsedProfile| p.name == profile.name)
                {
                    errors.push(
                        reader::child_path(&at, "name"),
                        format!("duplicate profile {}", quote(&profile.name)),
                    );
                }
                profiles.push(profile);
            }
        }
        "egressBridge" => bridge = absolute_path(value, &path, errors),
        other => errors.push(
            path,
            unknown_field(other, &["runtimeProfiles", "egressBridge"]),
        ),
    });
    if !listed {
        errors.push(reader::child_path(path, "runtimeProfiles"), "is required");
    }
    (profiles, bridge)
}

/// One profile: `name`, `image`, a pin (`imageId` or `digest`, not both), `readOnlyPaths`.
fn walk_profile(node: &Node, path: &str, errors: &mut Errors) -> ParsedProfile {
    const FIELDS: [&str; 6] = [
        "name",
        "image",
        "imageId",
        "digest",
        "readOnlyPaths",
        "budgets",
    ];
    let mut profile = ParsedProfile::default();
    if !expect_mapping(node, path, errors) {
        return profile;
    }
    let mut pins: Vec<(String, String)> = Vec::new();
    let (mut named, mut imaged) = (false, false);
    each_entry(node, path, errors, |key, field, value, errors| match key {
        "name" => {
            named = true;
            let Some(name) = expect_str(value, &field, errors) else {
                return;
            };
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !valid {
                errors.push(
                    field,
                    format!("{}: letters, digits, `-`, `_`, `.` (1..64)", quote(name)),
                );
            }
            profile.name = name.to_owned();
        }
        "image" => {
            imaged = true;
            let Some(image) = expect_str(value, &field, errors) else {
                return;
            };
            if !valid_image_name(image) || image.contains('@') {
                errors.push(
                    field,
                    format!(
                        "{} is not an image reference (name[:tag]; pin with imageId or digest)",
                        quote(image)
                    ),
                );
            }
            profile.image = image.to_owned();
        }
        "imageId" | "digest" => {
            let Some(pin) = expect_str(value, &field, errors) else {
                return;
            };
            if !palisade_shims::docker::valid_image_id(pin) {
                errors.push(
                    &field,
                    format!(
                        "{} is not `sha256:` and 64 lowercase hex digits",
                        quote(pin)
                    ),
                );
            }
            pins.push((field, pin.to_owned()));
        }
        "readOnlyPaths" => {
            let Some(items) = expect_list(value, &field, MAX_READ_ONLY_PATHS, errors) else {
                return;
            };
            for (index, item) in items.iter().enumerate() {
                if let Some(path) = absolute_path(item, &index_path(&field, index), errors) {
                    profile.read_only_paths.push(path);
                }
            }
        }
        "budgets" => profile.budgets = profile_budgets(value, &field, errors),
        other => errors.push(field, unknown_field(other, &FIELDS)),
    });
    for (seen, field) in [(named, "name"), (imaged, "image")] {
        if !seen {
            errors.push(reader::child_path(path, field), "is required");
        }
    }
    match pins.as_slice() {
        [] => {}
        [(_, pin)] => profile.pin = Some(pin.clone()),
        [_, (second, _), ..] => errors.push(second, "give `imageId` or `digest`, not both"),
    }
    profile
}

/// A profile's `budgets`, named and bounded as a taskpack's `spec.budgets`, in the engine's
/// units (milliseconds, bytes).
fn profile_budgets(
    node: &Node,
    path: &str,
    errors: &mut Errors,
) -> Option<palisade_engine::model::BudgetLimits> {
    if !expect_mapping(node, path, errors) {
        return None;
    }
    let fields = palisade_engine::budgets::FIELDS;
    let names: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
    let mut limits = palisade_engine::model::BudgetLimits::default();
    each_entry(node, path, errors, |key, field, value, errors| {
        let Some((_, max)) = fields.iter().find(|(name, _)| *name == key) else {
            errors.push(field, unknown_field(key, &names));
            return;
        };
        match reader::bounded_integer(value, *max) {
            Err(message) => errors.push(field, message),
            Ok(number) => match key {
                "timeoutSeconds" => limits.timeout_millis = Some(number.saturating_mul(1000)),
                "memoryMiB" => limits.memory_bytes = Some(number.saturating_mul(1024 * 1024)),
                "maxProcesses" => limits.max_processes = Some(number),
                _ => limits.cpu_seconds = Some(number),
            },
        }
    });
    Some(limits)
}

/// An absolute, normalised host path.
fn absolute_path(node: &Node, path: &str, errors: &mut Errors) -> Option<PathBuf> {
    let value = expect_str(node, path, errors)?;
    match reader::check_absolute_path(value) {
        Ok(()) => Some(PathBuf::from(value)),
        Err(message) => {
            errors.push(path, message);
            None
        }
    }
}
