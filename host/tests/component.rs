//! The embedded engine component: its shape (imports nothing, exports exactly the decision
//! interface) and the wasmtime runtime around it (cache, fuel, limits, errors).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use palisade::runtime::{
    EMBEDDED_COMPONENT_SHA256, EngineRuntime, LoadOptions, RuntimeError, embedded_component,
};
use palisade_engine::{Backend, BackendProbe, Capability, DecisionInput, HostFacts, NetworkMode};
use wasmparser::{ComponentExternalKind, Parser, Payload};

const DECISION_EXPORT: &str = "palisade:engine/decision@0.8.0";

/// Top-level imports and exports of a component (nested modules and components skipped).
struct Shape {
    imports: Vec<String>,
    exports: Vec<(String, ComponentExternalKind)>,
    is_component: bool,
}

fn shape(bytes: &[u8]) -> Shape {
    let mut shape = Shape {
        imports: Vec::new(),
        exports: Vec::new(),
        is_component: false,
    };
    // Every nested module or component starts with its own `Version` and ends with `End`.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.expect("the component parses") {
            Payload::Version { encoding, .. } => {
                depth += 1;
                if depth == 1 {
                    shape.is_component = encoding == wasmparser::Encoding::Component;
                }
            }
            Payload::End(_) => depth -= 1,
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import = import.expect("import parses");
                    shape
                        .imports
                        .push(format!("{} ({:?})", import.name.full_name(), import.ty));
                }
            }
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export = export.expect("export parses");
                    shape
                        .exports
                        .push((export.name.full_name().into_owned(), export.kind));
                }
            }
            _ => {}
        }
    }
    shape
}

#[test]
fn embedded_component_imports_nothing() {
    let shape = shape(embedded_component());
    assert!(shape.is_component, "the embedded bytes are a component");
    println!("imports: {:?}", shape.imports);
    assert!(
        shape.imports.is_empty(),
        "the engine component must import nothing, found {:?}",
        shape.imports
    );
}

#[test]
fn embedded_component_exports_exactly_the_decision_interface() {
    let shape = shape(embedded_component());
    println!("exports: {:?}", shape.exports);
    assert_eq!(
        shape.exports,
        vec![(
            String::from(DECISION_EXPORT),
            ComponentExternalKind::Instance
        )]
    );
}

#[test]
fn embedded_digest_matches_bytes() {
    assert_eq!(
        palisade_engine::output::sha256_hex(embedded_component()),
        EMBEDDED_COMPONENT_SHA256
    );
}

fn sample_input() -> DecisionInput {
    DecisionInput {
        document: Some(String::from(
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: demo\n\
             spec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    networkMode: none\n",
        )),
        document_name: String::from("taskpack.yaml"),
        host: HostFacts {
            writable_roots: vec![String::from("/tmp/palisade-task")],
            default_backend_order: vec![Backend::LinuxBwrap, Backend::LinuxLandlock],
            ..HostFacts::linux_cli("/home/user", "/home/user/work")
        },
        probes: vec![BackendProbe {
            backend: Backend::LinuxBwrap,
            available: true,
            reason: String::from("bwrap ran `true` in a new namespace"),
            capabilities: Capability::ALL.to_vec(),
            network_modes: NetworkMode::ALL.to_vec(),
            network_bridge: true,
            version: String::from("bubblewrap 0.8.0"),
            limitations: Vec::new(),
            landlock_proc: None,
        }],
        narrow_allowed_domains: None,
        execution_mode: None,
        budget_flags: None,
        task_contract: None,
        policy_flags: None,
    }
}

/// A cache shared by the tests that are not about the cache (each would otherwise compile the
/// component again); concurrent writers also exercise the atomic rename.
fn shared() -> LoadOptions {
    static CACHE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    options(CACHE.get_or_init(|| tempfile::tempdir().unwrap()).path())
}

fn options(cache: &Path) -> LoadOptions {
    LoadOptions {
        component: None,
        cache_dir: Some(cache.to_path_buf()),
        fuel_per_call: None,
    }
}

