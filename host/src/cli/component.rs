//! `palisade component` and `palisade wit`: the engine and its contract, for other runtimes.

use crate::exit::Exit;
use crate::report::{ErrorCode, Failure};
use crate::runtime;
use crate::store::ComponentStore;

use super::args::ComponentArgs;
use super::{CommandResult, write_stdout};

/// `palisade component`: the embedded engine to a file, stdout or a content-addressed store.
pub fn component(args: &ComponentArgs) -> CommandResult {
    let bytes = runtime::embedded_component();
    if let Some(dir) = &args.archive {
        let stored = ComponentStore::new(dir)
            .put(bytes)
            .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
        // The store's entry is what replay will run: say where it is and what it is.
        write_stdout(format!("sha256:{} {}\n", stored.digest, stored.path.display()).as_bytes())?;
    }
    match &args.out {
        Some(path) => std::fs::write(path, bytes).map_err(|e| {
            Failure::new(
                ErrorCode::Internal,
                format!("cannot write `{}`: {e}", path.display()),
            )
        })?,
        None if args.archive.is_some() => {}
        // 1.3 MB of wasm is no use on a terminal (and can upset it).
        None if std::io::IsTerminal::is_terminal(&std::io::stdout()) => {
            return Err(Failure::new(
                ErrorCode::UsageInvalid,
                "stdout is a terminal: the component is binary",
            )
            .hint("write it with `--out FILE`, or redirect: `palisade component > engine.wasm`"));
        }
        None => write_stdout(bytes)?,
    }
    Ok(Exit::Success)
}

/// `palisade wit`: the engine's WIT contract.
pub fn wit() -> CommandResult {
    write_stdout(crate::WIT_TEXT.as_bytes())?;
    Ok(Exit::Success)
}
