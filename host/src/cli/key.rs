//! `palisade key`: the key that seals every audit line ([`crate::keys`]).

use crate::exit::Exit;
use crate::keys;
use crate::report::{ErrorCode, Failure};

use super::args::{KeyAction, KeyArgs};
use super::{CommandResult, write_stdout};

/// `palisade key init` / `palisade key show`.
pub fn key(args: &KeyArgs) -> CommandResult {
    match &args.action {
        KeyAction::Init(init) => {
            let dir = if init.system {
                std::path::PathBuf::from(keys::SYSTEM_DIR)
            } else {
                keys::user_dir().ok_or_else(|| {
                    Failure::new(
                        ErrorCode::InputInvalid,
                        keys::KeysError::NoUserDir.to_string(),
                    )
                })?
            };
            let public = keys::init(&dir, init.force).map_err(|e| {
                let failure = Failure::new(ErrorCode::InputInvalid, e.to_string());
                match e {
                    keys::KeysError::Exists(_) => failure,
                    _ => failure.hint("`--system` needs root; without it the key is this user's"),
                }
            })?;
            write_stdout(
                format!(
                    "key {} made: {}\npublic key: {}\nevery audit line this palisade appends is now sealed with it, and no sandbox can read {}\ncheck a file with `palisade replay FILE --trusted-key {}`; keep a copy of the public key apart from this host\n",
                    public.keyid(),
                    dir.join(keys::KEY_FILE).display(),
                    dir.join(keys::PUBLIC_FILE).display(),
                    dir.display(),
                    dir.join(keys::PUBLIC_FILE).display(),
                )
                .as_bytes(),
            )?;
            Ok(Exit::Success)
        }
        KeyAction::Show => match keys::signer() {
            Ok(Some((signer, path))) => {
                let public = path.with_file_name(keys::PUBLIC_FILE);
                write_stdout(
                    format!(
                        "key {} seals this user's audit lines: {}\npublic key: {}\n",
                        signer.keyid(),
                        path.display(),
                        public.display()
                    )
                    .as_bytes(),
                )?;
                Ok(Exit::Success)
            }
            Ok(None) => Err(Failure::new(
                ErrorCode::InputInvalid,
                "no signing key on this host: audit lines are chained, not sealed",
            )
            .hint("make one with `palisade key init`")),
            Err(e) => Err(Failure::new(ErrorCode::InputInvalid, e.to_string())),
        },
    }
}