fn cached_entries(cache: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(cache.join("compiled"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .collect();
    entries.sort();
    entries
}

#[test]
fn round_trip_through_the_cache_matches_the_native_engine() {
    let cache = tempfile::tempdir().unwrap();
    let input = sample_input();
    let native = palisade_engine::decide(&input);

    let first = EngineRuntime::load(&options(cache.path())).unwrap();
    assert!(!first.cache_hit());
    assert_eq!(first.cache_problem(), None);
    assert_eq!(first.component_sha256(), EMBEDDED_COMPONENT_SHA256);
    let mut instance = first.instantiate().unwrap();
    let outcome = instance.decide(&input).unwrap();
    assert_eq!(outcome, native, "component and native engine agree");
    let json_outcome = instance
        .decide_json(&serde_json::to_string(&input).unwrap())
        .unwrap();
    assert_eq!(
        json_outcome,
        palisade_engine::decide_json(&serde_json::to_string(&input).unwrap())
    );

    let entries = cached_entries(cache.path());
    assert_eq!(entries.len(), 1, "one compiled entry: {entries:?}");

    let second = EngineRuntime::load(&options(cache.path())).unwrap();
    assert!(second.cache_hit(), "second load comes from the cache");
    assert_eq!(second.cache_problem(), None);
    let again = second.instantiate().unwrap().decide(&input).unwrap();
    assert_eq!(again.digest, outcome.digest);
    assert_eq!(again, outcome);
}

#[cfg(unix)]
#[test]
fn cache_directory_is_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let cache = tempfile::tempdir().unwrap();
    EngineRuntime::load(&options(cache.path())).unwrap();
    let mode = std::fs::metadata(cache.path().join("compiled"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let entry = &cached_entries(cache.path())[0];
    for file in [entry.clone(), entry.with_extension("check")] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    }
}

#[test]
fn corrupt_cache_entries_are_recompiled() {
    let cache = tempfile::tempdir().unwrap();
    let input = sample_input();
    let reference = EngineRuntime::load(&options(cache.path()))
        .unwrap()
        .instantiate()
        .unwrap()
        .decide(&input)
        .unwrap();
    let entry = cached_entries(cache.path())[0].clone();
    let good = std::fs::read(&entry).unwrap();

    let check = entry.with_extension("check");
    let good_check = std::fs::read_to_string(&check).unwrap();

    // A flipped bit in the compiled code, a truncated file, garbage, an empty file, and bytes
    // whose digest the check file holds but which wasmtime rejects.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x01;
    let truncated = good[..good.len() / 2].to_vec();
    let bogus = b"\x7fELF not really a compiled component".to_vec();
    let forged_check = format!(
        "palisade compiled component v2\nsha256 {}\n",
        palisade_engine::output::sha256_hex(&bogus)
    );

    for (label, bytes, check_text) in [
        ("flipped", flipped, &good_check),
        ("truncated", truncated, &good_check),
        ("garbage", b"garbage".to_vec(), &good_check),
        ("empty", Vec::new(), &good_check),
        ("forged", bogus, &forged_check),
        (
            "no digest",
            good.clone(),
            &"palisade compiled component v2\n".to_owned(),
        ),
    ] {
        std::fs::write(&entry, &bytes).unwrap();
        std::fs::write(&check, check_text).unwrap();
        let runtime = EngineRuntime::load(&options(cache.path()))
            .unwrap_or_else(|e| panic!("{label}: a bad cache entry must not be fatal: {e}"));
        assert!(!runtime.cache_hit(), "{label}: not a hit");
        let problem = runtime.cache_problem().unwrap_or_default().to_string();
        println!("{label}: {problem}");
        assert!(!problem.is_empty(), "{label}: the problem is reported");
        let outcome = runtime.instantiate().unwrap().decide(&input).unwrap();
        assert_eq!(outcome, reference, "{label}");
        // The entry was rewritten and is good again.
        assert_eq!(
            std::fs::read(&entry).unwrap(),
            good,
            "{label}: entry rewritten"
        );
        assert!(
            EngineRuntime::load(&options(cache.path()))
                .unwrap()
                .cache_hit(),
            "{label}"
        );
    }
}

/// A load that verified an entry records the file's identity, and later loads of that very
/// file skip hashing it; a file changed in place since is still verified, and rejected.
#[test]
fn a_verified_entry_is_recognised_and_a_change_in_place_is_not() {
    let cache = tempfile::tempdir().unwrap();
    EngineRuntime::load(&options(cache.path())).unwrap();
    let entry = cached_entries(cache.path())[0].clone();
    let check = entry.with_extension("check");
    let written = std::fs::read_to_string(&check).unwrap();
    assert_eq!(written.lines().count(), 2, "{written}");
    // An identity is recorded only for a file that has not changed for two seconds.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert!(
        EngineRuntime::load(&options(cache.path()))
            .unwrap()
            .cache_hit()
    );
    let verified = std::fs::read_to_string(&check).unwrap();
    assert!(
        verified.starts_with(&written)
            && verified
                .lines()
                .nth(2)
                .unwrap()
                .starts_with("verified dev="),
        "{verified}"
    );
    assert!(
        EngineRuntime::load(&options(cache.path()))
            .unwrap()
            .cache_hit()
    );
    assert_eq!(std::fs::read_to_string(&check).unwrap(), verified);

    // The same bytes with one bit flipped, written in place (same inode, same size).
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&entry)
        .and_then(|mut file| std::io::Write::write_all(&mut file, &bytes))
        .unwrap();
    let runtime = EngineRuntime::load(&options(cache.path())).unwrap();
    assert!(!runtime.cache_hit());
    assert!(
        runtime
            .cache_problem()
            .unwrap_or_default()
            .contains("digest mismatch"),
        "{:?}",
        runtime.cache_problem()
    );
}

