//! `palisade`: decide, reproducibly, how an untrusted command may be isolated on this host.
//! Everything is in the library ([`palisade::cli`]); the binary only runs it.

fn main() -> std::process::ExitCode {
    palisade::cli::main()
}