#[cfg(unix)]
#[test]
fn a_cache_writable_by_others_is_not_used() {
    use std::os::unix::fs::PermissionsExt as _;
    let cache = tempfile::tempdir().unwrap();
    let compiled = cache.path().join("compiled");
    std::fs::create_dir(&compiled).unwrap();
    std::fs::set_permissions(&compiled, std::fs::Permissions::from_mode(0o777)).unwrap();
    let runtime = EngineRuntime::load(&options(cache.path())).unwrap();
    assert!(!runtime.cache_hit());
    let problem = runtime.cache_problem().unwrap_or_default();
    assert!(problem.contains("writable by other users"), "{problem}");
    assert!(
        std::fs::read_dir(&compiled).unwrap().next().is_none(),
        "nothing written"
    );
    runtime
        .instantiate()
        .unwrap()
        .decide(&sample_input())
        .unwrap();
}

#[test]
fn no_cache_dir_means_no_cache() {
    let runtime = EngineRuntime::load(&LoadOptions::default()).unwrap();
    assert!(!runtime.cache_hit());
    assert_eq!(runtime.cache_problem(), None);
}

#[test]
fn info_reports_the_engine_identity() {
    let runtime = EngineRuntime::load(&shared()).unwrap();
    let info = runtime.instantiate().unwrap().info().unwrap();
    assert_eq!(info.engine_version, palisade_engine::ENGINE_VERSION);
    assert_eq!(info.wit_version, palisade_engine::WIT_VERSION);
    assert_eq!(info.schema_version, palisade_engine::output::SCHEMA_VERSION);
    let json = serde_json::to_value(&info).unwrap();
    assert!(json.get("engineVersion").is_some(), "{json}");
}

#[test]
fn settings_are_recorded_in_camel_case() {
    let runtime = EngineRuntime::load(&shared()).unwrap();
    let settings = runtime.settings();
    assert!(settings.nan_canonicalization && settings.relaxed_simd_deterministic);
    assert!(!settings.wasmtime_version.is_empty() && settings.wasmtime_version != "unknown");
    let json = serde_json::to_value(settings).unwrap();
    for key in [
        "wasmtimeVersion",
        "fuelPerCall",
        "nanCanonicalization",
        "relaxedSimdDeterministic",
        "maxMemoryBytes",
        "maxTableElements",
        "maxInstances",
    ] {
        assert!(json.get(key).is_some(), "`{key}` missing from {json}");
    }
}

#[test]
fn fuel_exhaustion_is_an_error_and_the_instance_recovers() {
    let runtime = EngineRuntime::load(&LoadOptions {
        fuel_per_call: Some(1),
        ..shared()
    })
    .unwrap();
    let mut instance = runtime.instantiate().unwrap();
    for _ in 0..2 {
        let error = instance.decide(&sample_input()).unwrap_err();
        assert!(
            matches!(error, RuntimeError::OutOfFuel { fuel: 1 }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(!message.contains('\n'), "{message}");
        println!("{message}");
    }
}

#[test]
fn fuel_is_reset_before_every_call() {
    let runtime = EngineRuntime::load(&shared()).unwrap();
    let mut instance = runtime.instantiate().unwrap();
    let input = sample_input();
    instance.decide(&input).unwrap();
    let once = instance.fuel_consumed();
    assert!(once > 0);
    for _ in 0..3 {
        instance.decide(&input).unwrap();
    }
    assert_eq!(
        instance.fuel_consumed(),
        once,
        "each call starts from a full tank"
    );
}

#[test]
fn an_input_beyond_the_memory_limit_is_an_error() {
    let runtime = EngineRuntime::load(&shared()).unwrap();
    let mut instance = runtime.instantiate().unwrap();
    let huge = " ".repeat(300 * 1024 * 1024);
    let error = instance.decide_json(&huge).unwrap_err();
    println!("{error}");
    assert!(!error.to_string().contains('\n'));
    drop(huge);
    // The instance is replaced after the failure and works again.
    instance.decide(&sample_input()).unwrap();
}

#[test]
fn a_foreign_or_broken_component_is_an_error() {
    for bytes in [
        b"not wasm at all".to_vec(),
        b"\0asm\x01\0\0\0".to_vec(), // an empty core module, not a component
        embedded_component()[..embedded_component().len() / 2].to_vec(),
    ] {
        let error = EngineRuntime::load(&LoadOptions {
            component: Some(bytes),
            ..LoadOptions::default()
        })
        .unwrap_err();
        println!("{error}");
        assert!(!error.to_string().contains('\n'));
    }
}

#[test]
fn an_explicit_component_is_identified_by_its_digest() {
    let runtime = EngineRuntime::load(&LoadOptions {
        component: Some(embedded_component().to_vec()),
        ..shared()
    })
    .unwrap();
    assert_eq!(runtime.component_sha256(), EMBEDDED_COMPONENT_SHA256);
}

/// `cargo test -p palisade --test component -- --ignored --nocapture timings`
#[test]
#[ignore = "measurement, not a check"]
fn timings() {
    let cache = tempfile::tempdir().unwrap();
    println!("component: {} bytes", embedded_component().len());

    let start = Instant::now();
    let runtime = EngineRuntime::load(&LoadOptions::default()).unwrap();
    println!("load without cache (compile): {:?}", start.elapsed());
    drop(runtime);

    let start = Instant::now();
    let runtime = EngineRuntime::load(&options(cache.path())).unwrap();
    println!("load, cache miss (compile + write): {:?}", start.elapsed());
    assert!(!runtime.cache_hit());
    let entry = &cached_entries(cache.path())[0];
    println!(
        "compiled entry: {} bytes",
        std::fs::metadata(entry).unwrap().len()
    );
    let data = std::fs::read(entry).unwrap();
    let start = Instant::now();
    for _ in 0..20 {
        let _ = palisade_engine::output::sha256_hex(&data);
    }
    println!("sha-256 of the entry: {:?} each", start.elapsed() / 20);
    drop(runtime);

    let mut runtime = None;
    let start = Instant::now();
    for _ in 0..20 {
        runtime = Some(EngineRuntime::load(&options(cache.path())).unwrap());
    }
    println!(
        "load, cache hit, verified in full: {:?} each",
        start.elapsed() / 20
    );
    // Two seconds after it was written, a load records the entry's identity as verified.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    drop(EngineRuntime::load(&options(cache.path())).unwrap());
    let start = Instant::now();
    for _ in 0..20 {
        runtime = Some(EngineRuntime::load(&options(cache.path())).unwrap());
    }
    println!(
        "load, cache hit, identity verified before: {:?} each",
        start.elapsed() / 20
    );
    let runtime = runtime.unwrap();
    assert!(runtime.cache_hit());

    let start = Instant::now();
    for _ in 0..100 {
        drop(runtime.instantiate().unwrap());
    }
    println!("instantiate: {:?} each", start.elapsed() / 100);

    let mut instance = runtime.instantiate().unwrap();
    let input = sample_input();
    instance.decide(&input).unwrap();
    let start = Instant::now();
    for _ in 0..1000 {
        instance.decide(&input).unwrap();
    }
    println!(
        "warm decide: {:?} each, {} fuel",
        start.elapsed() / 1000,
        instance.fuel_consumed()
    );
    let start = Instant::now();
    for _ in 0..1000 {
        let _ = palisade_engine::decide(&input);
    }
    println!("native decide: {:?} each", start.elapsed() / 1000);

    // The largest document the engine accepts: how much of the fuel budget does it use?
    let mut big = sample_input();
    let mut document = String::from(
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: big\n  annotations:\n",
    );
    let mut n = 0;
    while document.len() < palisade_engine::MAX_DOCUMENT_BYTES - 100 {
        document.push_str(&format!(
            "    key{n}: \"value number {n} of a long list\"\n"
        ));
        n += 1;
    }
    document.push_str("spec:\n  sandbox:\n    networkMode: none\n");
    println!("big document: {} bytes", document.len());
    big.document = Some(document);
    let start = Instant::now();
    let outcome = instance.decide(&big).unwrap();
    println!(
        "big decide: {:?}, {} fuel of {}, {:?}",
        start.elapsed(),
        instance.fuel_consumed(),
        runtime.settings().fuel_per_call,
        outcome.verdict
    );
}
